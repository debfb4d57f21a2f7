"""`CodeScorer.score(items)`: each item a `Job` through extract → parse → run → conclude, then efficiency.

Lane threads take a batch's jobs, longest first. Copies of one program share one verdict (`SharedVerdicts`).
A copy whose program another lane is running waits until its own lane has nothing else to do.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import math
import queue
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from corrgrpo_common import Scored, Store
from corrgrpo_proto import ItemError
from corrgrpo_proto.code import AnyProblem, CodeItem
from corrgrpo_sandbox import RunCancelled, Sandbox

from .cache import BoundedMemo, Claim, SharedVerdicts, store_key
from .declaration import Components
from .efficiency import ReferenceTimes, Timing, Timings
from .extract import Extracted, extract, parse_solution
from .harness import HarnessResult
from .problem_tests import PreparedProblems, ProblemError, ProblemTests, SandboxFault
from .settings import CodeSettings
from .similarity import TooManyPairs
from .stdio import CasePool, CaseRuns

UNJUDGEABLE_KEPT = 256  # judged problems whose reference-cut check is kept
UNSTORED = ("anomaly", "timeout")  # verdicts of the machine's load, not of the program: never stored
log = logging.getLogger("corrgrpo.code")
_ASSERTION = re.compile(r"(?:test \d+: )?AssertionError\b")  # the harness's text for a raised AssertionError
VerdictFrom = tuple[HarnessResult, str]  # a program's verdict, and where it came from: `run` or `store`


@dataclass
class Job:
    """One item on its way through the stages. Each stage fills its part."""

    item: CodeItem
    problem: AnyProblem | None
    tests: ProblemTests | None = None
    extracted: Extracted | None = None
    tree: ast.Module | None = None  # None: the code does not parse
    claim: Claim[VerdictFrom] | None = None  # the verdict it shares with the batch's copies of its program
    components: Components | None = None
    info: dict[str, Any] = field(default_factory=dict)
    error: ItemError | None = None
    timed: ProblemTests | None = None  # set when efficiency is to time its program against this reference
    cpu_s: float = 0.0  # its verdict's run

    @property
    def code(self) -> str:
        return self.extracted.code if self.extracted is not None else ""

    def conclude(self, isolation: str, efficiency: bool) -> None:
        """Components and `info` from the verdict (`run`: its own, `batch`: a copy's, `store`; `isolation`:
        the sandbox's, for a verdict without a run). With `efficiency`, a correct run is to be timed."""
        assert self.claim is not None and self.tests is not None and self.extracted is not None
        (result, source), tests, parsed = self.claim.future.result(), self.tests, self.tree is not None
        run = result.exec
        self.info = {
            "kind": tests.kind,
            "run": source if self.claim.owned else "batch",
            "stage": result.stage,
            "error": result.error,
            "tests_passed": result.passed,
            "tests_total": result.total,
            "mode": result.mode,
            "isolation": run.isolation if run else isolation,
            "t": run.cpu_s if run else None,
            "t_wall": run.wall_s if run else None,
            "fenced": self.extracted.fenced,
            "ast_reference": tests.reference.available,  # False: no reference to compare with, similarity 0
        }
        try:
            similarity = tests.reference.similarity(self.tree)
        except TooManyPairs as error:  # too repetitive or too large to compare within the budget: scores 0
            similarity, self.info["ast_error"] = 0.0, str(error)
        self.components = components(self.extracted.format, parsed, similarity, result)
        if efficiency and result.ok and run is not None:
            if tests.reference.code:
                self.timed, self.cpu_s = tests, run.cpu_s
            else:
                self.info["t_ref_error"] = "no reference solution"

    def add(self, timing: Timing | BaseException) -> None:
        if isinstance(timing, BaseException):
            self.error = item_error(timing, self)
        elif self.components is not None:
            self.components.efficiency = timing.efficiency
            self.info.update(timing.info())

    def answer(self) -> Scored | ItemError:
        if self.error is not None:
            return self.error
        assert self.components is not None, "every job is concluded or has an error"
        return Scored(asdict(self.components), self.info)


@dataclass
class Batch:
    """What the lanes of one batch share: the jobs still to take, and the verdicts (with the cancel event)."""

    pending: queue.SimpleQueue[Job]
    verdicts: SharedVerdicts[VerdictFrom]

    def next(self) -> Job | None:
        try:
            return None if self.verdicts.cancelled.is_set() else self.pending.get_nowait()
        except queue.Empty:
            return None


class CodeScorer:
    def __init__(
        self, sandbox: Sandbox, store: Store, problems: dict[str, AnyProblem], settings: CodeSettings
    ) -> None:
        self.sandbox, self.store, self.problems, self.settings = sandbox, store, problems, settings
        self.limits, workers = settings.limits(), max(1, settings.code_workers)
        # Twice the sandbox's workers: while one thread does an item's own work (extraction, similarity),
        # another keeps its sandbox worker busy. The sandbox admits at most `workers` runs at once.
        self.lanes = 2 * workers
        self.pool = ThreadPoolExecutor(max_workers=self.lanes, thread_name_prefix="code-sandbox")
        self.cases = CasePool(sandbox, workers)
        self.prepared = PreparedProblems(settings.code_case_s)
        self.unjudgeable: BoundedMemo[str, str | None] = BoundedMemo(UNJUDGEABLE_KEPT)  # why, or None
        reference_times = ReferenceTimes(sandbox, store, self.pool, settings)
        self.timings = Timings(sandbox, settings, self.pool, reference_times)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.cases.close()

    async def score(self, items: Sequence[CodeItem]) -> list[Scored | ItemError]:
        """Every job through the lanes (known t_ref longest first, unknown before all), then efficiency."""
        loop, settings = asyncio.get_running_loop(), self.settings
        jobs = [Job(item, item.problem or self.problems.get(item.task_id or "")) for item in items]
        prefix = f"{settings.code_cache_prefix}run:"
        batch = Batch(queue.SimpleQueue(), SharedVerdicts(self.store, loop, prefix, settings.code_run_ttl_s))
        for job in sorted(jobs, key=lambda job: -self._expected_seconds(job.problem)):
            batch.pending.put(job)
        try:
            lanes = (loop.run_in_executor(self.pool, self._lane, batch) for _ in jobs[: self.lanes])
            await asyncio.gather(*lanes)
            timed = [job for job in jobs if job.timed is not None and job.error is None]
            programs = [(job.timed, job.code, job.cpu_s) for job in timed if job.timed is not None]
            timings = await self.timings.measure(programs, batch.verdicts.cancelled)
            for job, timing in zip(timed, timings, strict=True):
                job.add(timing)
        except asyncio.CancelledError:
            batch.verdicts.cancelled.set()  # the client went away: end the runs now, not at their wall limit
            raise
        return [job.answer() for job in jobs]

    def _lane(self, batch: Batch) -> None:
        """Jobs until none is left or the batch is cancelled; then those that wait on another lane's run."""
        waiting: list[Job] = []
        isolation, efficiency = self.sandbox.isolation, self.settings.code_efficiency
        with self.sandbox.cancellable(batch.verdicts.cancelled), contextlib.suppress(RunCancelled):
            while (job := batch.next()) is not None:
                with answering(job):
                    self.evaluate(job, batch)
                if job.claim is not None and job.components is None and job.error is None:
                    waiting.append(job)
            for job in waiting:
                with answering(job):
                    job.conclude(isolation, efficiency)

    def evaluate(self, job: Job, batch: Batch) -> None:
        """extract → parse → run → conclude (blocking). A copy of a program that another lane runs is
        concluded later, by `_lane`."""
        if job.problem is None:
            job.error = no_problem(job.item)
            return
        tests = job.tests = self.prepared.get(job.problem)
        extracted = job.extracted = extract(job.item.completion, tests.marker)
        if len(extracted.code) > self.settings.code_max_chars:
            job.components, job.info = too_long(extracted, self.settings.code_max_chars)
            return
        parsed = parse_solution(extracted.code)  # the syntax check and the similarity share one parse
        job.tree = None if isinstance(parsed, str) else parsed
        program = store_key(extracted.code, tests.judged_key, self.limits, self.sandbox.isolation)
        job.claim = batch.verdicts.claim(program)
        if job.claim.owned:
            self._run(job, batch)
        if job.claim.future.done():
            job.conclude(self.sandbox.isolation, self.settings.code_efficiency)

    def _run(self, job: Job, batch: Batch) -> None:
        """The verdict of the job's program, for all its copies: stored, else run (then stored)."""
        assert job.claim is not None and job.tests is not None
        future, name = job.claim.future, job.claim.key
        try:
            if (stored := stored_verdict(batch.verdicts.stored(name))) is not None:
                future.set_result((stored, "store"))
                return
            cases = CaseRuns(self.settings.code_verdict_budget_s, self.cases, batch.verdicts.cancelled)
            result = self._verdict(job.tests, job.code, job.tree is not None, cases)
            future.set_result((result, "run"))
        except BaseException as error:
            future.set_exception(error)
            raise
        if result.stage not in UNSTORED:
            batch.verdicts.keep(name, result.dump())

    def _verdict(self, tests: ProblemTests, code: str, parsed: bool, cases: CaseRuns) -> HarnessResult:
        """`code`'s run. One the verdict's budget cut is a `timeout`, unless the problem's reference is cut
        too (checked once per problem): then no program as fast as the reference could pass (ProblemError)."""
        result = tests.run(self.sandbox, code, self.limits, parsed, cases)
        if result.budget_cut and tests.reference.code:
            why = self.unjudgeable.get(tests.judged_key, lambda: self._reference_cut(tests, cases))
            if why is not None:
                raise ProblemError(why)
        return result

    def _reference_cut(self, tests: ProblemTests, cases: CaseRuns) -> str | None:
        reference, budget_s = tests.reference, self.settings.code_verdict_budget_s
        if not tests.run(self.sandbox, reference.code, self.limits, reference.available, cases).budget_cut:
            return None
        log.warning("a reference over the verdict budget", extra={"task_id": tests.problem.task_id})
        why = f"its reference does not pass within the verdict budget of {budget_s:g} CPU-s"
        return f"{why} (CORRGRPO_CODE_VERDICT_BUDGET_S)"

    def _expected_seconds(self, problem: AnyProblem | None) -> float:
        """The reference's time when this replica knows it, else infinity (dict reads: fine on the loop)."""
        tests = self.prepared.peek(problem) if problem is not None else None
        known = self.timings.reference_times.known(tests) if tests is not None else None
        return known.t_ref if known is not None and known.t_ref is not None else math.inf


def stored_verdict(data: bytes | None) -> HarnessResult | None:
    try:
        return HarnessResult.load(data) if data is not None else None
    except (ValueError, KeyError, TypeError):  # unreadable: run it again, and overwrite
        return None


def _raised_assertion(result: HarnessResult) -> bool:
    """An AssertionError that ended the run outside a test's check (the code's own `assert`): for `runtime`,
    the authors count every AssertionError as a failed test, not a crash."""
    return result.stage in ("toplevel", "test_error") and bool(_ASSERTION.match(result.error or ""))


def components(fmt: float, syntax: bool, similarity: float, result: HarnessResult) -> Components:
    """The dependency chain: syntax (parses here) → compile (prelude + code compiled in the sandbox's child) →
    runtime (no error but a failed assertion) → correct (every test passed). An anomaly the solution caused
    counts as not compiling: nothing of an untrustworthy run is trusted. Efficiency is added later."""
    compiled = syntax and result.compiled is True and result.stage != "anomaly"
    runtime = compiled and (result.stage in ("assertion", "passed") or _raised_assertion(result))
    correct = compiled and result.stage == "passed"
    return Components(
        format=fmt,
        syntax=float(syntax),
        compile=float(compiled),
        runtime=float(runtime),
        correct=float(correct),
        ast_similarity=similarity,
        pass_rate=result.passed / result.total if compiled and result.total else 0.0,
    )


def too_long(extracted: Extracted, max_chars: int) -> tuple[Components, dict[str, Any]]:
    """Code over `max_chars` is neither parsed nor run: all but `format` 0."""
    error = f"code of {len(extracted.code)} characters is over the limit of {max_chars}; not run"
    return Components(format=extracted.format), {"stage": "too_long", "error": error}


def no_problem(item: CodeItem) -> ItemError:
    if item.problem_from is not None:  # only `/v1/score` resolves it (OpenRLHF's labels are items alone)
        return ItemError(
            code="invalid_problem", message="`problem_from` names another item of a /v1/score request"
        )
    return ItemError(code="unknown_task", message=f"no loaded problem has task_id {item.task_id!r}")


def item_error(error: BaseException, job: Job) -> ItemError:
    if isinstance(error, SandboxFault):
        return ItemError(code="sandbox_anomaly", message=f"sandbox broken: {error}")
    if isinstance(error, ProblemError):
        return ItemError(code="invalid_problem", message=str(error))
    task_id = job.problem.task_id if job.problem else job.item.task_id
    log.error("scoring failed", exc_info=error, extra={"task_id": task_id})
    return ItemError(code="internal", message=f"{type(error).__name__}: {error}")


@contextlib.contextmanager
def answering(job: Job) -> Iterator[None]:
    """One job's failure is its error, never the batch's. A cancelled run ends the lane."""
    try:
        yield
    except RunCancelled:
        raise
    except Exception as error:
        job.error = item_error(error, job)
