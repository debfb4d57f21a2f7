"""The efficiency component of a batch's correct items, once the lanes are done: `paper`, each item's one run against
its problem's shared t_ref (`reference_times.py`); `calibrated`, paired runs (`efficiency.time_pairs`) once per
distinct program of a problem, within one `TimingBudget`, copies in a batch sharing one timing as they share one
verdict run."""

from __future__ import annotations

import asyncio
import functools
import statistics
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from corrgrpo_sandbox import Sandbox

from .config import ScoringConfig
from .efficiency import TimingRunFailed, efficiency, time_pairs
from .execution import run_tests
from .lanes import Answers, item_error
from .prepared import PreparedProblem
from .reference_times import ReferenceTimes
from .scoring import Outcome
from .stdio import CaseRuns
from .timing_budget import BudgetedSandbox, OverBudget, TimingBudget

Timed = tuple[int, Outcome, PreparedProblem]  # a correct item: its index in the batch, outcome, problem


def timed(answers: Answers) -> list[Timed]:
    return [(i, a, a.timed) for i, a in enumerate(answers) if isinstance(a, Outcome) and a.timed is not None]


async def add_paper(timed: list[Timed], answers: Answers, reference_times: ReferenceTimes) -> None:
    """One t_ref lookup per distinct problem (none for those this replica remembers)."""
    problems = {prepared.key: prepared for _, _, prepared in timed}
    known = {key: reference for key, p in problems.items() if (reference := p.remembered_t_ref()) is not None}
    asked = [prepared for key, prepared in problems.items() if key not in known]
    fetched = await asyncio.gather(*(reference_times.get(p) for p in asked), return_exceptions=True)
    by_key = {**known, **dict(zip((p.key for p in asked), fetched, strict=True))}
    for index, outcome, prepared in timed:
        reference = by_key[prepared.key]
        if isinstance(reference, BaseException):
            answers[index] = item_error(reference, prepared.problem.task_id)
        else:
            info = outcome.scored.info
            info.update(t_ref=reference["t_ref"], t_ref_source=reference["source"], t_ref_error=reference.get("error"))
            outcome.scored.components["efficiency"] = efficiency(outcome.cpu_s, reference["t_ref"])


# A program's efficiency and the info shown, from its problem, its code and its verdict run's CPU seconds
Calibrate = Callable[[PreparedProblem, str, float], tuple[float, dict[str, Any]]]


async def add_calibrated(timed: list[Timed], answers: Answers, calibrate: Calibrate, pool: Executor) -> None:
    """`calibrate(prepared, code, verdict_s)` in `pool`, once per distinct program of a problem."""
    programs = {(prepared.key, outcome.code): (prepared, outcome.cpu_s) for _, outcome, prepared in timed}
    loop = asyncio.get_running_loop()
    timings = (loop.run_in_executor(pool, calibrate, p, code, t) for (_, code), (p, t) in programs.items())
    measured = dict(zip(programs, await asyncio.gather(*timings, return_exceptions=True), strict=True))
    for index, outcome, prepared in timed:
        timing = measured[prepared.key, outcome.code]
        if isinstance(timing, BaseException):
            answers[index] = item_error(timing, prepared.problem.task_id)
        else:
            value, shown = timing
            outcome.scored.components["efficiency"] = value
            outcome.scored.info.update(shown)


def calibrate(
    sandbox: Sandbox,
    config: ScoringConfig,
    cancelled: threading.Event | None,
    prepared: PreparedProblem,
    code: str,
    verdict_s: float,
) -> tuple[float, dict[str, Any]]:
    """`code`'s calibrated efficiency against the reference, and what `info` shows of the pairs (blocking). Every run
    goes through one `BudgetedSandbox`, a stdin problem's cases one after another (each limited by what is left)."""
    calibration, budget = config.calibration, TimingBudget(config.timing_budget_s)
    # Both programs parse when the reference did at preparation (`available`): the candidate passed its tests already.
    parsed = prepared.reference.available
    budgeted = BudgetedSandbox(sandbox, budget)
    cases = CaseRuns(cancel=cancelled)
    run = functools.partial(run_tests, budgeted, prepared, limits=config.limits, parsed=parsed, cases=cases)
    shown: dict[str, Any] = {"t_ref": None, "t_ref_source": "paired"}
    with sandbox.cancellable(cancelled or threading.Event()):
        try:
            times = time_pairs(run, code, prepared.reference.code, calibration, budget, verdict_s)
        except TimingRunFailed as failed:
            error = {"reference": "t_ref_error", "candidate": "timing_error"}[failed.side]
            return 0.0, {**shown, error: str(failed), "timing_cpu_s": budget.spent_s}
        except OverBudget as cut:
            return 0.0, {**shown, "timing_budget": str(cut), "timing_cpu_s": budget.spent_s}
    if times.pairs:
        shown.update(t_ref=statistics.median(times.reference), t_ratio=times.ratio(), t_ratio_bound=times.bound(calibration))
    return times.efficiency(calibration), {**shown, "timing_pairs": times.pairs, "timing_cpu_s": budget.spent_s}
