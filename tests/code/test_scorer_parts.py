"""The scorer's pieces, each alone: a problem's identity, the bounded memo, the shared reference time and its
store lock, the lanes' answers (AST similarity's: test_units and test_parity)."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from corrgrpo_code.cache import BoundedMemo, SharedVerdicts
from corrgrpo_code.declaration import Components
from corrgrpo_code.efficiency import ReferenceTime, ReferenceTimes
from corrgrpo_code.problem_tests import ProblemTests, content_hash, problem_content
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.scorer import Batch, CodeScorer, Job, no_problem
from corrgrpo_code.settings import CodeSettings
from corrgrpo_common import MemoryStore, StoreUnavailable
from corrgrpo_proto.code import CallCase, CallProblem, CodeItem, MbppProblem, StdinCase, StdinProblem

HUMANEVAL = list(humaneval_problems())


# --- identity
# ---------------------------------------------------------------------------------------------------------
def test_a_problems_content_ignores_its_task_id_and_separates_kinds() -> None:
    stdin = StdinProblem(task_id="a", stdin_cases=[StdinCase(input="1\n", output="1\n")])
    call = CallProblem(task_id="a", fn_name="f", call_cases=[CallCase(args=[1], expected=1)])
    mbpp = MbppProblem(task_id="a", test_list=["assert f(1) == 1"])
    for problem in (HUMANEVAL[0], stdin, call, mbpp):
        assert problem_content(problem) == problem_content(problem.model_copy(update={"task_id": "other"}))
    changed = [
        HUMANEVAL[0].model_copy(update={"test": HUMANEVAL[0].test + "\n"}),
        stdin.model_copy(update={"time_limit_s": 1.0}),
        call.model_copy(update={"call_cases": [CallCase(args=[2], expected=1)]}),
        mbpp.model_copy(update={"test_setup_code": "import math"}),
    ]
    hashes = {content_hash(problem_content(p)) for p in (HUMANEVAL[0], stdin, call, mbpp, *changed)}
    assert len(hashes) == 8  # every kind apart, every field counted


# --- the bounded memo
# -------------------------------------------------------------------------------------------------
def test_the_memo_makes_each_value_once_and_forgets_the_least_recently_used() -> None:
    made: list[str] = []
    memo: BoundedMemo[str, str] = BoundedMemo(2)

    def get(key: str) -> str:
        return memo.get(key, lambda: made.append(key) or key.upper())

    assert [get("a"), get("b"), get("a")] == ["A", "B", "A"] and made == ["a", "b"]
    get("c")  # "b" is the least recently used now
    assert memo.peek("b") is None and memo.peek("a") == "A" and len(memo) == 2
    get("b")
    assert made == ["a", "b", "c", "b"]


def test_threads_asking_for_one_key_share_one_making() -> None:
    memo: BoundedMemo[str, int] = BoundedMemo(4)
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        time.sleep(0.05)
        return 7

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda _: memo.get("k", slow), range(8))) == [7] * 8
    assert len(calls) == 1


# --- the shared reference time
# ----------------------------------------------------------------------------------------
class _Sandbox:
    isolation = "bwrap"

    @contextmanager
    def cancellable(self, cancelled: threading.Event) -> Iterator[None]:
        yield


def _times(store: Any, measure: Callable[[ProblemTests], ReferenceTime]) -> ReferenceTimes:
    times = ReferenceTimes(_Sandbox(), store, ThreadPoolExecutor(2), CodeSettings())  # type: ignore[arg-type]
    times.measure = measure  # type: ignore[method-assign]
    return times


def test_concurrent_askers_measure_once_through_the_store_lock() -> None:
    measured: list[str] = []

    def measure(tests: ProblemTests) -> ReferenceTime:
        measured.append(tests.key)
        time.sleep(0.1)
        return ReferenceTime(0.5, runs=(0.5,) * 4)

    tests = ProblemTests.of(HUMANEVAL[0])
    replicas = [_times(store, measure) for store in [MemoryStore()] * 3]  # one store, three replicas

    async def ask() -> list[ReferenceTime]:
        return await asyncio.gather(*(times.get(tests) for times in replicas))

    sources = sorted(reference.source for reference in asyncio.run(ask()))
    assert sources == ["cache", "cache", "measured"] and len(measured) == 1
    remembered = asyncio.run(replicas[0].get(tests))
    assert remembered.source == "memory" and remembered.t_ref == 0.5 and remembered.runs == (0.5,) * 4


class _Down(MemoryStore):
    async def get(self, key: str) -> bytes | None:
        raise StoreUnavailable("down")


def test_without_a_store_the_reference_is_measured_anyway() -> None:
    times = _times(_Down(), lambda tests: ReferenceTime(0.25, runs=(0.25,) * 4))
    assert asyncio.run(times.get(ProblemTests.of(HUMANEVAL[0]))).source == "measured_uncached"


def test_a_run_far_off_the_others_is_noisy() -> None:
    assert ReferenceTime(0.06, runs=(0.01, 0.01, 0.01, 0.2)).noisy()
    assert not ReferenceTime(0.01, runs=(0.01, 0.011, 0.012, 0.01)).noisy()


# --- lanes
# ------------------------------------------------------------------------------------------------------------
def test_a_lane_answers_every_item_alone_and_concludes_shared_runs_last() -> None:
    items = [CodeItem(task_id=name, completion=name) for name in ("ok", "broken", "missing", "copy")]
    problems = {name: HUMANEVAL[0].model_copy(update={"task_id": name}) for name in ("ok", "broken", "copy")}
    scorer = CodeScorer(_Sandbox(), MemoryStore(), problems, CodeSettings(code_workers=1))  # type: ignore[arg-type]
    order: list[str] = []

    def evaluate(job: Job, batch: Batch) -> None:
        order.append(job.item.completion)
        if job.problem is None:
            job.error = no_problem(job.item)
        elif job.item.completion == "broken":
            raise RuntimeError("boom")
        else:  # the copy finds the program's run in another lane's hands, not done
            job.claim = batch.verdicts.claim("copy" if job.item.completion == "copy" else job.item.completion)
            if job.item.completion != "copy":
                job.components, job.info = Components(correct=1.0), {"item": job.item.completion}

    def conclude(job: Job) -> None:
        order.append("concluded")
        job.components, job.info = Components(correct=1.0), {"item": job.item.completion}

    scorer.evaluate = evaluate  # type: ignore[method-assign]
    jobs = [Job(item, problems.get(item.task_id or "")) for item in items]
    jobs[3].conclude = lambda isolation, efficiency: conclude(jobs[3])  # type: ignore[method-assign]
    verdicts = SharedVerdicts(MemoryStore(), asyncio.new_event_loop(), "p:", 0)
    verdicts.claim("copy")  # another lane owns the copy's run
    batch = Batch(queue.SimpleQueue(), verdicts)
    for job in jobs:
        batch.pending.put(job)
    scorer._lane(batch)
    scorer.close()
    answers = [job.answer() for job in jobs]
    assert order == ["ok", "broken", "missing", "copy", "concluded"]
    assert answers[0].info == {"item": "ok"} and answers[3].info == {"item": "copy"}  # type: ignore[union-attr]
    assert (answers[1].code, answers[2].code) == ("internal", "unknown_task")  # type: ignore[union-attr]
