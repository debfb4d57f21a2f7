"""The `efficiency` component of a correct program (`CORRGRPO_CODE_EFFICIENCY_MODE`).

Both modes pay `clip(1 - ratio, 0, 1)`, from CPU times the kernel measured outside the candidate's process.
`paper` (the authors'): ratio = t / t_ref, t the item's one run, t_ref the mean of a few reference runs
measured once per problem (`ReferenceTimes`). One run's CPU time on a shared host varies by 10-30 %, so copies
of the reference earn about 0.1 on average (`bench/bench_efficiency_noise.py`). `calibrated`: candidate and
reference run in pairs, back to back, the order alternating, until the median of the pairs' ratios is known
well enough (`time_pairs`). The ratio paid on is its upper confidence bound, so a speed-up within the measured
spread earns nothing. The runs of one measurement spend at most one `TimingBudget`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, replace

from corrgrpo_common import Store, StoreUnavailable
from corrgrpo_sandbox import Sandbox

from .budget import BudgetedSandbox, OverBudget, TimingBudget
from .cache import BoundedMemo, store_key
from .harness import HarnessResult
from .problem_tests import ProblemTests
from .settings import FEWEST_PAIRS, CodeSettings
from .stdio import CaseRuns

log = logging.getLogger("corrgrpo.code")
MAD_TO_SE = 1.4826 * math.sqrt(math.pi / 2)  # MAD -> a normal sample's sigma, times the median's loss
# A later run of a program costs at least this share of its cheapest run so far, at most its inverse times its
# dearest (one run's CPU time varies with CV 0.14, p90 0.22). Misjudged, it withholds pay, never pays noise.
COST_FLOOR = 0.75
SHORTEST_RUN_S = 1e-6  # a zero CPU time (a coarse clock) still gives a finite log ratio
LOCK_TTL_S = 120.0  # a replica that died while measuring t_ref frees the lock after this
WAIT_POLL_S = 0.05
REFERENCE_MEMO_S = 300.0  # how long a replica keeps a successful t_ref in memory instead of asking the store
REMEMBERED = 256  # problems whose t_ref a replica keeps in memory
Timed = tuple[ProblemTests, str, float]  # a correct program: its problem's tests, code, verdict's CPU s


@dataclass(frozen=True)
class Timing:
    """A correct program's efficiency and what `info` shows of its measurement (t_ref and source always)."""

    efficiency: float
    t_ref: float | None
    t_ref_source: str
    t_ref_error: str | None = None
    timing_error: str | None = None
    timing_budget: str | None = None
    t_ratio: float | None = None
    t_ratio_bound: float | None = None
    timing_pairs: int | None = None
    timing_cpu_s: float | None = None

    def info(self) -> dict[str, float | str | None]:
        shown = asdict(self)
        del shown["efficiency"]
        return {name: value for name, value in shown.items() if value is not None or name == "t_ref"}


def efficiency(t: float, t_ref: float | None) -> float:
    """The authors' `clip(1 - t / t_ref, 0, 1)` of a correct run; 0 unless both times are known and positive
    (their `applied`): as fast as the reference or slower earns 0."""
    if t_ref is None or t_ref <= 0 or t <= 0:
        return 0.0
    return min(1.0, max(0.0, 1.0 - t / t_ref))


@dataclass(frozen=True)
class Calibration:
    """When the paired runs stop, and how wide the bound paid on is (from `bench_efficiency_noise.py`)."""

    min_pairs: int
    max_pairs: int
    confidence: float = 3.0  # k: standard errors of the median log ratio from the median to the bound paid
    precision: float = 0.04  # stop once the median log ratio's standard error is this small

    def __post_init__(self) -> None:
        if not FEWEST_PAIRS <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"timing pairs must satisfy {FEWEST_PAIRS} <= min_pairs <= max_pairs")

    @classmethod
    def of(cls, settings: CodeSettings) -> Calibration:
        return cls(settings.code_timing_min_pairs, settings.code_timing_max_pairs)


