"""The `efficiency` component's two measurements (`CORRGRPO_CODE_EFFICIENCY_MODE`).

Both pay `clip(1 - ratio, 0, 1)` to a correct program, from CPU times the kernel measured outside the candidate's
process. `paper` (the authors'): ratio = t / t_ref, t the item's one run, t_ref the mean of a few reference runs
measured once per problem. One run's CPU time on a shared host varies by 10-30 % whatever its length (SMT siblings,
caches), so copies of the reference earn about 0.1 on average (`bench/bench_efficiency_noise.py`).
`calibrated`: candidate and reference run in pairs, back to back, the order alternating, until the median of the
pairs' ratios is known well enough; the ratio paid on is its upper confidence bound `median * exp(k * se)`, so a
speed-up within the measured spread earns nothing and one beyond it earns nearly the paper's value. The pairs spend at
most one `TimingBudget` (`timing_budget.py`), and a pair is run only while some outcome of the pairs still possible
could pay.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from corrgrpo_code.harness import HarnessResult
from corrgrpo_code.timing_budget import TimingBudget

EfficiencyMode = Literal["paper", "calibrated"]
MAD_TO_SE = 1.4826 * math.sqrt(math.pi / 2)  # MAD -> sigma of a normal sample, times the median's loss against the mean
FEWEST_PAIRS = 3  # a spread needs at least this many pairs: fewer pay nothing
# A later run of a program costs at least this share of its cheapest run so far, at most its inverse times its dearest
# (one run's CPU time varies with CV 0.14, p90 0.22): what bounds the pairs and ratios still possible. Misjudged, it
# only withholds pay, never pays noise.
COST_FLOOR = 0.75
SHORTEST_RUN_S = 1e-6  # a zero CPU time (a coarse clock) still gives a finite log ratio


def efficiency(t: float, t_ref: float | None) -> float:
    """The authors' `clip(1 - t / t_ref, 0, 1)` of a correct run; 0 unless both times are known and positive (their
    `applied`): as fast as the reference or slower earns 0."""
    if t_ref is None or t_ref <= 0 or t <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - t / t_ref))


@dataclass(frozen=True)
class Calibration:
    """When the paired runs stop, and how wide the bound paid on is (defaults from `bench_efficiency_noise.py`)."""

    min_pairs: int = 12
    max_pairs: int = 24
    confidence: float = 3.0  # k: standard errors of the median log ratio between the median and the bound paid on
    precision: float = 0.04  # stop once the median log ratio's standard error is this small

    def __post_init__(self) -> None:
        if not FEWEST_PAIRS <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"timing pairs must satisfy {FEWEST_PAIRS} <= min_pairs <= max_pairs")


@dataclass
class PairedTimes:
    """CPU seconds of the candidate's and the reference's runs, pair by pair (`verdict_s`: the candidate's verdict
    run, what its runs cost before any pair)."""

    candidate: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)
    verdict_s: float | None = None

    @property
    def pairs(self) -> int:
        return len(self.candidate)

    def log_ratios(self) -> list[float]:
        pairs = zip(self.candidate, self.reference, strict=True)
        return [math.log(max(c, SHORTEST_RUN_S) / max(r, SHORTEST_RUN_S)) for c, r in pairs]

    def ratio(self) -> float:
        """The median of the pairs' t / t_ref."""
        return math.exp(statistics.median(self.log_ratios()))

    def standard_error(self, calibration: Calibration) -> float:
        """Of the median log ratio, from the pairs' MAD; widened when the budget ended the pairs before `min_pairs`
        (a spread from so few pairs is itself uncertain)."""
        logs = self.log_ratios()
        center = statistics.median(logs)
        spread = MAD_TO_SE * statistics.median(abs(value - center) for value in logs) / math.sqrt(len(logs))
        return spread * math.sqrt(max(1.0, calibration.min_pairs / len(logs)))

    def bound(self, calibration: Calibration) -> float:
        """The upper confidence bound of t / t_ref that efficiency pays on."""
        return self.ratio() * math.exp(calibration.confidence * self.standard_error(calibration))

    def efficiency(self, calibration: Calibration) -> float:
        if self.pairs < FEWEST_PAIRS:
            return 0.0
        return min(1.0, max(0.0, 1.0 - self.bound(calibration)))

    def _costs(self, pick: Callable[[list[float]], float]) -> tuple[float, float]:
        """`pick` of each side's run costs so far (the candidate's verdict run included; 0 for a side not yet run)."""
        candidate = [*self.candidate, *([] if self.verdict_s is None else [self.verdict_s])]
        return pick(candidate) if candidate else 0.0, pick(self.reference) if self.reference else 0.0

    def could_pay(self, calibration: Calibration, budget: TimingBudget) -> bool:
        """Whether some outcome of the pairs still possible pays more than 0: as many as `max_pairs` and the budget
        allow at the cheapest costs, each at the lowest ratio possible (each side's later runs cost within a factor
        `COST_FLOOR` of what it has cost so far; before the first pair, any ratio). Pay needs `FEWEST_PAIRS` pairs
        and a median ratio below 1 (the spread only raises the bound paid on)."""
        candidate_s, reference_s = self._costs(min)
        more = budget.pairs_within(COST_FLOOR * candidate_s, COST_FLOOR * reference_s, calibration.max_pairs - self.pairs)
        if self.pairs + more < FEWEST_PAIRS:
            return False
        lowest = -math.inf
        if self.reference:
            dearest = max(self.reference) / COST_FLOOR
            lowest = math.log(max(COST_FLOOR * candidate_s, SHORTEST_RUN_S) / max(dearest, SHORTEST_RUN_S))
        return statistics.median([*self.log_ratios(), *[lowest] * more]) < 0

    def done(self, calibration: Calibration, budget: TimingBudget) -> bool:
        """Enough pairs: the most allowed; from the first pair on, no outcome could pay (`could_pay`) or the next
        pair would not fit in the budget at the dearest costs seen; past `min_pairs`, the median precise enough, or
        settled at no pay (even the standard error `max_pairs` would reach leaves the bound at parity or above)."""
        if self.pairs >= calibration.max_pairs or not self.could_pay(calibration, budget):
            return True
        if budget.pairs_within(*self._costs(max), 1) == 0:
            return True
        if self.pairs < calibration.min_pairs:
            return False
        error = self.standard_error(calibration)
        reachable = error * math.sqrt(self.pairs / calibration.max_pairs)
        return error <= calibration.precision or math.log(self.ratio()) + calibration.confidence * reachable >= 0


