"""`python -m corrgrpo_trainer sft`: the supervised warm-up on ToolRL's demonstrations (real file, real
SFTTrainer)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from corrgrpo_devtools.match_metrics import read_completions
from corrgrpo_testing.environment import require_shared_data
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.config_shape import ToolcallDemonstrations
from corrgrpo_trainer.models import load_pretrained
from corrgrpo_trainer.sft import main as sft_main
from corrgrpo_trainer.sft import rlla_rows, select, shorten_think, user_turns
from corrgrpo_trainer.tiny import build_tiny_policy, build_tiny_tokenizer

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"
OUTPUT = (
    "<think> I will look it up. Then I answer. Done! </think>"
    '\n<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>'
)


def test_shorten_think_keeps_the_first_sentences_and_the_rest_of_the_output() -> None:
    assert shorten_think(OUTPUT, 1) == OUTPUT.replace(
        "I will look it up. Then I answer. Done!", "I will look it up."
    )
    assert shorten_think(OUTPUT, 2).startswith(
        "<think> I will look it up. Then I answer. </think>\n<tool_call>"
    )
    assert shorten_think(OUTPUT, None) == OUTPUT


def test_toolrl_rows_leave_out_every_user_turn_of_the_test_split() -> None:
    sft_file, test = require_shared_data("rlla_4k/rlla_sft.json"), require_shared_data("rlla_4k/test.parquet")
    everything = rlla_rows(ToolcallDemonstrations(path=str(sft_file)))
    rows = rlla_rows(
        ToolcallDemonstrations(path=str(sft_file), exclude_prompts_of=[str(test)], think_sentences=1)
    )
    evaluated = user_turns(str(test))
    assert len(everything) == 400 and len(rows) == 399  # row 393 repeats a test row's user turn
    assert sum(r["prompt"][-1]["content"].strip() in evaluated for r in everything) == 1
    assert not any(r["prompt"][-1]["content"].strip() in evaluated for r in rows)
    assert all(r["prompt"][0]["role"] == "system" and r["completion"][0]["role"] == "assistant" for r in rows)
    thoughts = [r["completion"][0]["content"].split("</think>")[0] for r in rows]
    assert max(map(len, thoughts)) < min(1000, max(len(r["completion"][0]["content"]) for r in everything))


def test_rows_over_max_length_are_dropped_not_truncated() -> None:
    tokenizer = build_tiny_tokenizer()
    rows = [
        {
            "prompt": [{"role": "user", "content": "x " * n}],
            "completion": [{"role": "assistant", "content": "y"}],
        }
        for n in (5, 400, 10, 300)
    ]
    kept = select(rows, tokenizer, 100, None, seed=0)
    assert sorted(len(r["prompt"][0]["content"]) for r in kept) == [10, 20]
    assert len(select(rows, tokenizer, None, 3, seed=0)) == 3


def test_sft_command_trains_the_tiny_policy_and_writes_a_checkpoint_rl_can_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sft_file, test = require_shared_data("rlla_4k/rlla_sft.json"), require_shared_data("rlla_4k/test.parquet")
    config = yaml.safe_load((CONFIGS / "toolcall_sft.yaml").read_text())
    config["dataset"] |= {"path": str(sft_file), "exclude_prompts_of": [str(test)], "limit": 4}
    config["trl"] |= {"max_length": 8192, "gradient_accumulation_steps": 2, "use_cpu": True}
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "warm"
    assert (
        main(["sft", "--config", str(tmp_path / "sft.yaml"), "--model", "tiny", "--output-dir", str(out)])
        == 0
    )
    printed, errors = capsys.readouterr()
    assert "[sft] step 1/2" in printed and "[sft] step 2/2" in printed
    # no dataset or shard progress bars: the step lines are the progress
    assert "train dataset" not in errors and "Writing model shards" not in errors
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and all(
        math.isfinite(s["loss"]) and s["loss"] > 0 for s in steps
    )
    # what `model: <output_dir>` in an RL config loads
    warm, tokenizer = load_pretrained(str(out), dtype=torch.float32)
    initial, _ = load_pretrained(str(out / "tiny-policy"), dtype=torch.float32)
    assert tokenizer.chat_template and sum(p.numel() for p in warm.parameters()) < 100_000
    assert any(not torch.equal(a, b) for a, b in zip(warm.parameters(), initial.parameters(), strict=True))


def test_an_sft_config_needs_a_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.yaml").write_text("domain: toolcall\n")
    with pytest.raises(SystemExit) as exit_:
        main(["sft", "--config", str(tmp_path / "x.yaml")])
    assert exit_.value.code == 2 and "x.yaml: dataset: missing (required)" in capsys.readouterr().err


@pytest.mark.parametrize("domain", ["toolcall", "agentdojo"])
def test_rl_configs_name_their_warm_up(domain: str) -> None:
    rl_config = yaml.safe_load((CONFIGS / f"{domain}.yaml").read_text())
    sft_config = yaml.safe_load((CONFIGS / f"{domain}_sft.yaml").read_text())
    assert rl_config["warmup"] == f"{domain}_sft.yaml" and sft_config["domain"] == domain


def test_generate_writes_one_completion_per_first_row_for_the_toolcall_evaluator(tmp_path: Path) -> None:
    test = require_shared_data("rlla_4k/test.parquet")
    build_tiny_policy(tmp_path / "policy")
    out = tmp_path / "completions.jsonl"
    argv = ["generate", "--model", str(tmp_path / "policy"), "--dataset", "rlla4k", "--source", str(test)]
    assert (
        sft_main([*argv, "--limit", "3", "--max-new-tokens", "4", "--batch", "2", "--output", str(out)]) == 0
    )
    completions = read_completions(out, 80)
    assert len(completions) == 3 and all(isinstance(c, str) for c in completions)
