"""Datasets as users get them: local files, the shipped sources through $CORRGRPO_DATA_DIR, and one line when
a source cannot be read (a missing file, an unreachable hub or URL); the toolcall config never trains on
held-out rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from corrgrpo_testing.environment import require_shared_data
from corrgrpo_testing.servers import free_port
from corrgrpo_trainer.config import InputError
from corrgrpo_trainer.config_shape import CodeRows, ToolcallRows
from corrgrpo_trainer.data import DATA_DIR_ENV, LOCAL_COPIES, TOOLRL, load_rows, load_source

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"
HINT = (
    f"; without a hub, set ${DATA_DIR_ENV} to a folder of local copies (trainer/README.md) "
    "or dataset.path to a local file"
)


def write_rlla(path: Path, rows: int) -> None:
    pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": f"request {i}"}] for i in range(rows)],
            "reward_model": [{"ground_truth": f"<tool_call>{i}</tool_call>"} for i in range(rows)],
        }
    ).to_parquet(path)


def test_rows_run_from_offset_for_limit(tmp_path: Path) -> None:
    write_rlla(tmp_path / "t.parquet", 10)
    rows = load_rows(ToolcallRows(path=str(tmp_path / "t.parquet"), offset=3, limit=4))
    assert [r["prompt"][0]["content"] for r in rows] == [f"request {i}" for i in range(3, 7)]
    assert rows[0]["ground_truth"] == "<tool_call>3</tool_call>"
    assert len(load_rows(ToolcallRows(path=str(tmp_path / "t.parquet"), offset=8))) == 2
    assert len(load_rows(ToolcallRows(path=str(tmp_path / "t.parquet")))) == 10


def test_the_toolcall_config_trains_after_the_held_out_rows(tmp_path: Path) -> None:
    """docs/policy_experiment.md evaluates on RLLA-4K test rows 0-31: the RL config's rows start after
    them."""
    config = yaml.safe_load((CONFIGS / "toolcall.yaml").read_text())
    write_rlla(tmp_path / "t.parquet", 80)
    trained = {
        int(r["prompt"][0]["content"].split()[1])
        for r in load_rows(ToolcallRows(**config["dataset"] | {"path": str(tmp_path / "t.parquet")}))
    }
    evaluated = {
        int(r["prompt"][0]["content"].split()[1])
        for r in load_rows(ToolcallRows(**config["evaluation"] | {"path": str(tmp_path / "t.parquet")}))
    }
    assert trained and evaluated == set(range(32)) and min(trained) >= 32


def test_the_shipped_sources_read_their_local_copies_under_the_data_dir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data_dir = require_shared_data("rlla_4k/test.parquet").parents[1]
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    shipped = load_rows(ToolcallRows(path=f"{TOOLRL}/rlla_4k/test.parquet", offset=30, limit=3))
    assert shipped == load_rows(ToolcallRows(path=str(data_dir / "rlla_4k/test.parquet"), offset=30, limit=3))
    [problem] = load_rows(CodeRows(path="newfacade/LeetCodeDataset", split="test", limit=1))
    assert problem["problem"]["task_id"] and problem["prompt"][0]["role"] == "user"
    assert all((data_dir / copy).is_file() for copy in LOCAL_COPIES.values())
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir / "rlla_4k"))
    with pytest.raises(InputError) as missing:
        load_source("newfacade/LeetCodeDataset", "train")
    # resolved, as the message says
    copy = data_dir.resolve() / "rlla_4k/leetcode/LeetCodeDataset-v0.2.0-train.jsonl.gz"
    assert str(missing.value) == (
        f"newfacade/LeetCodeDataset (train): no local copy {copy} (${DATA_DIR_ENV}={data_dir}/rlla_4k)"
    )


def test_a_missing_local_file_or_an_unreachable_url_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError) as missing:
        load_source(str(tmp_path / "rows.parquet"))
    assert str(missing.value) == f"dataset {tmp_path / 'rows.parquet'}: no such file or folder"
    url = f"http://127.0.0.1:{free_port()}/rlla_4k/test.parquet"  # nothing listens: connection refused
    with pytest.raises(InputError) as refused:
        load_source(url)
    assert str(refused.value) == f"cannot load the dataset {url} (split train): Unable to find '{url}'{HINT}"


def test_a_hub_id_goes_to_the_hub_and_an_unreachable_hub_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """HF_HUB_OFFLINE stands for a machine that cannot reach the hub (huggingface_hub reads it at import)."""
    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump({"domain": "toolcall", "dataset": {"path": "owner/no-such-dataset"}}))
    env = {k: v for k, v in os.environ.items() if k != DATA_DIR_ENV} | {"HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "corrgrpo_trainer", "sft", "--config", str(config), "--model", "tiny"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        "python -m corrgrpo_trainer sft: error: cannot load the dataset owner/no-such-dataset (split train): "
        f"Couldn't reach 'owner/no-such-dataset' on the Hub (OfflineModeIsEnabled){HINT}\n"
    )
