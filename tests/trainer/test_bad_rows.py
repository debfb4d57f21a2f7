"""A dataset row the service cannot take costs that row, never the run: rows the service's own request model
refuses are dropped when the dataset loads (one line: how many, which, why), and a row refused at scoring
(over a service limit the model does not know) is missing, with a warning, while the step trains on. Against
the real toolcall service and TRL with the tiny policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from corrgrpo_testing.servers import start_service
from corrgrpo_testing.tiny_runs import cpu_config
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.config_shape import Service
from corrgrpo_trainer.rewards import REFUSED
from corrgrpo_trainer.row_check import checked_rows
from corrgrpo_trainer.rundir import read_jsonl

GOOD = '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
LIMIT = 300  # the service's ground_truth limit in these tests


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_rows_the_service_model_refuses_are_dropped_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"prompt": chat("a"), "ground_truth": GOOD},
        {"prompt": chat("b"), "ground_truth": None},
        {"prompt": chat("c"), "ground_truth": 7},
        {"prompt": chat("d"), "ground_truth": GOOD},
    ]
    with start_service("toolcall") as service:
        kept = checked_rows(rows, {"toolcall": Service(url=service.url)}, first=10)
    assert [row["prompt"] for row in kept] == [chat("a"), chat("d")]
    [line] = [line for line in capsys.readouterr().out.splitlines() if "dropped" in line]
    assert line == (
        "[data] dataset: dropped 2 of 4 rows the services cannot take: row 11 (toolcall: ground_truth: "
        "Field required), "
        "row 12 (toolcall: ground_truth: Input should be a valid string)"
    )


@pytest.mark.slow
def test_a_bad_row_costs_that_row_not_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ground_truths = [GOOD, GOOD, None, "x" * (LIMIT + 1), GOOD, 5]  # null and a number: refused at load
    data = tmp_path / "rows.jsonl"
    records = [
        {"prompt": chat(f"q{i}"), "reward_model": {"ground_truth": g}} for i, g in enumerate(ground_truths)
    ]
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    config = cpu_config("toolcall.yaml", tmp_path / "out", batch=8, generations=2)
    config |= {"dataset": {"path": str(data)}}
    # the over-long row passes the model, not the service
    env = {"CORRGRPO_TOOLCALL_MAX_GROUND_TRUTH_CHARS": str(LIMIT)}
    with start_service("toolcall", env=env) as service:
        config["services"]["toolcall"]["url"] = service.url
        (tmp_path / "toolcall.yaml").write_text(yaml.safe_dump(config))
        assert (
            main(
                ["train", "--config", str(tmp_path / "toolcall.yaml"), "--model", "tiny", "--max-steps", "1"]
            )
            == 0
        )
    captured = capsys.readouterr()
    dropped = (
        "[data] dataset: dropped 2 of 6 rows the services cannot take: row 2 (toolcall: ground_truth: Field"
    )
    assert dropped in captured.out
    assert "the toolcall service refused an item (HTTP 413: " in captured.err
    rollouts = read_jsonl(tmp_path / "out" / "rollouts.jsonl")
    prompts = {prompt["prompt_id"]: prompt for prompt in read_jsonl(tmp_path / "out" / "prompts.jsonl")}
    assert len(rollouts) == 8 and len(prompts) == 4  # the four rows left, two rollouts each
    refused = [r for r in rollouts if len(prompts[r["prompt_id"]]["columns"]["ground_truth"]) > LIMIT]
    assert len(refused) == 2 and all(r["total"] is None and r["advantage"] == 0.0 for r in refused)
    assert all(
        set(r["components"].values()) == {None} and r["stage"]["toolcall"] == f"error: {REFUSED}"
        for r in refused
    )
    # the rest of the batch was scored
    assert all(r["total"] is not None for r in rollouts if r not in refused)
