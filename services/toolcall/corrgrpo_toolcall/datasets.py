"""Evaluation data: RLLA-4K (ToolRL's parquet or a hub id) and API-Bank levels 1–3 as processed by ToolRL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATASETS = ("rlla4k", "api-bank-1", "api-bank-2", "api-bank-3")


def default_source(dataset: str, data_dir: str | Path | None) -> Path:
    """Where `dataset` lies in the data folder (`CORRGRPO_TOOLCALL_DATA_DIR`). There is no guessed default."""
    if data_dir is None:
        raise ValueError(f"no source for {dataset}: pass --source or set CORRGRPO_TOOLCALL_DATA_DIR")
    return Path(data_dir) / ("rlla_4k/test.parquet" if dataset == "rlla4k" else "api_bank")


@dataclass(frozen=True)
class Example:
    id: str
    prompt: list[dict[str, str]]  # chat messages to generate a completion from
    ground_truth: str  # ToolRL format: <think>…</think>, <tool_call> JSON lines, <response>


def load_rlla4k(source: str | Path) -> list[Example]:
    """RLLA-4K rows (ground truth at `reward_model.ground_truth`) from a parquet file or a hub dataset id."""
    if Path(source).exists():
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(source).to_pylist()
    else:
        import datasets  # only for hub ids. A local parquet needs nothing beyond pyarrow

        rows = list(datasets.load_dataset(str(source), split="test"))
    return [
        Example(
            str((row.get("extra_info") or {}).get("index", i)),
            list(row["prompt"]),
            row["reward_model"]["ground_truth"],
        )
        for i, row in enumerate(rows)
    ]


def api_bank_ground_truth(answer: dict[str, Any] | list[dict[str, Any]]) -> str:
    """ToolRL stores API-Bank answers as call objects (a list, or one object at level 2): render them as a
    response."""
    calls = answer if isinstance(answer, list) else [answer]
    lines = "\n".join(
        json.dumps({"name": c["name"], "parameters": c["parameters"]}, ensure_ascii=False) for c in calls
    )
    return f"<think></think>\n<tool_call>\n{lines}\n</tool_call>"


def load_api_bank(level: int, data_dir: str | Path) -> list[Example]:
    path = Path(data_dir) / f"level-{level}-api_processed.json"
    records = json.loads(path.read_text())
    return [
        Example(
            f"level-{level}-{i}",
            [{"role": "system", "content": r["system"]}, {"role": "user", "content": r["user"]}],
            api_bank_ground_truth(r["answer"]),
        )
        for i, r in enumerate(records)
    ]


def load(dataset: str, source: str | Path) -> list[Example]:
    """`rlla4k` (source: parquet path or hub id) or `api-bank-N` (source: folder of the processed JSON
    files)."""
    if dataset == "rlla4k":
        return load_rlla4k(source)
    if dataset in DATASETS:
        return load_api_bank(int(dataset.rsplit("-", 1)[1]), source)
    raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
