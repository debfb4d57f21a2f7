"""The one bound on the CPU of a set of runs: a program's calibrated pairs or a problem's t_ref runs
(`code_timing_budget_s`), and the cases of one stdin verdict (`code_verdict_budget_s`, `stdio.run_stdin`).

The bound holds during a run: `BudgetedSandbox.run` gives each run the CPU limit whose cap
(`Limits.cpu_cap_s`) fits in what is left, less the caps of runs in flight on other threads. A run cut by a
lowered limit raises `OverBudget`, and its set makes no further run.
"""

from __future__ import annotations

import math
import signal
import threading
from dataclasses import dataclass, field, replace

from corrgrpo_sandbox import ExecResult, Limits, Sandbox


class OverBudget(Exception):
    """A run could not start within `budget`, or the budget's limit cut it (`result`, when it ran)."""

    def __init__(self, message: str, budget: TimingBudget, result: ExecResult | None = None) -> None:
        super().__init__(message)
        self.budget, self.result = budget, result


def cap_s(limit: float) -> float:
    return Limits(cpu_s=limit).cpu_cap_s


@dataclass
class TimingBudget:
    """CPU seconds for one set of runs (`name` says which, in errors); `limit` is the bound's only check.
    Threads may share it: `reserve` and `release` keep the caps of runs in flight out of what is left."""

    total_s: float
    spent_s: float = 0.0
    name: str = "timing"
    reserved_s: float = 0.0
    running: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition, repr=False, compare=False)

    @property
    def left_s(self) -> float:
        return self.total_s - self.spent_s - self.reserved_s

    def limit(self, own_s: float, left_s: float | None = None) -> float | None:
        """The CPU limit of a run that may take `own_s` when `left_s` (default: what is left now) remains:
        `own_s`, lowered to whole seconds so that its cap is at most `left_s`; None when not even 1 s fits."""
        left_s = self.left_s if left_s is None else left_s
        room = math.floor(left_s)
        while room >= 1 and cap_s(room) > left_s:
            room -= 1
        return min(own_s, room) if room >= 1 else None

    def fits(self, cost_s: float, left_s: float | None = None) -> bool:
        """Whether a run costing `cost_s` would complete under `limit` (with `left_s` left; default: now)."""
        limit = self.limit(math.inf, left_s)
        return limit is not None and cost_s <= limit

    def pairs_within(self, candidate_s: float, reference_s: float, most: int) -> int:
        """How many more pairs of runs costing `candidate_s` and `reference_s` would complete under `limit`,
        at most `most` (a stdin run's cases each get their own limit: approximate there, within a second)."""
        left_s = self.left_s
        for pairs in range(most):
            for cost_s in (candidate_s, reference_s):
                if not self.fits(cost_s, left_s):
                    return pairs
                left_s -= cost_s
        return most

    def reserve(self, own_s: float) -> float | None:
        """A run's limit (`limit`), its cap reserved until `release`. While other runs are in flight and
        the run's own limit does not fit, it waits for them: what they leave decides, as if run in turn."""
        with self.changed:
            while (limit := self.limit(own_s)) != own_s and self.running:
                self.changed.wait()
            if limit is not None:
                self.running, self.reserved_s = self.running + 1, self.reserved_s + cap_s(limit)
            return limit

    def release(self, limit: float, spent_s: float) -> None:
        with self.changed:
            self.running, self.reserved_s = self.running - 1, self.reserved_s - cap_s(limit)
            self.spent_s += spent_s
            self.changed.notify_all()


class BudgetedSandbox:
    """`Sandbox.run` for the harness, each run limited and charged by one `TimingBudget`."""

    def __init__(self, sandbox: Sandbox, budget: TimingBudget) -> None:
        self.sandbox, self.budget = sandbox, budget

    def run(self, source: str, *, stdin: bytes = b"", limits: Limits) -> ExecResult:
        budget = self.budget
        limit = budget.reserve(limits.cpu_s)
        if limit is None:
            left = f"{budget.left_s:.2f} of the {budget.name} budget's {budget.total_s:g} CPU-s left"
            raise OverBudget(f"{left}: no run fits", budget)
        spent_s = 0.0  # a run that raised (cancelled) is charged nothing: its set of runs ends with it
        try:
            result = self.sandbox.run(source, stdin=stdin, limits=replace(limits, cpu_s=limit))
            spent_s = result.cpu_s
        finally:
            budget.release(limit, spent_s)
        # Over the lowered limit: SIGXCPU at it, or killed past it (a wall timeout is the run's own)
        if limit < limits.cpu_s and (result.signal == signal.SIGXCPU or result.cpu_s > limit):
            cut = f"a run cut at the {limit:g} CPU-s left of the {budget.name} budget's {budget.total_s:g}"
            raise OverBudget(cut, budget, result)
        return result
