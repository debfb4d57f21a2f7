"""The one bound on the CPU that timing costs (`ScoringConfig.timing_budget_s`): a program's calibrated pairs, or a
problem's t_ref runs, spend at most `TimingBudget.total_s` of sandbox CPU together, every run counted: both sides,
every stdin case, a judge's run, a retry after an anomaly.

The bound holds during a run, not only between runs: every run made for timing goes through `BudgetedSandbox.run`,
which gives it the CPU limit `TimingBudget.limit` allows, so that the most the sandbox lets the run spend (its CPU cap,
`ceil(cpu_s) + 1` s, sandbox README) fits in what is left. A run cut by a limit the budget lowered raises `OverBudget`:
its timing pays nothing, and no further run is made for it.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, replace

from corrgrpo_sandbox import ExecResult, Limits, Sandbox

CAP_OVER_LIMIT_S = 1  # the sandbox lets a run spend its limit rounded up to whole seconds, plus this


class OverBudget(Exception):
    """A timing run could not start within the budget, or the budget's limit cut it: no efficiency is paid."""


@dataclass
class TimingBudget:
    """CPU seconds for one program's timing (or one t_ref measurement); `limit` is the bound's only check."""

    total_s: float
    spent_s: float = 0.0

    @property
    def left_s(self) -> float:
        return self.total_s - self.spent_s

    def limit(self, own_s: float, left_s: float | None = None) -> float | None:
        """The CPU limit of a run that may take `own_s` when `left_s` (default: what is left now) remains: `own_s`,
        lowered to whole seconds so that the sandbox's cap of it, `max(1, ceil(limit)) + 1`, is at most `left_s`;
        None when not even a 1 s limit fits."""
        room = math.floor(self.left_s if left_s is None else left_s) - CAP_OVER_LIMIT_S
        return min(own_s, room) if room >= 1 else None

    def fits(self, cost_s: float, left_s: float | None = None) -> bool:
        """Whether a run costing `cost_s` would complete under `limit` (with `left_s` left; default: now)."""
        limit = self.limit(math.inf, left_s)
        return limit is not None and cost_s <= limit

    def pairs_within(self, candidate_s: float, reference_s: float, most: int) -> int:
        """How many more pairs of runs costing `candidate_s` and `reference_s` would complete under `limit`, at most
        `most` (a stdin run's cases each get their own limit: approximate there, within a second)."""
        left_s = self.left_s
        for pairs in range(most):
            for cost_s in (candidate_s, reference_s):
                if not self.fits(cost_s, left_s):
                    return pairs
                left_s -= cost_s
        return most


class BudgetedSandbox:
    """`Sandbox.run` for the harness, each run limited and charged by one `TimingBudget` (used by one thread)."""

    def __init__(self, sandbox: Sandbox, budget: TimingBudget) -> None:
        self.sandbox, self.budget = sandbox, budget

    def run(self, source: str, *, stdin: bytes = b"", limits: Limits) -> ExecResult:
        budget = self.budget
        limit = budget.limit(limits.cpu_s)
        if limit is None:
            raise OverBudget(f"{budget.left_s:.2f} of the timing budget's {budget.total_s:g} CPU-s left: no run fits")
        lowered = replace(limits, cpu_s=limit)
        result = self.sandbox.run(source, stdin=stdin, limits=lowered)
        budget.spent_s += result.cpu_s
        # Over the lowered limit: SIGXCPU at it, or killed past it (a wall timeout is the run's, not the budget's)
        if limit < limits.cpu_s and (result.signal == signal.SIGXCPU or result.cpu_s > limit):
            raise OverBudget(f"a run cut at the {limit:g} CPU-s left of the timing budget's {budget.total_s:g}")
        return result
