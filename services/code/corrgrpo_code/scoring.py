"""Pure scoring of code items: extraction, tests in the sandbox, the seven components, shared t_ref.

`CodeScorer.score(items)` is the kit's scorer: one `Scored | ItemError` per item, in order. All of an
item's blocking work runs in a thread pool; the sandbox runs at most `workers` executions at once.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import json
import logging
import math
import queue
import re
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from corrgrpo_code.harness import HarnessResult, IOTest, run_assert, run_io
from corrgrpo_code.parsing import parse_solution, syntax_error
from corrgrpo_common import Scored, Store, StoreUnavailable
from corrgrpo_proto import ItemError
from corrgrpo_proto.code import (
    AnyProblem,
    CallProblem,
    CodeItem,
    CodeProblem,
    MbppProblem,
    StdinCase,
    StdinProblem,
    problem_kind,
)
from corrgrpo_sandbox import Limits, RunCancelled, Sandbox

from .efficiency import Calibration, EfficiencyMode, TimingRunFailed, efficiency, time_pairs
from .extract import Extracted, extract, marker_of
from .kinds import ProblemError, call_tests, mbpp_check
from .problems import problem_hash
from .runs import SharedRuns, run_key
from .similarity import OverBudget, Reference
from .split import split_check
from .stdio import CasePool, case_limits, run_stdin

log = logging.getLogger("corrgrpo.code")
LOCK_TTL_S = 120.0  # a replica that died while measuring frees the lock after this
WAIT_POLL_S = 0.05
HARNESS_LIMITS = Limits(output_bytes=1 << 20)  # the channel carries every test's output
PREPARED_CACHE = 256  # distinct problems kept prepared (split tests, reference tree)
PROBE = "def f():\n    return 1\n"  # a run the sandbox must pass when it is healthy
REFERENCE_MEMO_S = 300.0  # how long a replica keeps a successful t_ref in memory instead of asking the store
# In the t_ref store key: bumped whenever what a run's time covers changes (v2: the child compiles the program before
# running it, assert-mode checks move to a judge; v3: assert mode's calls of scalars cross as plain values, cheaper),
# so no replica compares a t with a t_ref timed another way.
TREF_VERSION = 3
_ASSERTION = re.compile(r"(?:test \d+: )?AssertionError\b")  # the harness's error text for a raised AssertionError


class SandboxFault(RuntimeError):
    """The sandbox failed twice and also failed a trivial probe run: infrastructure, not the candidate."""


@dataclass(frozen=True)
class ScoringConfig:
    limits: Limits = HARNESS_LIMITS
    cache_prefix: str = "corrgrpo:code:"
    reference_runs: int = 4
    reference_attempts: int = 3  # a failed or noisy measurement is retried (neighbours may have starved it)
    reference_ttl_s: float = 7 * 24 * 3600.0  # every t_ref key expires
    reference_failure_ttl_s: float = 30.0  # a failed measurement is shared briefly, never kept as final
    efficiency: bool = True  # False: never measure t_ref; the component is 0
    efficiency_mode: EfficiencyMode = "calibrated"  # `efficiency.py`: paired runs, or the authors' single run (`paper`)
    calibration: Calibration = field(default_factory=Calibration)
    max_code_chars: int = 100_000  # longer code is not parsed or run: parsing alone grows to seconds
    case_s: float = 6.0  # CPU seconds per stdin case (LiveCodeBench's 6 s), and the most a problem's own limit may ask
    run_ttl_s: float = 3600.0  # a run's verdict is shared through the store this long (`runs`); 0: within a batch only


@dataclass
class PreparedProblem:
    """A problem of any kind as its runs need it: stdin cases, or a prelude and entry point with I/O tests (call
    cases, split checks and MBPP asserts) or a `check` source for assert mode."""

    problem: AnyProblem
    key: str
    io_tests: list[IOTest] | None  # None: assert mode (or stdin cases)
    marker: str  # what extraction looks for and `format` requires (`extract.marker_of`; "" for stdin programs)
    reference: Reference
    prelude: str = ""
    entry: str = ""
    test: str = ""
    stdin: list[StdinCase] | None = None
    time_limit_s: float | None = None  # CPU seconds per stdin case, or of a call problem's run; None: the config's
    t_ref: dict[str, Any] | None = None  # a successful t_ref, kept until `t_ref_until` (CodeScorer.reference_time)
    t_ref_until: float = 0.0

    @property
    def kind(self) -> str | None:
        return problem_kind(self.problem)

    @classmethod
    def of(cls, problem: AnyProblem, key: str | None = None, case_s: float = ScoringConfig.case_s) -> PreparedProblem:
        """Raises ProblemError for a problem that cannot be judged as sent."""
        key = key or problem_hash(problem)
        if isinstance(problem, StdinProblem):
            limit = min(problem.time_limit_s or case_s, case_s)
            reference = Reference.of(problem.reference or "", "")
            return cls(problem, key, None, "", reference, stdin=problem.stdin_cases, time_limit_s=limit)
        if isinstance(problem, CallProblem):
            marker = marker_of(problem.fn_name)
            reference = Reference.of(problem.reference or "", marker)
            tests = call_tests(problem.call_cases)
            return cls(problem, key, tests, marker, reference, problem.prompt, problem.fn_name, time_limit_s=problem.time_limit_s)
        check = mbpp_check(problem) if isinstance(problem, MbppProblem) else problem
        marker = marker_of(check.entry_point)
        reference = Reference.of(check.reference, marker)
        return cls(problem, key, split_check(check.test), marker, reference, check.prompt, check.entry_point, check.test)


CaseRuns = tuple[CasePool | None, threading.Event | None]  # where stdin cases run, and the batch's cancel event


def _run_once(
    sandbox: Sandbox, prepared: PreparedProblem, solution: str, limits: Limits, parsed: bool, cases: CaseRuns
) -> HarnessResult:
    if prepared.stdin is not None:
        if not parsed and (error := syntax_error(solution)):
            return HarnessResult("syntax", "stdin", 0, len(prepared.stdin), error)  # type: ignore[arg-type]
        case_s = prepared.time_limit_s or ScoringConfig.case_s
        return run_stdin(sandbox, solution, prepared.stdin, limits, case_s, *cases)
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
    cases: CaseRuns = (None, None),
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


def _raised_assertion(result: HarnessResult) -> bool:
    """An AssertionError that ended the run outside a test's check (the code's own `assert`, at its top level or in the
    function under test): for `runtime`, the authors count every AssertionError as a failed test, not a crash."""
    return result.stage in ("toplevel", "test_error") and bool(_ASSERTION.match(result.error or ""))


def components(fmt: float, syntax: bool, similarity: float, result: HarnessResult) -> dict[str, float]:
    """The dependency chain: syntax (the code parses, here) → compile (prelude + code compiled in the sandbox's child,
    `HarnessResult.compiled`) → runtime (no error but a failed assertion) → correct (every test passed). An anomaly
    the solution caused counts as not compiling: nothing of an untrustworthy run is trusted. Efficiency is added
    later, for correct items only (`CodeScorer._add_paper`, `_add_calibrated`)."""
    compiled = syntax and result.compiled is True and result.stage != "anomaly"
    runtime = compiled and (result.stage in ("assertion", "passed") or _raised_assertion(result))
    correct = compiled and result.stage == "passed"
    return {
        "format": fmt,
        "syntax": float(syntax),
        "compile": float(compiled),
        "runtime": float(runtime),
        "correct": float(correct),
        "ast_similarity": similarity,
        "efficiency": 0.0,
        "pass_rate": result.passed / result.total if compiled and result.total else 0.0,
    }


def _noisy(times: list[float]) -> bool:
    """A run far off the others (a neighbour's burst): worth measuring again."""
    middle = statistics.median(times)
    return max(times) > 3 * middle + 0.005


@dataclass
class _Outcome:
    scored: Scored
    timed: PreparedProblem | None = None  # set when correct: efficiency needs this problem's t_ref
    cpu_s: float = 0.0
    code: str = ""  # the program run (calibrated efficiency times it again)


_Timed = tuple[int, _Outcome, PreparedProblem]  # a correct item: its index in the batch, outcome, problem


def _content(problem: AnyProblem) -> tuple[str, ...]:
    """What problem_hash covers, as a dict key: the problem's own strings (each hashes once, then its hash is cached),
    never a dump of them (a CodeContests problem's cases run to tens of MB, and this runs for every item)."""
    if isinstance(problem, CodeProblem):
        return problem.prompt, problem.entry_point, problem.test, problem.reference
    if isinstance(problem, StdinProblem):
        cases = (text for case in problem.stdin_cases for text in (case.input, case.output))
        return "stdin", str(problem.time_limit_s), problem.reference or "", *cases
    if isinstance(problem, MbppProblem):
        return "mbpp", problem.test_setup_code, problem.entry_point or "", problem.reference or "", *problem.test_list
    calls = json.dumps([[case.args, case.expected] for case in problem.call_cases])  # data, not hashable as it is
    return "call", problem.prompt, problem.fn_name, str(problem.time_limit_s), problem.reference or "", calls


def _remembered(prepared: PreparedProblem) -> dict[str, Any] | None:
    """The t_ref kept in memory (`CodeScorer.reference_time`) while it is fresh; asking needs no task of the loop."""
    return prepared.t_ref if time.monotonic() < prepared.t_ref_until else None


def _item_error(error: BaseException, task_id: str) -> ItemError:
    if isinstance(error, SandboxFault):
        return ItemError(code="sandbox_anomaly", message=f"sandbox broken: {error}")
    if isinstance(error, ProblemError):
        return ItemError(code="invalid_problem", message=str(error))
    log.error("scoring failed", exc_info=error, extra={"task_id": task_id})
    return ItemError(code="internal", message=f"{type(error).__name__}: {error}")


class CodeScorer:
    def __init__(
        self, sandbox: Sandbox, store: Store, problems: dict[str, AnyProblem], config: ScoringConfig, workers: int
    ) -> None:
        self.sandbox, self.store, self.problems, self.config = sandbox, store, problems, config
        # Twice the sandbox's workers: while one thread does an item's own work (extraction, parsing, similarity),
        # another keeps its sandbox worker busy; the sandbox itself admits at most `workers` runs at once.
        self.lanes = 2 * max(1, workers)
        self.pool = ThreadPoolExecutor(max_workers=self.lanes, thread_name_prefix="code-sandbox")
        self.cases = CasePool(sandbox, max(1, workers))
        self._prepared: OrderedDict[tuple[str, ...], PreparedProblem] = OrderedDict()
        self._prepare_lock = threading.Lock()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.cases.close()

    async def score(self, items: Sequence[CodeItem]) -> list[Scored | ItemError]:
        """Evaluate every item in `lanes` threads that take the next item as they finish one (one hand-off to the
        event loop per lane, not per item), then add efficiency: `paper`, one t_ref lookup per distinct problem;
        `calibrated`, one paired timing per distinct correct program."""
        answers: list[_Outcome | ItemError | None] = [None] * len(items)
        pending = queue.SimpleQueue[int]()
        for index in sorted(range(len(items)), key=lambda i: -self._expected_seconds(items[i])):
            pending.put(index)  # longest first (known t_ref; unknown ones before all): the batch's tail is short
        cancelled = threading.Event()
        loop = asyncio.get_running_loop()
        runs = SharedRuns(self.store, loop, f"{self.config.cache_prefix}run:", self.config.run_ttl_s, cancelled)
        lane = functools.partial(self._lane, items, answers, pending, cancelled, runs)
        lanes = (loop.run_in_executor(self.pool, lane) for _ in items[: self.lanes])
        try:
            await asyncio.gather(*lanes)
            timed = [(i, a, a.timed) for i, a in enumerate(answers) if isinstance(a, _Outcome) and a.timed is not None]
            if self.config.efficiency_mode == "calibrated":
                await self._add_calibrated(timed, answers, cancelled)
            else:
                await self._add_paper(timed, answers)
        except asyncio.CancelledError:  # the client went away: end the batch's sandbox runs now, not at their wall limit
            cancelled.set()
            raise
        done = [a.scored if isinstance(a, _Outcome) else a for a in answers if a is not None]
        assert len(done) == len(items), "lanes end early only when the batch is cancelled"
        return done

    async def _add_paper(self, timed: list[_Timed], answers: list[_Outcome | ItemError | None]) -> None:
        """The authors' efficiency: each item's one run against its problem's shared t_ref."""
        problems = {prepared.key: prepared for _, _, prepared in timed}
        known = {key: reference for key, p in problems.items() if (reference := _remembered(p)) is not None}
        asked = [prepared for key, prepared in problems.items() if key not in known]
        fetched = await asyncio.gather(*(self.reference_time(p) for p in asked), return_exceptions=True)
        by_key = {**known, **dict(zip((p.key for p in asked), fetched, strict=True))}
        for index, outcome, prepared in timed:
            reference = by_key[prepared.key]
            if isinstance(reference, BaseException):
                answers[index] = _item_error(reference, prepared.problem.task_id)
            else:
                info = outcome.scored.info
                info.update(t_ref=reference["t_ref"], t_ref_source=reference["source"], t_ref_error=reference.get("error"))
                outcome.scored.components["efficiency"] = efficiency(outcome.cpu_s, reference["t_ref"])

    async def _add_calibrated(
        self, timed: list[_Timed], answers: list[_Outcome | ItemError | None], cancelled: threading.Event
    ) -> None:
        """Efficiency from paired runs (`efficiency.time_pairs`), once per distinct program of a problem: copies in a
        batch share one timing, as they share one verdict run."""
        programs = {(prepared.key, outcome.code): prepared for _, outcome, prepared in timed}
        loop = asyncio.get_running_loop()
        timings = (loop.run_in_executor(self.pool, self.calibrate, p, code, cancelled) for (_, code), p in programs.items())
        measured = dict(zip(programs, await asyncio.gather(*timings, return_exceptions=True), strict=True))
        for index, outcome, prepared in timed:
            timing = measured[prepared.key, outcome.code]
            if isinstance(timing, BaseException):
                answers[index] = _item_error(timing, prepared.problem.task_id)
            else:
                value, shown = timing
                outcome.scored.components["efficiency"] = value
                outcome.scored.info.update(shown)

    def calibrate(
        self, prepared: PreparedProblem, code: str, cancelled: threading.Event | None = None
    ) -> tuple[float, dict[str, Any]]:
        """`code`'s calibrated efficiency against the reference, and what `info` shows of the pairs (blocking)."""
        calibration, cases = self.config.calibration, (self.cases, cancelled)
        run = functools.partial(run_tests, self.sandbox, prepared, limits=self.config.limits, cases=cases)
        with self.sandbox.cancellable(cancelled or threading.Event()):
            try:
                times = time_pairs(run, code, prepared.reference.code, calibration)
            except TimingRunFailed as failed:
                error = {"reference": "t_ref_error", "candidate": "timing_error"}[failed.side]
                return 0.0, {"t_ref": None, "t_ref_source": "paired", error: str(failed)}
        return times.efficiency(calibration), {
            "t_ref": statistics.median(times.reference),
            "t_ref_source": "paired",
            "t_ratio": times.ratio(),
            "t_ratio_bound": times.bound(calibration),
            "timing_pairs": times.pairs,
        }

    def _lane(
        self,
        items: Sequence[CodeItem],
        answers: list[_Outcome | ItemError | None],
        pending: queue.SimpleQueue[int],
        cancelled: threading.Event,
        runs: SharedRuns | None = None,
    ) -> None:
        """Items until none is left; an item whose program another lane is running waits until then (`waiting`)."""
        waiting: list[tuple[int, str, Callable[[], _Outcome]]] = []
        with self.sandbox.cancellable(cancelled):
            while not cancelled.is_set():
                try:
                    index = pending.get_nowait()
                except queue.Empty:
                    break
                item = items[index]
                problem = item.problem or self.problems.get(item.task_id or "")
                if problem is None:
                    answers[index] = ItemError(code="unknown_task", message=f"no loaded problem has task_id {item.task_id!r}")
                    continue
                try:
                    answer = self.evaluate(problem, item.completion, runs)
                except RunCancelled:
                    return
                except Exception as error:  # one item's failure never fails the batch
                    answers[index] = _item_error(error, problem.task_id)
                    continue
                if isinstance(answer, _Outcome):
                    answers[index] = answer
                else:
                    waiting.append((index, problem.task_id, answer))
            for index, task_id, conclude in waiting:
                try:
                    answers[index] = conclude()
                except RunCancelled:
                    return
                except Exception as error:
                    answers[index] = _item_error(error, task_id)

    def _expected_seconds(self, item: CodeItem) -> float:
        """The reference's time when this replica knows it, else infinity (a dict read: fine on the event loop)."""
        problem = item.problem or self.problems.get(item.task_id or "")
        prepared = self._prepared.get(_content(problem)) if problem is not None else None
        known = _remembered(prepared) if prepared is not None else None
        return known["t_ref"] if known is not None else math.inf

    def prepare(self, problem: CodeProblem) -> PreparedProblem:
        """Once per distinct problem (LRU): splitting a big check and parsing the reference cost seconds."""
        content = _content(problem)
        with self._prepare_lock:  # the items of one batch share one preparation
            prepared = self._prepared.get(content)
            if prepared is None:
                prepared = self._prepared[content] = PreparedProblem.of(problem, case_s=self.config.case_s)
                if len(self._prepared) > PREPARED_CACHE:
                    self._prepared.popitem(last=False)
            self._prepared.move_to_end(content)
            return prepared

    def evaluate(self, problem: AnyProblem, completion: str, runs: SharedRuns | None = None) -> _Outcome | Callable[[], _Outcome]:
        """Everything but t_ref, blocking (extraction, parsing, the run, AST similarity): off the event loop. With
        `runs`, a program already running for another item of the batch returns what concludes it once that run ends."""
        config = self.config
        prepared = self.prepare(problem)
        extracted = extract(completion, prepared.marker)
        code = extracted.code
        if len(code) > config.max_code_chars:
            error = f"code of {len(code)} characters is over the limit of {config.max_code_chars}; not run"
            zeros = dict.fromkeys(("syntax", "compile", "runtime", "correct", "ast_similarity", "efficiency", "pass_rate"), 0.0)
            return _Outcome(Scored({"format": extracted.format, **zeros}, {"stage": "too_long", "error": error}))
        parsed = parse_solution(code)  # the syntax check and the similarity share one parse
        tree = None if isinstance(parsed, str) else parsed
        cases = (self.cases, runs.cancelled if runs else None)
        execute = functools.partial(run_tests, self.sandbox, prepared, code, config.limits, tree is not None, cases)
        if runs is None:
            return self._conclude(prepared, extracted, tree, execute(), "run")
        key = run_key(code, f"{prepared.key}:{prepared.time_limit_s}", config.limits, self.sandbox.isolation)
        future, owned = runs.claim(key)
        if owned:
            runs.run(future, key, execute)
            return self._conclude(prepared, extracted, tree, *future.result())

        def conclude() -> _Outcome:
            return self._conclude(prepared, extracted, tree, future.result()[0], "batch")

        return conclude() if future.done() else conclude

    def _conclude(
        self, prepared: PreparedProblem, extracted: Extracted, tree: ast.Module | None, result: HarnessResult, source: str
    ) -> _Outcome:
        """The item's components and info from its run (`source`: `run`, `batch`: another item's, `store`)."""
        config = self.config
        info: dict[str, Any] = {
            "kind": prepared.kind,
            "run": source,
            "stage": result.stage,
            "error": result.error,
            "tests_passed": result.passed,
            "tests_total": result.total,
            "mode": result.mode,
            "isolation": result.exec.isolation if result.exec else self.sandbox.isolation,
            "t": result.exec.cpu_s if result.exec else None,
            "t_wall": result.exec.wall_s if result.exec else None,
            "fenced": extracted.fenced,
            "ast_reference": prepared.reference.available,  # False: no reference to compare with, similarity 0
        }
        try:
            similarity = prepared.reference.similarity(tree)
        except OverBudget as error:  # too repetitive or too large to compare within the budget: scores 0
            similarity, info["ast_error"] = 0.0, str(error)
        scored = Scored(components(extracted.format, tree is not None, similarity, result), info)
        if config.efficiency and result.ok and result.exec is not None:
            if not prepared.reference.code:
                info["t_ref_error"] = "no reference solution"
                return _Outcome(scored)
            return _Outcome(scored, prepared, result.exec.cpu_s, extracted.code)
        return _Outcome(scored)

    def measure_reference(self, prepared: PreparedProblem) -> dict[str, Any]:
        """Mean child CPU time of `reference_runs` runs of the reference through the same harness. A failed
        or noisy attempt is retried after a pause (a neighbour may have starved it), up to `reference_attempts`."""
        config, measured = self.config, {}
        for attempt in range(config.reference_attempts):
            if attempt:
                time.sleep(0.5 * attempt)
            measured = self._measure_once(prepared)
            if measured["t_ref"] is not None and not _noisy(measured["runs"]):
                break
        return {**measured, "attempts": attempt + 1}

    def _measure_once(self, prepared: PreparedProblem) -> dict[str, Any]:
        times = []
        for _ in range(self.config.reference_runs):
            result = run_tests(self.sandbox, prepared, prepared.reference.code, self.config.limits, cases=(self.cases, None))
            if not result.ok or result.exec is None:
                return {"t_ref": None, "error": f"reference fails its tests: {result.stage}: {result.error}"}
            times.append(result.exec.cpu_s)
        return {"t_ref": sum(times) / len(times), "runs": times}

    async def reference_time(self, prepared: PreparedProblem) -> dict[str, Any]:
        """`shared_reference_time`, a successful one kept with the prepared problem for `REFERENCE_MEMO_S` (source
        `memory`): the store's value does not change while its key lives, and a batch then asks the store nothing."""
        if (known := _remembered(prepared)) is not None:
            return known
        reference = await self.shared_reference_time(prepared)
        if reference["t_ref"] is not None:
            prepared.t_ref, prepared.t_ref_until = {**reference, "source": "memory"}, time.monotonic() + REFERENCE_MEMO_S
        return reference

    async def shared_reference_time(self, prepared: PreparedProblem) -> dict[str, Any]:
        """t_ref from the store, else measured once (the store's `add` is the lock between replicas).
        Every key has a TTL; a failed measurement only a short one, so it is re-measured soon."""
        config = self.config
        key = f"{config.cache_prefix}tref:v{TREF_VERSION}:{prepared.key}"
        loop = asyncio.get_running_loop()
        try:
            deadline = loop.time() + LOCK_TTL_S
            while loop.time() < deadline:
                if (cached := await self.store.get(key)) is not None:
                    return {**json.loads(cached), "source": "cache"}
                if await self.store.add(f"{key}:lock", b"1", LOCK_TTL_S):
                    try:
                        measured = await loop.run_in_executor(self.pool, self.measure_reference, prepared)
                        ttl = config.reference_ttl_s if measured["t_ref"] is not None else config.reference_failure_ttl_s
                        await self.store.set(key, json.dumps(measured).encode(), ttl, evictable=True)
                    finally:
                        await self.store.delete(f"{key}:lock")
                    return {**measured, "source": "measured"}
                await asyncio.sleep(WAIT_POLL_S)  # another item or replica is measuring it
        except StoreUnavailable as error:
            log.warning("reference-time cache unavailable; measuring without it", extra={"error": str(error)})
        measured = await loop.run_in_executor(self.pool, self.measure_reference, prepared)
        return {**measured, "source": "measured_uncached"}
