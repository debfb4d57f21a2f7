"""The single-turn dataset rows: the toolcall RL config never trains on the held-out evaluation rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from corrgrpo_trainer.data import toolcall_rows

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"


def write_rlla(path: Path, rows: int) -> None:
    pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": f"request {i}"}] for i in range(rows)],
            "reward_model": [{"ground_truth": f"<tool_call>{i}</tool_call>"} for i in range(rows)],
        }
    ).to_parquet(path)


def test_rows_run_from_offset_for_limit(tmp_path: Path) -> None:
    write_rlla(tmp_path / "t.parquet", 10)
    rows = toolcall_rows({"path": str(tmp_path / "t.parquet"), "offset": 3, "limit": 4})
    assert [r["prompt"][0]["content"] for r in rows] == [f"request {i}" for i in range(3, 7)]
    assert rows[0]["ground_truth"] == "<tool_call>3</tool_call>"
    assert len(toolcall_rows({"path": str(tmp_path / "t.parquet"), "offset": 8})) == 2
    assert len(toolcall_rows({"path": str(tmp_path / "t.parquet")})) == 10


def test_the_toolcall_config_trains_after_the_held_out_rows(tmp_path: Path) -> None:
    """docs/policy_experiment.md evaluates on RLLA-4K test rows 0-31: the RL config's rows start after them."""
    spec = yaml.safe_load((CONFIGS / "toolcall.yaml").read_text())["dataset"]
    write_rlla(tmp_path / "t.parquet", 80)
    rows = toolcall_rows(spec | {"path": str(tmp_path / "t.parquet")})
    trained = {int(r["prompt"][0]["content"].split()[1]) for r in rows}
    assert trained and min(trained) >= 32
