"""`python -m corrgrpo_trainer advantages` on JSON files, the config files, the per-component table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import require_shared_data
from servers import start_service

from corrgrpo_trainer.advantages import ESTIMATORS, corrgrpo, gdpo
from corrgrpo_trainer.cli import component_table, compute_advantages, main

REWARDS = [[[1.0, 0.5], [0.0, 0.1], [1.0, None]], [[0.0, 0.0], [1.0, 1.0], [0.5, 0.2]]]
CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"


def as_tensor(nested: list) -> torch.Tensor:
    return torch.tensor([[[float("nan") if v is None else v for v in g] for g in b] for b in nested], dtype=torch.float64)


def test_advantages_command_on_a_nested_list(tmp_path: Path) -> None:
    source = tmp_path / "rewards.json"
    source.write_text(json.dumps(REWARDS))
    run = subprocess.run(
        [sys.executable, "-m", "corrgrpo_trainer", "advantages", "--input", str(source), "--estimator", "all"],
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(run.stdout)
    assert answer["shape"] == [2, 3, 2] and set(answer["advantages"]) == set(ESTIMATORS)
    expected = corrgrpo(as_tensor(REWARDS))
    assert torch.allclose(torch.tensor(answer["advantages"]["corrgrpo"], dtype=torch.float64), expected)
    assert "corrgrpo/scale_mean" in answer["diagnostics"]


def test_weights_fold_into_r_and_gdpo_applies_them_to_z_scores(tmp_path: Path) -> None:
    source, output = tmp_path / "in.json", tmp_path / "out.json"
    source.write_text(json.dumps({"rewards": REWARDS, "weights": {"pass": 2.0, "style": -1.0}}))
    assert main(["advantages", "--input", str(source), "--estimator", "all", "--output", str(output)]) == 0
    answer = json.loads(output.read_text())
    rewards = as_tensor(REWARDS)
    folded = rewards * torch.tensor([2.0, -1.0], dtype=torch.float64)
    assert torch.allclose(torch.tensor(answer["advantages"]["corrgrpo"], dtype=torch.float64), corrgrpo(folded))
    assert torch.allclose(torch.tensor(answer["advantages"]["gdpo"], dtype=torch.float64), gdpo(rewards, weights=[2.0, -1.0]))
    assert "grpo/var_share/style" in answer["diagnostics"]


def test_mismatched_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="3 weights for K = 2"):
        compute_advantages({"rewards": REWARDS, "weights": [1, 1, 1]}, ["grpo"])


def test_component_table_lists_each_logged_step() -> None:
    history = [{"step": 1, "reward": 0.5, "rewards/format/mean": 1.0}, {"loss": 0.1}, {"step": 2, "reward": 0.25}]
    lines = component_table(history, ["format"]).splitlines()
    assert lines[0].split() == ["step", "format", "reward"]
    assert lines[1].split() == ["1", "1.0000", "0.5000"] and lines[2].split() == ["2", "nan", "0.2500"]


@pytest.mark.parametrize("domain", ["code", "toolcall", "agentdojo"])
def test_configs_name_their_domain_service_and_a_known_estimator(domain: str) -> None:
    config = yaml.safe_load((CONFIGS / f"{domain}.yaml").read_text())
    assert config["domain"] == domain and domain in config["services"]
    assert config["estimator"] in ESTIMATORS and config["trl"]["output_dir"]


@pytest.mark.slow
def test_train_command_runs_the_tiny_policy_against_the_live_toolcall_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = require_shared_data("rlla_4k/test.parquet")
    config = yaml.safe_load((CONFIGS / "toolcall.yaml").read_text())
    config["dataset"] = {"path": str(data), "limit": 4}
    config["trl"] |= {"output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 2, "num_generations": 2}
    config["trl"] |= {"max_completion_length": 8, "gradient_checkpointing": False, "use_cpu": True}
    with start_service("toolcall") as service:
        config["services"]["toolcall"]["url"] = service.url
        (tmp_path / "toolcall.yaml").write_text(yaml.safe_dump(config))
        assert main(["train", "--config", str(tmp_path / "toolcall.yaml"), "--max-steps", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("[train] step")]
    assert [line.split()[2] for line in progress] == ["1/1"]
    assert all(f"{name}=" in progress[0] for name in ("format", "name", "param_names", "param_values"))
    assert lines[-2].split() == ["step", "format", "name", "param_names", "param_values", "reward"]
    assert lines[-1].split()[0] == "1" and len(lines[-1].split()) == 6
