"""Each distinct program runs once: a batch's items with the same key share one sandbox run, and a finished run's
verdict is kept in the store for other batches and replicas.

The key hashes everything a run's outcome depends on: the extracted program, the problem's content hash (cases,
checks, its time limit), the limits, the sandbox's isolation and `RUN_VERSION` (bumped when the harness changes
what a verdict or its time means). Shared verdicts carry the CPU time of the run that produced them: identical
programs of a batch get one measurement (equal efficiency, no noise between copies of a GRPO group); across
batches a stored time is reused for at most `ScoringConfig.run_ttl_s`, then the program is run and timed again.
Runs that timed out or hit an anomaly are never stored: they depend on the machine's load, not on the program.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from corrgrpo_code.harness import HarnessResult
from corrgrpo_common import Store, StoreUnavailable
from corrgrpo_sandbox import ExecResult, Limits

log = logging.getLogger("corrgrpo.code")
# 2: assert mode's scalar calls cross as plain values (times shorter); 3: call cases independent; 4: a run measured
# over its CPU limit is a timeout, and an expected stdin integer must be printed as exactly that integer; 5: a check's
# stray builtin name (HumanEval/129's `print`) no longer sends it to assert mode (its tests count one by one); 6: assert
# mode's calls cross with less work per call on both sides (times shorter); 7: a check's loop over literal ints is
# unrolled into I/O tests (HumanEval/44 leaves assert mode, its tests count one by one), and a check naming what its
# module rebinds goes to assert mode
RUN_VERSION = 7
STORE_WAIT_S = 5.0  # a store that does not answer in this time is skipped: the program is run instead
UNSTORED = ("anomaly", "timeout")


def run_key(code: str, problem_key: str, limits: Limits, isolation: str) -> str:
    payload = json.dumps([RUN_VERSION, problem_key, repr(limits), isolation, code])
    return hashlib.sha256(payload.encode()).hexdigest()[:40]


def dump(result: HarnessResult) -> bytes:
    run = result.exec
    timing = {"cpu_s": run.cpu_s, "wall_s": run.wall_s, "isolation": run.isolation} if run is not None else None
    fields = ("stage", "mode", "passed", "total", "error", "compiled")
    return json.dumps({**{name: getattr(result, name) for name in fields}, "exec": timing}).encode()


def load(data: bytes) -> HarnessResult:
    """A stored verdict; its `exec` keeps only what scoring reads (times, isolation)."""
    saved: dict[str, Any] = json.loads(data)
    timing = saved.pop("exec")
    run = None
    if timing is not None:
        run = ExecResult(0, None, b"", b"", b"", False, False, timing["cpu_s"], timing["wall_s"], 0, timing["isolation"], None)
    return HarnessResult(**saved, exec=run)


class SharedRuns:
    """One batch's runs by key (thread-safe). The first item with a key runs it (or finds it in the store); the
    others get its future, which a lane waits on only after it has run everything else it could."""

    def __init__(
        self, store: Store, loop: asyncio.AbstractEventLoop, prefix: str, ttl_s: float, cancelled: threading.Event | None = None
    ) -> None:
        self.store, self.loop, self.prefix, self.ttl_s = store, loop, prefix, ttl_s
        self.cancelled = cancelled  # the batch's: runs started on other threads for it end with it
        self.lock = threading.Lock()
        self.futures: dict[str, Future[tuple[HarnessResult, str]]] = {}

    def claim(self, key: str) -> tuple[Future[tuple[HarnessResult, str]], bool]:
        """The key's future, and whether this caller owns it (and must `run` it)."""
        with self.lock:
            future = self.futures.get(key)
            if future is not None:
                return future, False
            future = self.futures[key] = Future()
            return future, True

    def run(self, future: Future[tuple[HarnessResult, str]], key: str, execute: Callable[[], HarnessResult]) -> None:
        """Resolve an owned future: the stored verdict, else `execute()` (stored when it may be); `source` says which."""
        try:
            stored = self._stored(key)
            if stored is not None:
                future.set_result((stored, "store"))
                return
            result = execute()
            future.set_result((result, "run"))
        except BaseException as error:
            future.set_exception(error)
            raise
        if self.ttl_s > 0 and result.stage not in UNSTORED:
            self._call(self.store.set(self.prefix + key, dump(result), self.ttl_s, evictable=True))

    def _stored(self, key: str) -> HarnessResult | None:
        data = self._call(self.store.get(self.prefix + key)) if self.ttl_s > 0 else None
        try:
            return load(data) if data is not None else None
        except (ValueError, KeyError, TypeError):  # written by another version: run it again, and overwrite
            return None

    def _call(self, call: Any) -> Any:
        """A store coroutine on the batch's event loop, from a lane thread; None when the store is unavailable."""
        try:
            return asyncio.run_coroutine_threadsafe(call, self.loop).result(STORE_WAIT_S)
        except (StoreUnavailable, TimeoutError) as error:
            log.warning("run cache unavailable; running without it", extra={"error": str(error)})
            return None
