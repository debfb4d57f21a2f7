"""Stdin/stdout cases in the sandbox: one run per case, the output compared here (`kinds.outputs_match`).

A case's run gets its input on stdin and nothing else: the expected output never leaves this process, so whatever
the program writes (to stdout, fd 3 or any other fd) or exits with, only stdout equal to the expected output
passes. The one line of the channel trusted is the first, written by the run's preloaded code after it compiled
the program and before any of it runs (as `harness` does): `compile` is known without trusting the candidate.

A `CasePool` runs the cases of every item of a batch on as many threads as the sandbox has workers, so one item's
cases spread over all of them (a batch of a few long items would else leave workers idle while one lane runs its
cases one by one).

Stages as the harness names them: `syntax` (does not compile), `timeout` (a case over its CPU limit: the remaining
cases are not run, they would cost as much), `test_error` (a case exited non-zero or by a signal), `assertion` (a
wrong output), `passed`. A crash or timeout in any case outranks a wrong output in an earlier one: `runtime` is 1
only when no case crashed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from corrgrpo_code.harness import HarnessResult, main_program, out_of_time
from corrgrpo_proto.code import StdinCase
from corrgrpo_sandbox import ExecResult, Limits, Sandbox

from .kinds import outputs_match


def case_limits(limits: Limits, case_s: float) -> Limits:
    """One case's limits: `case_s` of CPU (checked exactly on the measured time; RLIMIT_CPU is whole seconds)."""
    return dataclasses.replace(limits, cpu_s=case_s, wall_s=2 * case_s + 1)


def _compiled(channel: bytes) -> dict[str, object]:
    try:
        first = json.loads(channel.split(b"\n", 1)[0])
    except ValueError:
        return {}
    return first if type(first) is dict else {}


def _crash(index: int, result: ExecResult) -> str:
    lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
    why = f"exit {result.exit_code}" if result.signal is None else f"signal {result.signal}"
    return f"case {index}: {why}" + (f": {lines[-1][:200]}" if lines else "")


class CasePool:
    """Case runs of many items on `workers` threads, each run cancellable with its batch (`Sandbox.cancellable`)."""

    def __init__(self, sandbox: Sandbox, workers: int) -> None:
        self.sandbox = sandbox
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="code-case")

    def submit(self, program: str, stdin: bytes, limits: Limits, cancel: threading.Event | None) -> Future[ExecResult]:
        return self.executor.submit(self._run, program, stdin, limits, cancel)

    def _run(self, program: str, stdin: bytes, limits: Limits, cancel: threading.Event | None) -> ExecResult:
        with self.sandbox.cancellable(cancel) if cancel is not None else contextlib.nullcontext():
            return self.sandbox.run(program, stdin=stdin, limits=limits)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def run_stdin(
    sandbox: Sandbox,
    solution: str,
    cases: Sequence[StdinCase],
    limits: Limits,
    case_s: float,
    pool: CasePool | None = None,
    cancel: threading.Event | None = None,
) -> HarnessResult:
    """Every case (until a timeout) in its own run of `solution`, on `pool` when given (all submitted at once, read
    in order; those not started when a case times out are cancelled), else one after another in this thread.
    `exec` totals their CPU and wall time."""
    program = main_program(solution)
    run_limits = case_limits(limits, case_s)
    futures = [pool.submit(program, case.input.encode(), run_limits, cancel) for case in cases] if pool else []
    try:
        return _judge(sandbox, program, cases, run_limits, futures)
    finally:
        for future in futures:
            future.cancel()


def _judge(
    sandbox: Sandbox,
    program: str,
    cases: Sequence[StdinCase],
    run_limits: Limits,
    futures: list[Future[ExecResult]],
) -> HarnessResult:
    total, passed = len(cases), 0
    crash: tuple[str, str] | None = None
    wrong: str | None = None
    cpu_s = wall_s = 0.0
    result: ExecResult | None = None
    for index, case in enumerate(cases):
        result = futures[index].result() if futures else sandbox.run(program, stdin=case.input.encode(), limits=run_limits)
        if result.anomaly:
            return HarnessResult("anomaly", "stdin", 0, total, result.anomaly, result)  # type: ignore[arg-type]
        first = _compiled(result.channel)
        if first.get("compiled") is False:
            return HarnessResult("syntax", "stdin", 0, total, str(first.get("error")), result, compiled=False)  # type: ignore[arg-type]
        if first.get("compiled") is not True:
            stage = "timeout" if result.timed_out else "anomaly"  # the preloaded code stopped before compiling
            return HarnessResult(stage, "stdin", 0, total, f"case {index}: no compile report", result)  # type: ignore[arg-type]
        cpu_s, wall_s = cpu_s + result.cpu_s, wall_s + result.wall_s
        if out_of_time(result, run_limits):
            crash = crash or ("timeout", f"case {index}: over the time limit of {run_limits.cpu_s:g} s")
            break
        if result.exit_code != 0 or result.signal is not None:
            crash = crash or ("test_error", _crash(index, result))
            continue
        cut = len(result.stdout) >= run_limits.output_bytes  # stdout alone: a program may say much on stderr
        if not cut and outputs_match(result.stdout.decode("utf-8", "replace"), case.output):
            passed += 1
        else:
            wrong = wrong or f"case {index}: wrong output" + (" (over the output cap)" if cut else "")
    assert result is not None, "a problem has at least one case"
    stage, error = crash or (("assertion", wrong) if wrong else ("passed", None))
    timed = dataclasses.replace(result, cpu_s=cpu_s, wall_s=wall_s)
    return HarnessResult(stage, "stdin", passed, total, error, timed, compiled=True)  # type: ignore[arg-type]
