"""Dataset rows of the single-turn domains: the prompt plus the columns the service's item is built from.

AgentDojo's rows come from the service (the episodes it can make): `agentdojo/episodes.py`.
"""

from __future__ import annotations

import gzip
import json
from typing import Any


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def code_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """LeetCodeDataset records: the `query` as the user prompt, the problem inline (the service needs nothing loaded)."""
    rows = []
    for record in _read_jsonl(spec["path"])[: spec.get("limit")]:
        problem = {key: record[key] for key in ("task_id", "prompt", "entry_point", "test")} | {"reference": record["completion"]}
        rows.append({"prompt": [{"role": "user", "content": record["query"]}], "problem": problem})
    return rows


def toolcall_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """RLLA-4K (ToolRL) parquet: its chat prompt and `reward_model.ground_truth`, rows `offset` to `offset + limit`."""
    import pandas as pd

    offset = spec.get("offset", 0)
    limit = spec.get("limit")
    frame = pd.read_parquet(spec["path"]).iloc[offset : None if limit is None else offset + limit]
    return [
        {"prompt": [dict(m) for m in row.prompt], "ground_truth": row.reward_model["ground_truth"]} for row in frame.itertuples()
    ]


def load_rows(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a `code` or `toolcall` config's `dataset` section (`path`, `limit`; toolcall also `offset`)."""
    return {"code": code_rows, "toolcall": toolcall_rows}[config["domain"]](config["dataset"])
