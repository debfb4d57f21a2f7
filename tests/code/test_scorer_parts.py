"""The scorer's pieces, each alone: a problem's identity, the bounded memo, the shared reference time and its store
lock, the lanes' answers (AST similarity's: test_units and test_parity)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from corrgrpo_code.config import ScoringConfig
from corrgrpo_code.identity import content_hash, problem_content
from corrgrpo_code.lanes import Batch, lane
from corrgrpo_code.memo import BoundedMemo
from corrgrpo_code.prepared import PreparedProblem
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.reference_times import ReferenceTimes, noisy
from corrgrpo_code.runs import SharedRuns
from corrgrpo_code.scoring import Outcome
from corrgrpo_common import MemoryStore, Scored, StoreUnavailable
from corrgrpo_proto.code import CallCase, CallProblem, CodeItem, MbppProblem, StdinCase, StdinProblem

HUMANEVAL = list(humaneval_problems())


# --- identity ---------------------------------------------------------------------------------------------------------
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


def test_a_check_problems_hash_is_the_one_its_reference_times_were_stored_under() -> None:
    """The t_ref keys already in a store stay valid: sha256 of the JSON list of the four fields, 32 hex digits."""
    for problem in HUMANEVAL[:5]:
        fields = [problem.prompt, problem.entry_point, problem.test, problem.reference]
        legacy = hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:32]
        assert content_hash(problem_content(problem)) == legacy == PreparedProblem.of(problem).key


# --- the bounded memo -------------------------------------------------------------------------------------------------
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


# --- the shared reference time ----------------------------------------------------------------------------------------
def _times(store: Any, measure: Callable[[PreparedProblem], dict[str, Any]]) -> ReferenceTimes:
    times = ReferenceTimes(None, store, ThreadPoolExecutor(2), ScoringConfig())  # type: ignore[arg-type]
    times.measure = measure  # type: ignore[method-assign]
    return times


def test_concurrent_askers_measure_once_through_the_store_lock() -> None:
    measured: list[str] = []

    def measure(prepared: PreparedProblem) -> dict[str, Any]:
        measured.append(prepared.key)
        time.sleep(0.1)
        return {"t_ref": 0.5, "runs": [0.5] * 4}

    prepared = PreparedProblem.of(HUMANEVAL[0])
    replicas = [_times(store, measure) for store in [MemoryStore()] * 3]  # one store, three replicas

    async def ask() -> list[dict[str, Any]]:
        return await asyncio.gather(*(times.get(prepared) for times in replicas))

    sources = sorted(reference["source"] for reference in asyncio.run(ask()))
    assert sources == ["cache", "cache", "measured"] and len(measured) == 1
    assert asyncio.run(replicas[0].get(prepared))["source"] == "memory"


class _Down(MemoryStore):
    async def get(self, key: str) -> bytes | None:
        raise StoreUnavailable("down")


def test_without_a_store_the_reference_is_measured_anyway() -> None:
    times = _times(_Down(), lambda prepared: {"t_ref": 0.25, "runs": [0.25] * 4})
    assert asyncio.run(times.shared(PreparedProblem.of(HUMANEVAL[0])))["source"] == "measured_uncached"


def test_a_run_far_off_the_others_is_noisy() -> None:
    assert noisy([0.01, 0.01, 0.01, 0.2]) and not noisy([0.01, 0.011, 0.012, 0.01])


# --- lanes -------------------------------------------------------------------------------------------------------------
class _Sandbox:
    @contextmanager
    def cancellable(self, cancelled: threading.Event) -> Iterator[None]:
        yield


def test_a_lane_answers_every_item_alone_and_concludes_shared_runs_last() -> None:
    items = [CodeItem(task_id=name, completion=name) for name in ("ok", "broken", "missing", "copy")]
    problems = {name: HUMANEVAL[0].model_copy(update={"task_id": name}) for name in ("ok", "broken", "copy")}
    order: list[str] = []

    def evaluate(problem: Any, completion: str, runs: Any) -> Outcome | Callable[[], Outcome]:
        order.append(completion)
        if completion == "broken":
            raise RuntimeError("boom")
        outcome = Outcome(Scored({"correct": 1.0}, {"item": completion}))
        return (lambda: order.append("concluded") or outcome) if completion == "copy" else outcome

    pending = queue.SimpleQueue[int]()
    for index in range(len(items)):
        pending.put(index)
    cancelled = threading.Event()
    runs = SharedRuns(MemoryStore(), asyncio.new_event_loop(), "p:", 0, cancelled)
    answers: list[Any] = [None] * len(items)
    batch = Batch(items, lambda item: problems.get(item.task_id or ""), pending, cancelled, runs, answers)
    lane(batch, _Sandbox(), evaluate)  # type: ignore[arg-type]
    assert order == ["ok", "broken", "copy", "concluded"]
    assert answers[0].scored.info == {"item": "ok"} and answers[3].scored.info == {"item": "copy"}
    assert (answers[1].code, answers[2].code) == ("internal", "unknown_task")