@dataclass
class PairedTimes:
    """CPU seconds of the candidate's and the reference's runs, pair by pair (`verdict_s`: the candidate's
    verdict run, what its runs cost before any pair)."""

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
        """Of the median log ratio, from the pairs' MAD. Widened when the budget ended the pairs before
        `min_pairs` (a spread from so few pairs is itself uncertain)."""
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
        """`pick` of each side's run costs so far (the candidate's verdict run included; 0 for a side not yet
        run)."""
        candidate = [*self.candidate, *([] if self.verdict_s is None else [self.verdict_s])]
        return pick(candidate) if candidate else 0.0, pick(self.reference) if self.reference else 0.0

    def could_pay(self, calibration: Calibration, budget: TimingBudget) -> bool:
        """Whether some outcome of the pairs still possible pays more than 0: as many as `max_pairs` and the
        budget allow at the cheapest costs, each at the lowest ratio possible (each side's later runs cost
        within a factor `COST_FLOOR` of what it has cost so far; before the first pair, any ratio). Pay needs
        `FEWEST_PAIRS` pairs and a median ratio below 1 (the spread only raises the bound paid on)."""
        candidate_s, reference_s = self._costs(min)
        more = budget.pairs_within(
            COST_FLOOR * candidate_s, COST_FLOOR * reference_s, calibration.max_pairs - self.pairs
        )
        if self.pairs + more < FEWEST_PAIRS:
            return False
        lowest = -math.inf
        if self.reference:
            dearest = max(self.reference) / COST_FLOOR
            lowest = math.log(max(COST_FLOOR * candidate_s, SHORTEST_RUN_S) / max(dearest, SHORTEST_RUN_S))
        return statistics.median([*self.log_ratios(), *[lowest] * more]) < 0

    def done(self, calibration: Calibration, budget: TimingBudget) -> bool:
        """Enough pairs: the most allowed. From the first pair on, no outcome could pay (`could_pay`) or the
        next pair would not fit in the budget at the dearest costs seen. Past `min_pairs`, the median precise
        enough, or settled at no pay (even the standard error `max_pairs` would reach leaves the bound at
        parity or above)."""
        if self.pairs >= calibration.max_pairs or not self.could_pay(calibration, budget):
            return True
        if budget.pairs_within(*self._costs(max), 1) == 0:
            return True
        if self.pairs < calibration.min_pairs:
            return False
        error = self.standard_error(calibration)
        reachable = error * math.sqrt(self.pairs / calibration.max_pairs)
        return (
            error <= calibration.precision or math.log(self.ratio()) + calibration.confidence * reachable >= 0
        )


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
    """Pairs of passing runs of both programs through `run` (which spends `budget`, and raises `OverBudget`
    for a run it cut) until `PairedTimes.done`. The first of a pair alternates (neither side always meets the
    caches the other left). Every run must pass: a program that is fast only when it is wrong earns nothing.
    """
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


def calibrate(
    sandbox: Sandbox,
    settings: CodeSettings,
    cancelled: threading.Event,
    tests: ProblemTests,
    code: str,
    verdict_s: float,
) -> Timing:
    """`code`'s calibrated efficiency against the reference (blocking). Every run goes through one
    `BudgetedSandbox`, a stdin problem's cases one after another."""
    budget = TimingBudget(settings.code_timing_budget_s)
    budgeted, cases, limits = BudgetedSandbox(sandbox, budget), CaseRuns(cancel=cancelled), settings.limits()
    # both parse: the reference did at preparation, the candidate passed already
    parsed = tests.reference.available

    def run(program: str) -> HarnessResult:
        return tests.run(budgeted, program, limits, parsed, cases)

    with sandbox.cancellable(cancelled):
        try:
            times = time_pairs(run, code, tests.reference.code, Calibration.of(settings), budget, verdict_s)
        except TimingRunFailed as failed:
            ours, why = failed.side == "candidate", str(failed)
            return Timing(
                0.0,
                None,
                "paired",
                t_ref_error=None if ours else why,
                timing_error=why if ours else None,
                timing_cpu_s=budget.spent_s,
            )
        except OverBudget as cut:
            return Timing(0.0, None, "paired", timing_budget=str(cut), timing_cpu_s=budget.spent_s)
    calibration, spent_s = Calibration.of(settings), budget.spent_s
    if not times.pairs:
        return Timing(0.0, None, "paired", timing_pairs=0, timing_cpu_s=spent_s)
    t_ref, ratio, bound = statistics.median(times.reference), times.ratio(), times.bound(calibration)
    value = times.efficiency(calibration)
    return Timing(
        value,
        t_ref,
        "paired",
        t_ratio=ratio,
        t_ratio_bound=bound,
        timing_pairs=times.pairs,
        timing_cpu_s=spent_s,
    )


