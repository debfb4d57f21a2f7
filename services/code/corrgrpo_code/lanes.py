"""A batch's items evaluated in lane threads, each taking the next item as it finishes one (one hand-off to the event
loop per lane, not per item). An item whose program another lane is running waits until the lane has nothing else."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corrgrpo_proto import ItemError
from corrgrpo_proto.code import AnyProblem, CodeItem
from corrgrpo_sandbox import RunCancelled, Sandbox

from .execution import SandboxFault
from .kinds import ProblemError
from .runs import SharedRuns
from .scoring import Outcome

log = logging.getLogger("corrgrpo.code")
Answers = list[Outcome | ItemError | None]  # by item index; None until answered
# An item's evaluation: its outcome, or what concludes it once another item's run of the same program ends
Evaluate = Callable[[AnyProblem, str, SharedRuns | None], Outcome | Callable[[], Outcome]]


def item_error(error: BaseException, task_id: str) -> ItemError:
    if isinstance(error, SandboxFault):
        return ItemError(code="sandbox_anomaly", message=f"sandbox broken: {error}")
    if isinstance(error, ProblemError):
        return ItemError(code="invalid_problem", message=str(error))
    log.error("scoring failed", exc_info=error, extra={"task_id": task_id})
    return ItemError(code="internal", message=f"{type(error).__name__}: {error}")


def no_problem(item: CodeItem) -> ItemError:
    if item.problem_from is not None:  # only `/v1/score`'s request resolves it (OpenRLHF's labels are items alone)
        return ItemError(code="invalid_problem", message="`problem_from` names another item of a /v1/score request")
    return ItemError(code="unknown_task", message=f"no loaded problem has task_id {item.task_id!r}")


@dataclass
class Batch:
    """What the lanes of one batch share: the items still to take (`pending`), the answers, its cancel event."""

    items: Sequence[CodeItem]
    problems: Callable[[CodeItem], AnyProblem | None]  # an item's problem: inline, or loaded by task_id
    pending: queue.SimpleQueue[int]
    cancelled: threading.Event
    runs: SharedRuns
    answers: Answers


def lane(batch: Batch, sandbox: Sandbox, evaluate: Evaluate) -> None:
    """Items until none is left or the batch is cancelled; one item's failure never fails the batch."""
    waiting: list[tuple[int, str, Callable[[], Outcome]]] = []
    answers = batch.answers
    with sandbox.cancellable(batch.cancelled):
        while not batch.cancelled.is_set():
            try:
                index = batch.pending.get_nowait()
            except queue.Empty:
                break
            problem = batch.problems(batch.items[index])
            if problem is None:
                answers[index] = no_problem(batch.items[index])
                continue
            try:
                answer = evaluate(problem, batch.items[index].completion, batch.runs)
            except RunCancelled:
                return
            except Exception as error:
                answers[index] = item_error(error, problem.task_id)
                continue
            if isinstance(answer, Outcome):
                answers[index] = answer
            else:
                waiting.append((index, problem.task_id, answer))
        for index, task_id, conclude in waiting:
            try:
                answers[index] = conclude()
            except RunCancelled:
                return
            except Exception as error:
                answers[index] = item_error(error, task_id)
