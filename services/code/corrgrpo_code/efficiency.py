"""The `efficiency` component's two measurements (`CORRGRPO_CODE_EFFICIENCY_MODE`).

Both pay `clip(1 - ratio, 0, 1)` to a correct program, from CPU times the kernel measured outside the candidate's
process. `paper` (the authors'): ratio = t / t_ref, t the item's one run, t_ref the mean of a few reference runs
measured once per problem. One run's CPU time on a shared host varies by 10-30 % whatever its length (SMT siblings,
caches), so copies of the reference earn about 0.1 on average (`bench/bench_efficiency_noise.py`).
`calibrated`: candidate and reference run in pairs, back to back, the order alternating, until the median of the
pairs' ratios is known well enough; the ratio paid on is its upper confidence bound `median * exp(k * se)`, so a
speed-up within the measured spread earns nothing and one beyond it earns nearly the paper's value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from corrgrpo_code.harness import HarnessResult

EfficiencyMode = Literal["paper", "calibrated"]
MAD_TO_SE = 1.4826 * math.sqrt(math.pi / 2)  # MAD -> sigma of a normal sample, times the median's loss against the mean
FEWEST_PAIRS = 3  # a spread needs at least this many pairs, whatever the budget
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
    budget_s: float = 10.0  # CPU seconds of an item's timing runs, both sides; past it no new pair (FEWEST_PAIRS kept)

    def __post_init__(self) -> None:
        if not FEWEST_PAIRS <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"timing pairs must satisfy {FEWEST_PAIRS} <= min_pairs <= max_pairs")


@dataclass
class PairedTimes:
    """CPU seconds of the candidate's and the reference's runs, pair by pair."""

    candidate: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)

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
        return min(1.0, max(0.0, 1.0 - self.bound(calibration)))

    def done(self, calibration: Calibration) -> bool:
        """Enough pairs: the most allowed, the budget spent, the median precise enough, or settled at no pay (even the
        standard error `max_pairs` would reach leaves the bound at parity or above)."""
        if self.pairs >= calibration.max_pairs:
            return True
        if self.pairs >= FEWEST_PAIRS and sum(self.candidate) + sum(self.reference) >= calibration.budget_s:
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


def time_pairs(run: Callable[[str], HarnessResult], candidate: str, reference: str, calibration: Calibration) -> PairedTimes:
    """Pairs of passing runs of both programs through `run` until `PairedTimes.done`; the first of a pair alternates
    (neither side always meets the caches the other left). Every run must pass: a program that is fast only when it
    is wrong earns nothing."""
    times = PairedTimes()
    while not times.done(calibration):
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