@dataclass(frozen=True)
class ReferenceTime:
    """`paper`'s t_ref of one problem: the mean CPU time of its reference's runs, or why there is none."""

    t_ref: float | None
    error: str | None = None
    runs: tuple[float, ...] = ()
    attempts: int = 0
    timing_cpu_s: float = 0.0
    source: str = "measured"  # memory, cache, measured or measured_uncached. Not stored

    def noisy(self) -> bool:
        """A run far off the others (a neighbour's burst): worth measuring again."""
        return max(self.runs) > 3 * statistics.median(self.runs) + 0.005

    def dump(self) -> bytes:
        return json.dumps({**asdict(self), "source": None}).encode()

    @classmethod
    def load(cls, data: bytes, source: str) -> ReferenceTime:
        saved = json.loads(data)
        return cls(**{**saved, "runs": tuple(saved["runs"]), "source": source})

    def timing(self, t: float) -> Timing:
        """The paper's efficiency of a correct run that took `t` CPU seconds."""
        return Timing(efficiency(t, self.t_ref), self.t_ref, self.source, t_ref_error=self.error)


@dataclass
class ReferenceTimes:
    """t_ref for `paper`, measured once per problem for every replica: the store's `add` is the lock; a
    replica that finds it taken polls for the value. Each replica keeps a successful one for
    `REFERENCE_MEMO_S`."""

    sandbox: Sandbox
    store: Store
    pool: Executor
    settings: CodeSettings
    remembered: BoundedMemo[str, tuple[float, ReferenceTime]] = field(
        default_factory=lambda: BoundedMemo(REMEMBERED)
    )

    def known(self, tests: ProblemTests) -> ReferenceTime | None:
        """The t_ref kept in memory while it is fresh (one dict read: fine on the event loop)."""
        kept = self.remembered.peek(tests.key)
        return kept[1] if kept is not None and time.monotonic() < kept[0] else None

    async def get(self, tests: ProblemTests) -> ReferenceTime:
        if (known := self.known(tests)) is not None:
            return known
        reference = await self._shared(tests)
        if reference.t_ref is not None:
            memory = replace(reference, source="memory")
            self.remembered.put(tests.key, (time.monotonic() + REFERENCE_MEMO_S, memory))
        return reference

    async def _shared(self, tests: ProblemTests) -> ReferenceTime:
        """From the store, else measured once. Every key has a TTL. A failure a short one, so it is
        re-measured."""
        settings, loop = self.settings, asyncio.get_running_loop()
        name = f"{settings.code_cache_prefix}tref:{store_key(tests.key, self.sandbox.isolation)}"
        try:
            deadline = loop.time() + LOCK_TTL_S
            while loop.time() < deadline:
                if (cached := await self.store.get(name)) is not None:
                    return ReferenceTime.load(cached, "cache")
                if await self.store.add(f"{name}:lock", b"1", LOCK_TTL_S):
                    try:
                        measured = await loop.run_in_executor(self.pool, self.measure, tests)
                        ok = measured.t_ref is not None
                        ttl = settings.code_reference_ttl_s if ok else settings.code_reference_failure_ttl_s
                        await self.store.set(name, measured.dump(), ttl, evictable=True)
                    finally:
                        await self.store.delete(f"{name}:lock")
                    return measured
                await asyncio.sleep(WAIT_POLL_S)  # another item or replica is measuring it
        except StoreUnavailable as error:
            log.warning("reference-time cache unavailable; measuring without it", extra={"error": str(error)})
        measured = await loop.run_in_executor(self.pool, self.measure, tests)
        return replace(measured, source="measured_uncached")

    def measure(self, tests: ProblemTests) -> ReferenceTime:
        """`code_reference_runs` runs of the reference (blocking) within one `TimingBudget`. A failed or noisy
        attempt is retried after a pause, up to `code_reference_attempts`, while the budget lasts. An attempt
        the budget ended keeps the runs it completed."""
        budgeted = BudgetedSandbox(self.sandbox, TimingBudget(self.settings.code_timing_budget_s))
        measured = ReferenceTime(None)
        for attempt in range(self.settings.code_reference_attempts):
            if attempt:
                time.sleep(0.5 * attempt)
            latest, cut = self._measure_once(tests, budgeted)
            if latest.t_ref is not None or measured.t_ref is None:
                measured = latest
            if cut or (measured.t_ref is not None and not measured.noisy()):
                break
        return replace(measured, attempts=attempt + 1, timing_cpu_s=budgeted.budget.spent_s)

    def _measure_once(self, tests: ProblemTests, budgeted: BudgetedSandbox) -> tuple[ReferenceTime, bool]:
        """One attempt's t_ref, and whether the budget ended it (a run it cut, or one that would not fit)."""
        times: list[float] = []
        reference, runs, limits = tests.reference, self.settings.code_reference_runs, self.settings.limits()
        for _ in range(runs):  # parsed at preparation (`available`): not parsed again per run
            if times and not budgeted.budget.fits(max(times)):
                break
            try:
                result = tests.run(budgeted, reference.code, limits, reference.available)
            except OverBudget as cut:
                if times:
                    break
                return ReferenceTime(None, f"reference: {cut}"), True
            if not result.ok or result.exec is None:
                why = f"reference fails its tests: {result.stage}: {result.error}"
                return ReferenceTime(None, why), False
            times.append(result.exec.cpu_s)
        return ReferenceTime(sum(times) / len(times), runs=tuple(times)), len(times) < runs


