"""t_ref for the `paper` efficiency: the mean CPU time of a few runs of the problem's reference, measured once per
problem for every replica (the store's `add` is the lock; a replica that finds it taken polls for the value), and
kept in memory by each replica for `REFERENCE_MEMO_S`. A measurement's runs, retries included, spend at most one
`TimingBudget`."""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import time
from concurrent.futures import Executor
from typing import Any

from corrgrpo_common import Store, StoreUnavailable
from corrgrpo_sandbox import Sandbox

from .config import ScoringConfig
from .execution import run_tests
from .prepared import PreparedProblem
from .timing_budget import BudgetedSandbox, OverBudget, TimingBudget

log = logging.getLogger("corrgrpo.code")
LOCK_TTL_S = 120.0  # a replica that died while measuring frees the lock after this
WAIT_POLL_S = 0.05
REFERENCE_MEMO_S = 300.0  # how long a replica keeps a successful t_ref in memory instead of asking the store
# In the t_ref store key: bumped whenever what a run's time covers changes (v2: the child compiles the program before
# running it, assert-mode checks move to a judge; v3: assert mode's calls of scalars cross as plain values, cheaper;
# v4: a problem with a stray builtin name in its check runs in I/O mode; v5: assert mode's calls cost less on both
# sides, and a check's loop over literal ints is unrolled into I/O tests), so no replica compares a t with a t_ref timed
# another way.
TREF_VERSION = 5


def noisy(times: list[float]) -> bool:
    """A run far off the others (a neighbour's burst): worth measuring again."""
    middle = statistics.median(times)
    return max(times) > 3 * middle + 0.005


class ReferenceTimes:
    def __init__(self, sandbox: Sandbox, store: Store, pool: Executor, config: ScoringConfig) -> None:
        self.sandbox, self.store, self.pool, self.config = sandbox, store, pool, config

    def measure(self, prepared: PreparedProblem) -> dict[str, Any]:
        """Mean child CPU time of `reference_runs` runs of the reference through the same harness (blocking), within
        one `TimingBudget` (a stdin problem's cases one after another). A failed or noisy attempt is retried after a
        pause (a neighbour may have starved it), up to `reference_attempts`, while the budget lasts; an attempt the
        budget ended keeps the runs it completed."""
        config = self.config
        budgeted = BudgetedSandbox(self.sandbox, TimingBudget(config.timing_budget_s))
        measured: dict[str, Any] = {}
        for attempt in range(config.reference_attempts):
            if attempt:
                time.sleep(0.5 * attempt)
            latest, cut = self._measure_once(prepared, budgeted)
            if latest["t_ref"] is not None or measured.get("t_ref") is None:
                measured = latest
            if cut or (measured["t_ref"] is not None and not noisy(measured["runs"])):
                break
        return {**measured, "attempts": attempt + 1, "timing_cpu_s": budgeted.budget.spent_s}

    def _measure_once(self, prepared: PreparedProblem, budgeted: BudgetedSandbox) -> tuple[dict[str, Any], bool]:
        """One attempt's t_ref, and whether the budget ended it (a run it cut, or one it would not fit at the
        dearest cost seen)."""
        times: list[float] = []
        reference, limits = prepared.reference, self.config.limits
        for _ in range(self.config.reference_runs):  # parsed at preparation (`available`): not parsed again per run
            if times and not budgeted.budget.fits(max(times)):
                break
            try:
                result = run_tests(budgeted, prepared, reference.code, limits, reference.available)  # type: ignore[arg-type]
            except OverBudget as cut:
                if times:
                    break
                return {"t_ref": None, "error": f"reference: {cut}"}, True
            if not result.ok or result.exec is None:
                return {"t_ref": None, "error": f"reference fails its tests: {result.stage}: {result.error}"}, False
            times.append(result.exec.cpu_s)
        return {"t_ref": sum(times) / len(times), "runs": times}, len(times) < self.config.reference_runs

    async def get(self, prepared: PreparedProblem) -> dict[str, Any]:
        """`shared`, a successful one kept with the prepared problem for `REFERENCE_MEMO_S` (source `memory`): the
        store's value does not change while its key lives, and a batch then asks the store nothing."""
        if (known := prepared.remembered_t_ref()) is not None:
            return known
        reference = await self.shared(prepared)
        if reference["t_ref"] is not None:
            prepared.t_ref, prepared.t_ref_until = {**reference, "source": "memory"}, time.monotonic() + REFERENCE_MEMO_S
        return reference

    async def shared(self, prepared: PreparedProblem) -> dict[str, Any]:
        """t_ref from the store, else measured once (the store's `add` is the lock between replicas).
        Every key has a TTL; a failed measurement only a short one, so it is re-measured soon."""
        config = self.config
        key = f"{config.cache_prefix}tref:v{TREF_VERSION}:{prepared.key}"
        loop = asyncio.get_running_loop()
        try:
            deadline = loop.time() + LOCK_TTL_S
            while loop.time() < deadline:
                if (cached := await self.store.get(key)) is not None:
                    return {**json.loads(cached), "source": "cache"}
                if await self.store.add(f"{key}:lock", b"1", LOCK_TTL_S):
                    try:
                        measured = await loop.run_in_executor(self.pool, self.measure, prepared)
                        ttl = config.reference_ttl_s if measured["t_ref"] is not None else config.reference_failure_ttl_s
                        await self.store.set(key, json.dumps(measured).encode(), ttl, evictable=True)
                    finally:
                        await self.store.delete(f"{key}:lock")
                    return {**measured, "source": "measured"}
                await asyncio.sleep(WAIT_POLL_S)  # another item or replica is measuring it
        except StoreUnavailable as error:
            log.warning("reference-time cache unavailable; measuring without it", extra={"error": str(error)})
        measured = await loop.run_in_executor(self.pool, self.measure, prepared)
        return {**measured, "source": "measured_uncached"}
