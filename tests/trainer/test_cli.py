"""`python -m corrgrpo_trainer advantages` on JSON files, the config files, the per-component table."""

from __future__ import annotations

import argparse
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
from corrgrpo_trainer.cli import COMMANDS, InputError, build_parser, component_table, compute_advantages, main

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


def test_undefined_numbers_are_null_so_the_output_is_strict_json(tmp_path: Path) -> None:
    source, output = tmp_path / "in.json", tmp_path / "out.json"
    source.write_text(json.dumps([[[1.0, 2.0], [3.0, 1.0]]]))  # two anti-correlated components: Σρ = 0, shares 0/0
    assert main(["advantages", "--input", str(source), "--estimator", "all", "--output", str(output)]) == 0
    answer = json.loads(output.read_text(), parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert answer["diagnostics"]["corrgrpo/share/0"] is None
    assert answer["advantages"]["grpo"][0][0] < 0 < answer["advantages"]["grpo"][0][1]


def test_mismatched_weights_are_refused() -> None:
    with pytest.raises(InputError, match="3 weights for K = 2"):
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
        assert main(["train", "--config", str(tmp_path / "toolcall.yaml"), "--model", "tiny", "--max-steps", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("[train] step")]
    assert [line.split()[2] for line in progress] == ["1/1"]
    assert all(f"{name}=" in progress[0] for name in ("format", "name", "param_names", "param_values"))
    assert lines[-3].split() == ["step", "format", "name", "param_names", "param_values", "reward"]
    assert lines[-2].split()[0] == "1" and len(lines[-2].split()) == 6
    [step] = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert step["step"] == 1 and step["rewards/format/mean"] == 0.0 and step["model/params"] < 100_000
    assert step["frac_reward_zero_std"] == 1.0 and step["advantages/abs_mean"] == 0.0  # the random policy: nothing varies


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[[1, 2], [3]]]", "rewards[0][1]: 1 components, the first had 2 (ragged)"),
        ("[[1, 2]]", "rewards[0][0]: expected a non-empty list of components"),
        ('[[["a", 1]]]', 'rewards[0][0][0]: expected a number or null, got "a"'),
        ("{bad", "is not JSON"),
        ('{"weights": [1]}', 'an object with "rewards"'),
        ('{"rewards": [[[1], [2]]], "weights": {"a": "x"}}', "weights[0]: expected a number"),
    ],
)
def test_malformed_advantages_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    source = tmp_path / "in.json"
    source.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        main(["advantages", "--input", str(source)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and err.count("\n") == 1, err


def test_a_missing_input_file_is_one_line_and_exit_2() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "corrgrpo_trainer", "advantages", "--input", "/no/such/file.json"], capture_output=True, text=True
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert (
        run.stderr.strip()
        == "python -m corrgrpo_trainer advantages: error: cannot read /no/such/file.json: No such file or directory"
    )


def test_help_describes_every_command_and_every_option_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    top = " ".join(parser.format_help().split())
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        assert (name in top and COMMANDS[name] in top.replace("\n", " ").replace("  ", " ")) or name in top
        for action in sub._actions:
            if action.dest == "help":
                continue
            assert action.help, f"{name} {action.option_strings} has no help"
            assert "default" in action.help or "required" in action.help, f"{name} {action.option_strings}: {action.help}"
    with pytest.raises(SystemExit) as exit_:
        main(["rollout", "--config", "x.yaml", "--max-steps", "3"])  # rollout never used it
    assert exit_.value.code == 2 and "unrecognized arguments: --max-steps" in capsys.readouterr().err


def test_a_missing_config_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", "/no/such/config.yaml"])
    assert exit_.value.code == 2 and "cannot read the config /no/such/config.yaml" in capsys.readouterr().err