@dataclass
class Timings:
    """The timings of a batch's correct programs: `paper`, one t_ref per distinct problem; `calibrated`, one
    paired timing per distinct program of a problem (copies in a batch share it, as they share a verdict)."""

    sandbox: Sandbox
    settings: CodeSettings
    pool: Executor
    reference_times: ReferenceTimes

    async def measure(self, timed: list[Timed], cancelled: threading.Event) -> list[Timing | BaseException]:
        loop = asyncio.get_running_loop()
        if self.settings.code_efficiency_mode == "calibrated":
            programs = {(tests.key, code): (tests, code, cpu_s) for tests, code, cpu_s in timed}
            args = (self.sandbox, self.settings, cancelled)
            runs = (
                loop.run_in_executor(self.pool, calibrate, *args, *program) for program in programs.values()
            )
            by_program = dict(zip(programs, await asyncio.gather(*runs, return_exceptions=True), strict=True))
            return [by_program[tests.key, code] for tests, code, _ in timed]
        problems = {tests.key: tests for tests, _, _ in timed}
        asked = (self.reference_times.get(tests) for tests in problems.values())
        by_problem = dict(zip(problems, await asyncio.gather(*asked, return_exceptions=True), strict=True))
        found = ((by_problem[tests.key], cpu_s) for tests, _, cpu_s in timed)
        return [t_ref if isinstance(t_ref, BaseException) else t_ref.timing(cpu_s) for t_ref, cpu_s in found]
