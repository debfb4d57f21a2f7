"""The worker handles of one `Sandbox`: warm ones taken and given back (`pool`), or one started per run (`fresh`)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from corrgrpo_sandbox.execution import RunCancelled
from corrgrpo_sandbox.worker_handle import CANCEL_POLL_S, WorkerHandle


class WorkerPool:
    """Hands out worker handles, replaces broken, spent and old ones, and closes them all. Thread-safe."""

    def __init__(self, mode: Literal["pool", "fresh"], workers: int, recycle_after: int, new: Callable[[], WorkerHandle]) -> None:
        self.mode = mode
        self.recycle_after = recycle_after
        self._new = new
        self.closed = False
        self._lock = threading.Lock()
        self.live: set[WorkerHandle] = set()
        self.idle: queue.SimpleQueue[WorkerHandle] = queue.SimpleQueue()  # C-implemented: taking and returning are cheap
        # bwrap --die-with-parent is bound to the THREAD that started it: workers are started by one thread that
        # lives as long as the sandbox, not by whichever caller's thread happened to replace a worker
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="corrgrpo-sandbox-starter")
        try:
            for _ in range(workers if mode == "pool" else 0):
                self.idle.put(self.start())
        except BaseException:
            self.close()
            raise

    def take(self, cancel: threading.Event | None = None) -> WorkerHandle:
        if cancel is not None and cancel.is_set():
            raise RunCancelled("run cancelled")
        if self.mode == "fresh":
            return self.start()
        while True:
            if self.closed:
                raise RuntimeError("Sandbox is closed")
            if cancel is not None and cancel.is_set():
                raise RunCancelled("run cancelled")
            try:
                worker = self.idle.get(timeout=0.5 if cancel is None else CANCEL_POLL_S)
            except queue.Empty:
                continue
            if not worker.retired:
                return worker
            self.discard(worker)

    def start(self) -> WorkerHandle:
        try:
            worker = self._starter.submit(self._new).result()
        except RuntimeError as error:  # the starter was shut down: closed meanwhile
            raise RuntimeError("Sandbox is closed") from error
        with self._lock:
            if self.closed:
                worker.close()
                raise RuntimeError("Sandbox is closed")
            self.live.add(worker)
        return worker

    def retire(self, old: WorkerHandle) -> None:
        """On the starter thread: start `old`'s replacement, then retire `old` (closed when next taken). The pool keeps
        every worker while a replacement starts (~0.1 s), where closing first left a caller waiting and a core idle."""
        worker = self._new()
        with self._lock:
            if self.closed or old not in self.live:  # closed, or `old` failed and was replaced meanwhile
                worker.close()
                return
            self.live.add(worker)
            old.retired = True
        self.idle.put(worker)

    def discard(self, worker: WorkerHandle) -> None:
        with self._lock:
            self.live.discard(worker)
        worker.close()

    def release(self, worker: WorkerHandle, healthy: bool) -> None:
        """Back to the pool (its replacement started in the background once it is `recycle_after` runs old), or closed
        (fresh mode, anomaly, spent, retired) and, unless already replaced, replaced."""
        if self.mode == "pool" and healthy and not worker.retired and not self.closed:
            if worker.runs == self.recycle_after:
                with contextlib.suppress(RuntimeError):  # the starter is shut down: closed meanwhile
                    self._starter.submit(self.retire, worker)
            self.idle.put(worker)
            return
        self.discard(worker)
        if self.mode == "pool" and not worker.retired and not self.closed:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self.idle.put(self.start())

    def close(self) -> None:
        with self._lock:
            self.closed = True
            workers, self.live = list(self.live), set()
        for worker in workers:
            worker.close()
        self._starter.shutdown(wait=False)