class TimingRunFailed(Exception):
    """A timing run did not pass its tests (`side`: `candidate` or `reference`): no efficiency is paid."""

    def __init__(self, side: str, result: HarnessResult) -> None:
        super().__init__(f"{side} failed a timing run: {result.stage}: {result.error}")
        self.side = side


def time_pairs(
    run: Callable[[str], HarnessResult],
    candidate: str,
    reference: str,
    calibration: Calibration,
    budget: TimingBudget,
    verdict_s: float | None = None,
) -> PairedTimes:
    """Pairs of passing runs of both programs through `run` (which spends `budget`, and raises `OverBudget` for a run
    it cut) until `PairedTimes.done`; the first of a pair alternates (neither side always meets the caches the other
    left). Every run must pass: a program that is fast only when it is wrong earns nothing."""
    times = PairedTimes(verdict_s=verdict_s)
    while not times.done(calibration, budget):
        sides = [("candidate", candidate), ("reference", reference)]
        measured = {}
        for side, code in sides[:: -1 if times.pairs % 2 else 1]:
            result = run(code)
            if not result.ok or result.exec is None:
                raise TimingRunFailed(side, result)
            measured[side] = result.exec.cpu_s
        times.candidate.append(measured["candidate"])
        times.reference.append(measured["reference"])
    return times
