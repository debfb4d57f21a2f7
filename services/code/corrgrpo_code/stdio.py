"""Stdin/stdout cases in the sandbox: one run per case, the output compared here (`outputs_match`).

A case's run gets its input on stdin and nothing else: the expected output never leaves this process, so
whatever the program writes (to stdout, fd 3 or any other fd) or exits with, only stdout equal to the expected
output passes. The one line of the channel trusted is the first, written by the run's preloaded code after it
compiled the program and before any of it runs (as `harness` does): `compile` is known without trusting the
candidate.

A `CasePool` runs the cases of every item of a batch on as many threads as the sandbox has workers, so one
item's cases spread over all of them (a batch of a few long items would else leave workers idle while one lane
runs its cases one by one). All cases of one verdict spend at most `CaseRuns.budget_s` of CPU together
(`budget.py`: each case's limit is what is left), so the number of cases does not multiply its cost.

Stages as the harness names them: `syntax` (does not compile), `timeout` (a case over its CPU limit, or cut by
the verdict's budget: the remaining cases are not run, they would cost as much), `test_error` (a case exited
non-zero or by a signal), `assertion` (a wrong output), `passed`. A crash or timeout in any case outranks a
wrong output in an earlier one: `runtime` is 1 only when no case crashed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from corrgrpo_code.budget import BudgetedSandbox, OverBudget, TimingBudget
from corrgrpo_code.harness import HarnessResult, first_message, main_program, out_of_time
from corrgrpo_proto.code import StdinCase
from corrgrpo_sandbox import ExecResult, Limits, Sandbox

VERDICT = "verdict"  # the budget's name, in its cuts' messages
Runner = Sandbox | BudgetedSandbox  # what runs a case: the sandbox, or the sandbox within a budget
INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: `\d` and int() take "٥" for 5 too
# One way to read each shape, so a long non-number fails in linear time (an ambiguous `\d+\.?\d*` backtracks
# cubically on a long token).
REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
TOLERANCE = 1e-6  # absolute or relative, as contest checkers of real-valued answers usually allow


def _lines(text: str) -> list[list[str]]:
    """The tokens of each line. Leading and trailing blank lines and all trailing whitespace (\\r too)
    ignored."""
    return [line.split() for line in text.strip().splitlines()]


def _integer(token: str) -> tuple[bool, str]:
    """An integer token's value as (negative, digits without leading zeros): exact at any size, and no int(),
    which refuses over 4,300 digits and is quadratic below; `-0`, `+0` and `0` are one value."""
    digits = token.lstrip("+-").lstrip("0")
    return token.startswith("-") and bool(digits), digits


def tokens_match(got: str, want: str) -> bool:
    """Equal text; else, when `want` is an integer, `got` is exactly that integer (an integer token: `5.0`,
    `5e0` and `1e18` for 10**18 + 7 are wrong, as a contest's checker says); else, when `want` is a real (a
    fraction or an exponent), `got` is a number within `TOLERANCE` of it (absolute or relative)."""
    if got == want:
        return True
    if INTEGER.fullmatch(want):
        return INTEGER.fullmatch(got) is not None and _integer(got) == _integer(want)
    if REAL.fullmatch(want) and REAL.fullmatch(got):
        expected = float(want)  # an overflow is inf, equal to any other: such an answer must be equal text
        return math.isfinite(expected) and math.isclose(
            float(got), expected, rel_tol=TOLERANCE, abs_tol=TOLERANCE
        )
    return False


def outputs_match(got: str, want: str) -> bool:
    """LiveCodeBench's rule (the outputs stripped, compared line by line, each line stripped, numbers as
    numbers), with tokens compared one by one (`tokens_match`) so `1 2` matches `1  2`."""
    if got.strip() == want.strip():
        return True
    got_lines, want_lines = _lines(got), _lines(want)
    if len(got_lines) != len(want_lines):
        return False
    for got_tokens, want_tokens in zip(got_lines, want_lines, strict=True):
        if len(got_tokens) != len(want_tokens) or not all(map(tokens_match, got_tokens, want_tokens)):
            return False
    return True


def case_limits(limits: Limits, case_s: float) -> Limits:
    """One case's limits: `case_s` of CPU (checked on the measured time: RLIMIT_CPU is whole seconds)."""
    return dataclasses.replace(limits, cpu_s=case_s, wall_s=2 * case_s + 1)


def _crash(index: int, result: ExecResult) -> str:
    lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
    why = f"exit {result.exit_code}" if result.signal is None else f"signal {result.signal}"
    return f"case {index}: {why}" + (f": {lines[-1][:200]}" if lines else "")


class CasePool:
    """Case runs of many items on `workers` threads, each run cancellable with its batch
    (`Sandbox.cancellable`)."""

    def __init__(self, sandbox: Sandbox, workers: int) -> None:
        self.sandbox = sandbox
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="code-case")

    def submit(
        self, runner: Runner, program: str, stdin: bytes, limits: Limits, cancel: threading.Event | None
    ) -> Future[ExecResult]:
        return self.executor.submit(self._run, runner, program, stdin, limits, cancel)

    def _run(
        self, runner: Runner, program: str, stdin: bytes, limits: Limits, cancel: threading.Event | None
    ) -> ExecResult:
        with self.sandbox.cancellable(cancel) if cancel is not None else contextlib.nullcontext():
            return runner.run(program, stdin=stdin, limits=limits)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


