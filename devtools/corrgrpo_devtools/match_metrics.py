"""`python -m corrgrpo_devtools.match_metrics`: the paper's Table 2 columns for a file of completions.

Columns, over the examples whose ground truth has tool calls (RLLA-4K test: 71 of 80):
normalised function-name score s_name, parameter-name score s_params/|gt calls|, parameter-value
score s_values/Σparams (s_params/|gt calls| when the calls take no parameters), all as mean
percentages, and all-exact: the percentage whose three scores are all full (correctness 3).
API-Bank is scored by this static matching against the final call, not by API-Bank's
execution-based checker.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from corrgrpo_toolcall.datasets import DATASETS, Example, default_source, load
from corrgrpo_toolcall.matching import Matching
from corrgrpo_toolcall.scoring import Score, score
from corrgrpo_toolcall.settings import ToolCallSettings


@dataclass(frozen=True)
class Report:
    dataset: str
    rows: int
    with_calls: int
    format: float
    name: float
    param_names: float
    param_values: float
    all_exact: float

    HEADER = (
        "dataset",
        "rows",
        "with calls",
        "format %",
        "function name",
        "parameter name",
        "parameter value",
        "all-exact %",
    )

    def cells(self) -> list[str]:
        scores = (self.format, self.name, self.param_names, self.param_values, self.all_exact)
        return [self.dataset, str(self.rows), str(self.with_calls), *(f"{value:.2f}" for value in scores)]


def normalised(m: Matching) -> tuple[float, float, float]:
    """(name, parameter-name, parameter-value) scores in [0, 1]."""
    params = m.s_params / m.gt_calls
    return m.s_name, params, m.s_values / m.gt_params if m.gt_params else params


def report(dataset: str, scores: Sequence[Score]) -> Report:
    matched = [s.matching for s in scores if s.matching is not None]
    fields = [normalised(m) for m in matched]

    def percent(values: Sequence[float]) -> float:
        return 100 * sum(values) / len(values) if values else 0.0

    return Report(
        dataset,
        len(scores),
        len(matched),
        percent([s.format for s in scores]),
        *(percent([f[column] for f in fields]) for column in range(3)),
        percent([float(m.exact) for m in matched]),
    )


def read_completions(path: Path, rows: int) -> list[str]:
    """JSONL, one `{"completion": "..."}` per line for the first rows of the dataset, in row order (at most
    `rows`). A ValueError names the file and what is wrong with it."""
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        completions = [json.loads(line)["completion"] for line in lines]
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise ValueError(
            f'{path}: expected JSONL of {{"completion": "..."}} ({type(error).__name__}: {error})'
        ) from None
    if len(completions) > rows:
        raise ValueError(f"{path}: {len(completions)} completions for {rows} rows")
    if not all(isinstance(c, str) for c in completions):
        raise ValueError(f'{path}: every line needs a string "completion"')
    return completions


def evaluate(dataset: str, examples: Sequence[Example], completions: Sequence[str]) -> Report:
    return report(dataset, [score(c, e.ground_truth) for c, e in zip(completions, examples, strict=True)])


def markdown(reports: Sequence[Report]) -> str:
    rows = [Report.HEADER, ("---",) * len(Report.HEADER), *(r.cells() for r in reports)]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m corrgrpo_devtools.match_metrics", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        required=True,
        help="which dataset's rows the completions answer (required)",
    )
    parser.add_argument(
        "--source",
        help="RLLA-4K parquet or hub id; API-Bank folder (default: under CORRGRPO_TOOLCALL_DATA_DIR)",
    )
    parser.add_argument("--limit", type=int, help="evaluate only the first LIMIT rows (default: every row)")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--completions",
        type=Path,
        help='JSONL of {"completion": ...} for the first rows, in row order (fewer lines: fewer rows)',
    )
    given.add_argument(
        "--self", action="store_true", help="score each ground truth against itself (a sanity check)"
    )
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    try:
        source = args.source or default_source(args.dataset, ToolCallSettings().toolcall_data_dir)
    except ValueError as error:
        parser.error(str(error))
    try:
        examples = load(args.dataset, source)[: args.limit]
    except (OSError, ValueError) as error:  # the dataset's files: missing, or not what the loader expects
        parser.exit(
            2,
            f"{parser.prog}: error: cannot load {args.dataset} from {source}: "
            f"{' '.join(str(error).split())}\n",
        )
    try:
        completions = (
            [e.ground_truth for e in examples]
            if args.self
            else read_completions(args.completions, len(examples))
        )
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    if len(completions) < len(examples):
        print(f"scoring the first {len(completions)} of {len(examples)} rows", file=sys.stderr)
        examples = examples[: len(completions)]
    print(markdown([evaluate(args.dataset, examples, completions)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
