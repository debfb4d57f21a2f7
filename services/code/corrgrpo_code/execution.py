"""A candidate's or reference's run against a prepared problem's tests, retried once on a sandbox anomaly."""

from __future__ import annotations

import logging

from corrgrpo_proto.code import CallProblem
from corrgrpo_sandbox import Limits, Sandbox

from .config import CASE_S
from .harness import HarnessResult, run_assert, run_io
from .parsing import syntax_error
from .prepared import PreparedProblem
from .stdio import ONE_BY_ONE, CaseRuns, case_limits, run_stdin

log = logging.getLogger("corrgrpo.code")
PROBE = "def f():\n    return 1\n"  # a run the sandbox must pass when it is healthy


class SandboxFault(RuntimeError):
    """The sandbox failed twice and also failed a trivial probe run: infrastructure, not the candidate."""


def _run_once(
    sandbox: Sandbox, prepared: PreparedProblem, solution: str, limits: Limits, parsed: bool, cases: CaseRuns
) -> HarnessResult:
    if prepared.stdin is not None:
        if not parsed and (error := syntax_error(solution)):
            return HarnessResult("syntax", "stdin", 0, len(prepared.stdin), error)  # type: ignore[arg-type]
        case_s = prepared.time_limit_s or CASE_S
        return run_stdin(sandbox, solution, prepared.stdin, limits, case_s, cases)
    if prepared.time_limit_s is not None:
        limits = case_limits(limits, min(limits.cpu_s, prepared.time_limit_s))
    if prepared.io_tests is not None:
        independent = isinstance(prepared.problem, CallProblem)  # cases, not one check function's lines
        tests = prepared.io_tests
        return run_io(sandbox, prepared.prelude, solution, prepared.entry, tests, limits, parsed=parsed, independent=independent)
    return run_assert(sandbox, prepared.prelude, solution, prepared.entry, prepared.test, limits, parsed=parsed)


def run_tests(
    sandbox: Sandbox,
    prepared: PreparedProblem,
    solution: str,
    limits: Limits,
    parsed: bool = False,
    cases: CaseRuns = ONE_BY_ONE,
) -> HarnessResult:
    """The harness run for `solution`, retried once on a sandbox anomaly. An anomaly that repeats while a
    trivial probe passes is the solution's doing (it killed its worker, say): returned as stage `anomaly`,
    scored as a failure. Raises SandboxFault when the probe fails too (the sandbox itself is broken)."""
    for _ in range(2):
        result = _run_once(sandbox, prepared, solution, limits, parsed, cases)
        if result.stage != "anomaly":
            return result
        log.warning("sandbox anomaly, retrying once", extra={"task_id": prepared.problem.task_id, "anomaly": result.error})
    probe = run_io(sandbox, "", PROBE, "f", [], limits)
    if probe.stage == "anomaly":
        raise SandboxFault(f"{result.error}; a trivial probe run failed too: {probe.error}")
    return result
