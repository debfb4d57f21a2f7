"""The paper's evaluation metrics over a file of completions.

    python -m corrgrpo_devtools.execution_metrics --dataset humaneval --completions completions.jsonl

`completions.jsonl` holds one `{"task_id", "completion"}` per line (several per task are fine).
- Executable: share of completions whose tests run without a runtime error (`runtime` = 1).
- Pass@1: share of completions that pass every test (`correct` = 1).
- Efficiency: over the correct completions (eligible pairs), `--rounds` paired rounds (default 8).
  In each, candidate and reference run back to back on one CPU core (`os.sched_setaffinity`; the
  sandbox workers are started after pinning so they inherit it), the order alternating between
  rounds. A pair counts when the candidate's child CPU time is strictly below the reference's. The
  metric is the mean of the per-round percentages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from corrgrpo_code.extract import extract
from corrgrpo_code.harness import CHILD_FILE, RUN_PACKAGES
from corrgrpo_code.problem_tests import ProblemTests
from corrgrpo_code.problems import load_problems, read_jsonl
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_proto.code import AnyProblem, CodeItem
from corrgrpo_sandbox import IsolationUnavailable, Limits, Sandbox


def completion_items(path: Path, limit: int | None) -> list[CodeItem]:
    """The file's first `limit` rows as items. A ValueError names the file and what is wrong with it."""
    try:
        rows = list(read_jsonl(path))[:limit]
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, nested past the parser's recursion
        shape = f'expected JSONL of {{"task_id", "completion"}} ({type(error).__name__}: {error})'
        raise ValueError(f"{path}: {shape}") from None
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not {"task_id", "completion"} <= set(row):
            raise ValueError(f'{path}: row {number} is not an object with "task_id" and "completion"')
    return [CodeItem(task_id=str(row["task_id"]), completion=str(row["completion"])) for row in rows]


def read_inputs(
    dataset: str, completions: Path, limit: int | None
) -> tuple[dict[str, AnyProblem], list[CodeItem]]:
    """The problems and the completions to score. A ValueError says which input is wrong."""
    try:
        problems = load_problems(dataset)
    except (OSError, ValueError) as error:
        raise ValueError(f"--dataset {dataset}: {error}") from None
    return problems, completion_items(completions, limit)


def paired_rounds(
    sandbox: Sandbox, pairs: Sequence[tuple[ProblemTests, str]], rounds: int, limits: Limits
) -> list[float]:
    """Per-round percentage of pairs whose candidate is strictly faster than the reference."""
    percentages = []
    for round_index in range(rounds):
        faster = 0
        for tests, code in pairs:
            order = [code, tests.reference.code]
            runs = [
                tests.run(sandbox, source, limits)
                for source in (order if round_index % 2 == 0 else order[::-1])
            ]
            candidate, reference = runs if round_index % 2 == 0 else runs[::-1]
            if candidate.ok and reference.ok and candidate.exec and reference.exec:
                faster += candidate.exec.cpu_s < reference.exec.cpu_s
        percentages.append(100.0 * faster / len(pairs))
    return percentages


def evaluate(
    problems: dict[str, AnyProblem], items: list[CodeItem], rounds: int, workers: int, core: int | None
) -> dict[str, float | int]:
    settings = CodeSettings(code_efficiency=False, code_workers=workers)
    with Sandbox(workers=workers, preload=[CHILD_FILE], packages=RUN_PACKAGES) as sandbox:
        scorer = CodeScorer(sandbox, MemoryStore(), problems, settings)
        results = asyncio.run(scorer.score(items))
        scorer.close()
    scored = [(item, r) for item, r in zip(items, results, strict=True) if isinstance(r, Scored)]
    correct = [item for item, r in scored if r.components["correct"] == 1]
    prepared = [(ProblemTests.of(problems[item.task_id or ""]), item) for item in correct]
    # a problem without a reference solution (LiveCodeBench, some MBPP rows) has no pair to time
    eligible = [
        (tests, extract(item.completion, tests.marker).code)
        for tests, item in prepared
        if tests.reference.code
    ]
    os.sched_setaffinity(0, {core if core is not None else min(os.sched_getaffinity(0))})
    percentages = []
    if eligible:
        with Sandbox(workers=1, preload=[CHILD_FILE], packages=RUN_PACKAGES) as pinned:
            percentages = paired_rounds(pinned, eligible, rounds, settings.limits())
    total = len(items)
    return {
        "completions": total,
        "errors": total - len(scored),
        "executable": 100.0 * sum(r.components["runtime"] for _, r in scored) / total,
        "pass@1": 100.0 * sum(r.components["correct"] for _, r in scored) / total,
        "efficiency": sum(percentages) / len(percentages) if percentages else 0.0,
        "eligible_pairs": len(eligible),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m corrgrpo_devtools.execution_metrics", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--dataset",
        default="humaneval",
        help="the problems, as CORRGRPO_CODE_DATASETS: humaneval, or leetcode, livecodebench, taco, apps, "
        "mbpp, "
        "codecontests:<path or hub id> (default: %(default)s)",
    )
    parser.add_argument(
        "--completions", type=Path, required=True, help="jsonl of {task_id, completion} (required)"
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="evaluate only the first LIMIT completions (default: all)"
    )
    parser.add_argument("--rounds", type=int, default=8, help="paired timing rounds (default: %(default)s)")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="sandbox workers for scoring (default: the CPUs, %(default)s)",
    )
    parser.add_argument(
        "--core", type=int, default=None, help="CPU core for the paired rounds (default: the lowest allowed)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    try:
        problems, items = read_inputs(args.dataset, args.completions, args.limit)
        metrics = evaluate(problems, items, args.rounds, args.workers, args.core)
    except (ValueError, IsolationUnavailable) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    if args.json:
        print(json.dumps(metrics))
        return
    print(f"Executable: {metrics['executable']:.1f}%")
    print(f"Pass@1: {metrics['pass@1']:.1f}%")
    print(
        f"Efficiency: {metrics['efficiency']:.1f}% ({metrics['eligible_pairs']} eligible pairs, "
        f"{args.rounds} rounds)"
    )
    if metrics["errors"]:
        print(
            f"{metrics['errors']} completions could not be scored (unknown task_id or sandbox anomaly)",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
