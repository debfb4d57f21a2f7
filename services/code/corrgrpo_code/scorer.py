"""`CodeScorer.score(items)`, the kit's scorer: one `Scored | ItemError` per item, in order. It wires the pieces: lanes
of threads evaluate the items (`lanes.py`), each a prepared problem (`prepared.py`), a run shared by the batch's copies
of a program (`runs.py`) and pure scoring (`scoring.py`); then efficiency (`batch_efficiency.py`). The sandbox runs
at most `workers` executions at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from corrgrpo_common import Scored, Store
from corrgrpo_proto import ItemError
from corrgrpo_proto.code import AnyProblem, CodeItem
from corrgrpo_sandbox import Sandbox

from . import batch_efficiency
from .config import ScoringConfig
from .execution import run_tests
from .extract import extract
from .harness import HarnessResult
from .identity import Content, content_hash, problem_content
from .kinds import ProblemError
from .lanes import Answers, Batch, lane
from .memo import BoundedMemo
from .parsing import parse_solution
from .prepared import PreparedProblem
from .reference_times import ReferenceTimes
from .runs import SharedRuns, run_key
from .scoring import Outcome, conclude, too_long
from .stdio import CasePool, CaseRuns, cut_by_budget

PREPARED_CACHE = 256  # distinct problems kept prepared (split tests, reference tree)
log = logging.getLogger("corrgrpo.code")


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
        self.prepared: BoundedMemo[Content, PreparedProblem] = BoundedMemo(PREPARED_CACHE)
        # `_verdict`'s reference checks, by problem: why it cannot be judged, or None
        self.unjudgeable: BoundedMemo[str, str | None] = BoundedMemo(PREPARED_CACHE)
        self.reference_times = ReferenceTimes(sandbox, store, self.pool, config)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.cases.close()

    async def score(self, items: Sequence[CodeItem]) -> list[Scored | ItemError]:
        """Every item through `lanes` threads, longest first (known t_ref; unknown ones before all: the batch's tail
        is short), then efficiency: `paper`, one t_ref lookup per distinct problem; `calibrated`, one paired timing
        per distinct correct program."""
        pending = queue.SimpleQueue[int]()
        for index in sorted(range(len(items)), key=lambda i: -self._expected_seconds(items[i])):
            pending.put(index)
        cancelled, loop, config = threading.Event(), asyncio.get_running_loop(), self.config
        runs = SharedRuns(self.store, loop, f"{config.cache_prefix}run:", config.run_ttl_s, cancelled)
        answers: Answers = [None] * len(items)
        batch = Batch(items, self._problem, pending, cancelled, runs, answers)
        work = functools.partial(lane, batch, self.sandbox, self.evaluate)
        try:
            await asyncio.gather(*(loop.run_in_executor(self.pool, work) for _ in items[: self.lanes]))
            timed = batch_efficiency.timed(answers)
            if config.efficiency_mode == "calibrated":
                calibrate = functools.partial(batch_efficiency.calibrate, self.sandbox, config, cancelled)
                await batch_efficiency.add_calibrated(timed, answers, calibrate, self.pool)
            else:
                await batch_efficiency.add_paper(timed, answers, self.reference_times)
        except asyncio.CancelledError:  # the client went away: end the batch's sandbox runs now, not at their wall limit
            cancelled.set()
            raise
        done = [a.scored if isinstance(a, Outcome) else a for a in answers if a is not None]
        assert len(done) == len(items), "lanes end early only when the batch is cancelled"
        return done

    def _problem(self, item: CodeItem) -> AnyProblem | None:
        return item.problem or self.problems.get(item.task_id or "")

    def _expected_seconds(self, item: CodeItem) -> float:
        """The reference's time when this replica knows it, else infinity (a dict read: fine on the event loop)."""
        problem = self._problem(item)
        prepared = self.prepared.peek(problem_content(problem)) if problem is not None else None
        known = prepared.remembered_t_ref() if prepared is not None else None
        return known["t_ref"] if known is not None else math.inf

    def prepare(self, problem: AnyProblem) -> PreparedProblem:
        """Once per distinct problem (LRU): splitting a big check and parsing the reference cost seconds; the items
        of one batch share one preparation."""
        content = problem_content(problem)
        return self.prepared.get(content, lambda: PreparedProblem.of(problem, content_hash(content), self.config.case_s))

    def evaluate(self, problem: AnyProblem, completion: str, runs: SharedRuns | None = None) -> Outcome | Callable[[], Outcome]:
        """Everything but efficiency, blocking (extraction, parsing, the run, AST similarity): off the event loop. With
        `runs`, a program already running for another item of the batch returns what concludes it once that run ends."""
        config, isolation = self.config, self.sandbox.isolation
        prepared = self.prepare(problem)
        extracted = extract(completion, prepared.marker)
        code = extracted.code
        if len(code) > config.max_code_chars:
            return too_long(extracted, config.max_code_chars)
        parsed = parse_solution(code)  # the syntax check and the similarity share one parse
        tree = None if isinstance(parsed, str) else parsed
        cases = CaseRuns(config.verdict_budget_s, self.cases, runs.cancelled if runs else None)
        execute = functools.partial(self._verdict, prepared, code, tree is not None, cases)
        outcome = functools.partial(conclude, prepared, extracted, tree, isolation=isolation, timed=config.efficiency)
        if runs is None:
            return outcome(execute(), "run")
        key = run_key(code, prepared.judged_key, config.limits, isolation)
        future, owned = runs.claim(key)
        if owned:
            runs.run(future, key, execute)
            return outcome(*future.result())

        def concluded() -> Outcome:
            return outcome(future.result()[0], "batch")

        return concluded() if future.done() else concluded

    def _verdict(self, prepared: PreparedProblem, code: str, parsed: bool, cases: CaseRuns) -> HarnessResult:
        """`code`'s run; one the verdict's budget cut is the candidate's `timeout`, unless the problem's
        reference is cut too (checked once per problem): then no program as fast as the reference could pass,
        and it is `invalid_problem` (ProblemError)."""
        result = run_tests(self.sandbox, prepared, code, self.config.limits, parsed, cases)
        if cut_by_budget(result) and prepared.reference.code:
            check = functools.partial(self._reference_cut, prepared, cases)
            unjudgeable = self.unjudgeable.get(prepared.judged_key, check)
            if unjudgeable is not None:
                raise ProblemError(unjudgeable)
        return result

    def _reference_cut(self, prepared: PreparedProblem, cases: CaseRuns) -> str | None:
        reference, config = prepared.reference, self.config
        result = run_tests(self.sandbox, prepared, reference.code, config.limits, reference.available, cases)
        if not cut_by_budget(result):
            return None
        budget_s, task_id = config.verdict_budget_s, prepared.problem.task_id
        log.warning("a reference over the verdict budget", extra={"task_id": task_id, "budget_s": budget_s})
        why = f"its reference does not pass within the verdict budget of {budget_s:g} CPU-s"
        return f"{why} (CORRGRPO_CODE_VERDICT_BUDGET_S)"
