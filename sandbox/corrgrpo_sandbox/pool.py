"""The worker handles of one `Sandbox`: warm ones taken and given back (`pool`), or one started per run
(`fresh`).

A warm worker is handed out up to `QUEUE_DEPTH` times at once (`worker_handle`): a caller gets the least busy
worker, an idle one while there is one, so a request waits behind another's run only when every worker is
running one."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from corrgrpo_sandbox.execution import RunCancelled
from corrgrpo_sandbox.worker_handle import CANCEL_POLL_S, QUEUE_DEPTH, WorkerHandle


class WorkerPool:
    """Hands out worker handles, replaces broken, spent and old ones, and closes them all. Thread-safe."""

    def __init__(
        self,
        mode: Literal["pool", "fresh"],
        workers: int,
        recycle_after: int,
        new: Callable[[], WorkerHandle],
    ) -> None:
        self.mode = mode
        self.recycle_after = recycle_after
        self._new = new
        self.closed = False
        self._lock = threading.Lock()
        self._free = threading.Condition(self._lock)  # notified when a worker can take one more request
        self.live: set[WorkerHandle] = set()  # started and not closed; `retired` ones take no new requests
        self._retiring: set[WorkerHandle] = set()  # live workers whose replacement is starting
        # bwrap --die-with-parent is bound to the THREAD that started it: workers are started by one thread
        # that lives as long as the sandbox, not by whichever caller's thread happened to replace a worker
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="corrgrpo-sandbox-starter")
        try:
            for _ in range(workers if mode == "pool" else 0):
                self.start()
        except BaseException:
            self.close()
            raise

    def take(self, cancel: threading.Event | None = None) -> WorkerHandle:
        if cancel is not None and cancel.is_set():
            raise RunCancelled("run cancelled")
        if self.mode == "fresh":
            worker = self.start()
            worker.taken = 1
            return worker
        with self._free:
            while True:
                if self.closed:
                    raise RuntimeError("Sandbox is closed")
                if cancel is not None and cancel.is_set():
                    raise RunCancelled("run cancelled")
                open_ = [w for w in self.live if not w.retired and w.lost is None and w.taken < QUEUE_DEPTH]
                if open_:
                    worker = min(open_, key=lambda handle: handle.taken)
                    worker.taken += 1
                    return worker
                self._free.wait(0.5 if cancel is None else CANCEL_POLL_S)

    def start(self) -> WorkerHandle:
        try:
            worker = self._starter.submit(self._new).result()
        except RuntimeError as error:  # the starter was shut down: closed meanwhile
            raise RuntimeError("Sandbox is closed") from error
        with self._free:
            if self.closed:
                worker.close()
                raise RuntimeError("Sandbox is closed")
            self.live.add(worker)
            self._free.notify(QUEUE_DEPTH)
        return worker

    def retire(self, old: WorkerHandle) -> None:
        """On the starter thread: start `old`'s replacement, then retire `old` (closed once its requests are
        answered). The pool keeps every worker while a replacement starts (~0.1 s), where closing first left a
        core idle."""
        worker = self._new()
        with self._free:
            if self.closed or old not in self.live:  # closed, or `old` failed and was replaced meanwhile
                worker.close()
                return
            self.live.add(worker)
            self._free.notify(QUEUE_DEPTH)
            old.retired = True
            self._retiring.discard(old)
            idle = old.taken == 0
            if idle:
                self.live.discard(old)
        if idle:
            old.close()

    def release(self, worker: WorkerHandle, healthy: bool) -> None:
        """Back to the pool (its replacement started in the background once it is `recycle_after` runs old),
        or closed: at once after an anomaly, a spent or lost worker (replaced, unless it was already), with
        its last request when retired, and always in fresh mode."""
        with self._free:
            worker.taken -= 1
            live = worker in self.live
            if self.mode == "pool" and healthy and live and not worker.retired and not self.closed:
                if worker.runs >= self.recycle_after and worker not in self._retiring:
                    self._retiring.add(worker)
                    with contextlib.suppress(RuntimeError):  # the starter is shut down: closed meanwhile
                        self._starter.submit(self.retire, worker)
                self._free.notify()
                return
            ending = live and (not healthy or worker.taken == 0)
            if ending:
                self.live.discard(worker)
                self._retiring.discard(worker)
        if not ending:
            return
        worker.close()
        # a retired one's replacement is serving
        if self.mode == "pool" and not worker.retired and not self.closed:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self.start()

    def close(self) -> None:
        with self._free:
            self.closed = True
            workers, self.live = list(self.live), set()
            self._free.notify_all()
        for worker in workers:
            worker.close()
        self._starter.shutdown(wait=False)