@dataclasses.dataclass(frozen=True)
class CaseRuns:
    """The CPU budget of all of a verdict's cases (None: none, as for timing runs, which their own budget
    bounds), where the cases run (None: one after another in the caller's thread), and the batch's cancel."""

    budget_s: float | None = None
    pool: CasePool | None = None
    cancel: threading.Event | None = None


ONE_BY_ONE = CaseRuns()


def run_stdin(
    sandbox: Sandbox,
    solution: str,
    cases: Sequence[StdinCase],
    limits: Limits,
    case_s: float,
    runs: CaseRuns = ONE_BY_ONE,
) -> HarnessResult:
    """Every case (until a timeout) in its own run of `solution`, on `runs.pool` when given (all submitted at
    once, read in order; those not started when a case times out are cancelled), else one after another in
    this thread. `exec` totals their CPU and wall time."""
    program = main_program(solution)
    run_limits = case_limits(limits, case_s)
    budget = TimingBudget(runs.budget_s, name=VERDICT) if runs.budget_s is not None else None
    runner = BudgetedSandbox(sandbox, budget) if budget is not None else sandbox
    pool, cancel = runs.pool, runs.cancel
    futures: list[Future[ExecResult]] = []
    if pool is not None:
        futures = [pool.submit(runner, program, case.input.encode(), run_limits, cancel) for case in cases]
    try:
        return _judge(runner, budget, program, cases, run_limits, futures)
    finally:
        for future in futures:
            future.cancel()


def _case(
    runner: Runner,
    budget: TimingBudget | None,
    program: str,
    stdin: bytes,
    limits: Limits,
    future: Future[ExecResult] | None,
) -> tuple[ExecResult | None, str | None]:
    """A case's run, and why the verdict's budget cut it (its result None when no run fitted)."""
    try:
        return (future.result() if future else runner.run(program, stdin=stdin, limits=limits)), None
    except OverBudget as cut:
        if cut.budget is not budget:  # a timing budget's cut: the timing's to handle
            raise
        return cut.result, str(cut)


def _judge(
    runner: Runner,
    budget: TimingBudget | None,
    program: str,
    cases: Sequence[StdinCase],
    run_limits: Limits,
    futures: list[Future[ExecResult]],
) -> HarnessResult:
    total, passed = len(cases), 0
    crash: tuple[str, str, bool] | None = None  # stage, error, and whether the verdict's budget cut it
    wrong: str | None = None
    cpu_s = wall_s = 0.0
    result: ExecResult | None = None
    for index, case in enumerate(cases):
        future = futures[index] if futures else None
        ran, budget_cut = _case(runner, budget, program, case.input.encode(), run_limits, future)
        if ran is None:
            crash = crash or ("timeout", f"case {index}: {budget_cut}", True)
            break
        result = ran
        if result.anomaly:
            return HarnessResult("anomaly", "stdin", 0, total, result.anomaly, result)  # type: ignore[arg-type]
        first = first_message(result.channel)
        if first.get("compiled") is False:
            return HarnessResult("syntax", "stdin", 0, total, str(first.get("error")), result, compiled=False)  # type: ignore[arg-type]
        if first.get("compiled") is not True:
            stage = "timeout" if result.timed_out or budget_cut else "anomaly"  # stopped before compiling
            error = f"case {index}: {budget_cut or 'no compile report'}"
            return HarnessResult(stage, "stdin", 0, total, error, result, budget_cut=bool(budget_cut))  # type: ignore[arg-type]
        cpu_s, wall_s = cpu_s + result.cpu_s, wall_s + result.wall_s
        if budget_cut or out_of_time(result, run_limits):
            why = budget_cut or f"over the time limit of {run_limits.cpu_s:g} s"
            crash = crash or ("timeout", f"case {index}: {why}", bool(budget_cut))
            break
        if result.exit_code != 0 or result.signal is not None:
            crash = crash or ("test_error", _crash(index, result), False)
            continue
        cut = len(result.stdout) >= run_limits.output_bytes  # stdout alone: a program may say much on stderr
        if not cut and outputs_match(result.stdout.decode("utf-8", "replace"), case.output):
            passed += 1
        else:
            wrong = wrong or f"case {index}: wrong output" + (" (over the output cap)" if cut else "")
    stage, error, cut = crash or (("assertion", wrong, False) if wrong else ("passed", None, False))
    if result is None:  # the budget was spent before this verdict's first case could run
        return HarnessResult(stage, "stdin", 0, total, error, budget_cut=cut)  # type: ignore[arg-type]
    timed = dataclasses.replace(result, cpu_s=cpu_s, wall_s=wall_s)
    return HarnessResult(stage, "stdin", passed, total, error, timed, compiled=True, budget_cut=cut)  # type: ignore[arg-type]
