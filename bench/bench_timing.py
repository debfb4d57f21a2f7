"""Timing stability of the efficiency reward: each reference solution against itself, on a loaded machine.

For 24 HumanEval problems, t_ref is the mean child CPU time of 4 runs of the reference (as the service
measures it), then the reference is scored 20 more times as the candidate: efficiency = clip(1 - t / t_ref, 0,
1), 0 at parity. A CPU burner runs on every core throughout (the "loaded machine"). The question: is the
spread tight enough that a program needing 1/1.1 of the reference's time (efficiency ≈ 0.09) is told apart
from parity? We report, per problem, the spread of log(t) and the share of problems whose 20-run efficiency
interval (5th–95th percentile) stays below 0.09.

Run: `.venv/bin/python bench/bench_timing.py` (part of `make bench`).
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import statistics
import sys

from corrgrpo_code.efficiency import efficiency
from corrgrpo_code.harness import CHILD_FILE
from corrgrpo_code.problem_tests import ProblemTests
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.settings import HARNESS_LIMITS
from corrgrpo_sandbox import Sandbox

PROBLEMS, REFERENCE_RUNS, RUNS = 24, 4, 20
FASTER = 1 - 1 / 1.1  # the efficiency of a program needing 1/1.1 of the reference's time


def burn() -> None:
    while True:
        pass


def cpu_times(sandbox: Sandbox, prepared: ProblemTests, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        result = prepared.run(sandbox, prepared.reference.code, HARNESS_LIMITS)
        if result.exec is None or result.stage != "passed":
            raise RuntimeError(f"{prepared.problem.task_id}: reference did not pass ({result.stage})")
        times.append(result.exec.cpu_s)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(os.cpu_count() or 1)]
    for burner in burners:
        burner.start()
    rows = []
    try:
        with Sandbox(workers=1, preload=[CHILD_FILE]) as sandbox:
            for problem in itertools.islice(humaneval_problems(), PROBLEMS):
                prepared = ProblemTests.of(problem)
                t_ref = statistics.mean(cpu_times(sandbox, prepared, REFERENCE_RUNS))
                times = cpu_times(sandbox, prepared, RUNS)
                log_sd = statistics.stdev(math.log(t) for t in times)
                rows.append((problem.task_id, t_ref, [efficiency(t, t_ref) for t in times], log_sd))
    finally:
        for burner in burners:
            burner.terminate()
    print(
        f"{PROBLEMS} HumanEval references scored against themselves, {RUNS} runs each, t_ref = mean of "
        f"{REFERENCE_RUNS}; CPU burner on each of {len(burners)} cores.\n"
    )
    print("| task | t_ref (ms CPU) | efficiency p5 | median | p95 | sd of log t |")
    print("|---|---|---|---|---|---|")
    for task_id, t_ref, values, log_sd in rows:
        p5, p50, p95 = (percentile(values, q) for q in (0.05, 0.5, 0.95))
        print(f"| {task_id} | {t_ref * 1e3:.2f} | {p5:.2f} | {p50:.2f} | {p95:.2f} | {log_sd:.3f} |")
    separated = sum(percentile(e, 0.95) < FASTER for _, _, e, _ in rows)
    median_sd = statistics.median(sd for *_, sd in rows)
    print(
        f"\nmedian sd of log t: {median_sd:.3f} (log 1.1 = {math.log(1.1):.3f}); "
        f"problems whose p95 efficiency stays below {FASTER:.2f} at parity: {separated}/{len(rows)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
