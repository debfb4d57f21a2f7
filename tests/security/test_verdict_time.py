"""A run over its CPU limit is a timeout in every kind, even when it finished (issue 37, item 4).

RLIMIT_CPU counts whole seconds and sends SIGXCPU at the soft limit, SIGKILL a second later: a program that
ignores SIGXCPU finished between the two and passed, and a 0.5 s `time_limit_s` allowed up to 2 s. The harness
now compares the kernel-measured CPU time of every run with its limit. All runs in the real bwrap sandbox,
through the scorer's own path (`ProblemTests.run`), one variant per kind: check function in I/O mode, in
assert mode, call cases, MBPP, stdin.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

from corrgrpo_code.problem_tests import ProblemTests
from corrgrpo_code.scorer import components
from corrgrpo_proto.code import (
    AnyProblem,
    CallCase,
    CallProblem,
    CodeProblem,
    MbppProblem,
    StdinCase,
    StdinProblem,
)
from corrgrpo_sandbox import Limits, Sandbox

LIMITS = Limits(cpu_s=1, wall_s=20, output_bytes=1 << 20)  # RLIMIT_CPU: SIGXCPU at 1 s, SIGKILL at 2 s
BURNER = (
    "import signal, time\n"
    "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
    "burned = []\n"
    "def burn(seconds):\n"
    "    end = time.process_time() + seconds\n"
    "    while time.process_time() < end:\n"
    "        pass\n"
)


def square(seconds: float) -> str:
    """A right `sq` that ignores SIGXCPU and spends `seconds` of CPU in its first call."""
    return (
        BURNER + f"def sq(x):\n    if not burned:\n        burned.append(burn({seconds}))\n    return x * x\n"
    )


def script(seconds: float) -> str:
    return BURNER + f"burn({seconds})\nprint(int(input()) ** 2)\n"


KINDS: dict[str, tuple[AnyProblem, float]] = {  # the problem and its CPU limit
    "check function, I/O mode": (
        CodeProblem(
            task_id="io",
            entry_point="sq",
            test="def check(candidate):\n    assert candidate(3) == 9\n",
            reference="",
        ),
        1.0,
    ),
    "check function, assert mode": (  # a loop: split cannot make I/O tests of it
        CodeProblem(
            task_id="assert",
            entry_point="sq",
            test="def check(candidate):\n    for x in range(3):\n        assert candidate(x) == x * x\n",
            reference="",
        ),
        1.0,
    ),
    "call cases, time_limit_s 0.5": (
        CallProblem(
            task_id="call", fn_name="sq", call_cases=[CallCase(args=[3], expected=9)], time_limit_s=0.5
        ),
        0.5,
    ),
    "MBPP asserts": (MbppProblem(task_id="mbpp", test_list=["assert sq(3) == 9", "assert sq(4) == 16"]), 1.0),
    "stdin, time_limit_s 0.5": (
        StdinProblem(task_id="stdin", stdin_cases=[StdinCase(input="3\n", output="9\n")], time_limit_s=0.5),
        0.5,
    ),
}


def judged(sandbox: Sandbox, problem: AnyProblem, seconds: float) -> dict[str, float | str | bool]:
    prepared = ProblemTests.of(problem)
    solution = script(seconds) if isinstance(problem, StdinProblem) else square(seconds)
    result = prepared.run(sandbox, solution, LIMITS)
    assert result.exec is not None
    run = {"stage": result.stage, "cpu_s": result.exec.cpu_s, "timed_out": result.exec.timed_out}
    return {**run, **asdict(components(1.0, True, 0.0, result))}


@pytest.mark.parametrize(("problem", "limit"), KINDS.values(), ids=KINDS.keys())
def test_a_run_that_finished_over_its_cpu_limit_is_a_timeout(
    sandbox: Sandbox, problem: AnyProblem, limit: float
) -> None:
    over = judged(sandbox, problem, limit + 0.3)  # past the limit, before RLIMIT_CPU's SIGKILL
    # on a loaded host the 0.5 s kinds' wall limit (2 s) may end it
    assert over["cpu_s"] > limit or over["timed_out"]
    assert (over["stage"], over["runtime"], over["correct"]) == ("timeout", 0.0, 0.0), over


@pytest.mark.parametrize(("problem", "limit"), KINDS.values(), ids=KINDS.keys())
def test_a_run_within_its_limit_still_passes(sandbox: Sandbox, problem: AnyProblem, limit: float) -> None:
    within = judged(sandbox, problem, limit / 4)
    assert (within["stage"], within["runtime"], within["correct"]) == ("passed", 1.0, 1.0), within
