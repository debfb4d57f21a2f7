"""The parent side: worker processes (warm pool or one per run) and the thread-safe `Sandbox.run`."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import PurePosixPath
from typing import Literal

from corrgrpo_sandbox.isolation import Launcher, resolve_launcher
from corrgrpo_sandbox.limits import ExecResult, Limits
from corrgrpo_sandbox.worker import HEADER

DEFAULT_LIMITS = Limits()
REPLY_GRACE_S = 3.0  # beyond the wall limit: worker start-up, straggler kill, wipe, transfer
MAX_REPLY_BYTES = 64 * 1024 * 1024
REPLY_FIELDS = {
    "exit_code": (int, type(None)),
    "signal": (int, type(None)),
    "stdout": str,
    "stderr": str,
    "channel": str,
    "truncated": bool,
    "timed_out": bool,
    "cpu_s": (float, int),
    "wall_s": (float, int),
    "peak_rss_kb": int,
    "anomaly": (str, type(None)),
}


class WorkerBroken(Exception):
    """The worker died, hung or answered garbage: nothing it reported can be trusted."""


class Worker:
    """One worker interpreter (sandboxed per `launcher`) that executes requests one at a time."""

    def __init__(self, launcher: Launcher) -> None:
        self.runs = 0
        self.host_scratch = [tempfile.mkdtemp(prefix="corrgrpo-sandbox-") for path in launcher.scratch if not path]
        scratch = [path for path in launcher.scratch if path] + self.host_scratch
        request_read, self.request_fd = os.pipe()
        self.reply_fd, reply_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [*launcher.prefix, str(request_read), str(reply_write), "1" if launcher.in_pid_namespace else "0", *scratch],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(request_read, reply_write),
                env={},  # never hand the service's environment to anything in the sandbox
                start_new_session=True,
            )
        finally:
            os.close(request_read)
            os.close(reply_write)

    def execute(self, request: bytes, timeout: float) -> dict:
        self.runs += 1
        try:
            os.write(self.request_fd, HEADER.pack(len(request)))
            view = memoryview(request)
            while view:
                view = view[os.write(self.request_fd, view) :]
        except OSError as error:
            raise WorkerBroken(f"worker unreachable: {error!r}") from error
        deadline = time.monotonic() + timeout
        header = self.read_exactly(HEADER.size, deadline)
        size = HEADER.unpack(header)[0]
        if size > MAX_REPLY_BYTES:
            raise WorkerBroken(f"worker reply of {size} bytes")
        try:
            reply = json.loads(self.read_exactly(size, deadline))
        except ValueError as error:
            raise WorkerBroken(f"worker reply is not JSON: {error}") from error
        if not isinstance(reply, dict):
            raise WorkerBroken("worker reply is not an object")
        if reply.get("anomaly") and set(reply) == {"anomaly"}:
            raise WorkerBroken(str(reply["anomaly"]))
        for field, kind in REPLY_FIELDS.items():
            if not isinstance(reply.get(field), kind) or (kind is int and isinstance(reply.get(field), bool)):
                raise WorkerBroken(f"worker reply field {field!r} is missing or mistyped")
        return reply

    def read_exactly(self, size: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.reply_fd], [], [], remaining)[0]:
                raise WorkerBroken("worker did not answer in time")
            chunk = os.read(self.reply_fd, min(size, 1 << 20))
            if not chunk:
                raise WorkerBroken(f"worker died (exit status {self.process.poll()})")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        for fd in (self.request_fd, self.reply_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for path in self.host_scratch:
            shutil.rmtree(path, ignore_errors=True)


def check_file_name(name: str) -> None:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\x00" in name:
        raise ValueError(f"file name {name!r} must be a relative path without '..'")


class Sandbox:
    """Runs untrusted Python in a fresh child per call: forked from a warm sandboxed worker (`pool`) or a new
    sandboxed interpreter per run (`fresh`). Thread-safe; `run` blocks until the child is reaped."""

    def __init__(
        self,
        mode: Literal["pool", "fresh"] = "pool",
        workers: int = os.cpu_count() or 1,
        limits: Limits = DEFAULT_LIMITS,
        recycle_after: int = 200,
        python: str = sys.executable,
        allow_fallback: bool = True,
    ) -> None:
        if mode not in ("pool", "fresh"):
            raise ValueError(f"mode must be 'pool' or 'fresh', got {mode!r}")
        if workers < 1 or recycle_after < 1:
            raise ValueError("workers and recycle_after must be at least 1")
        self.mode = mode
        self.limits = limits
        self.recycle_after = recycle_after
        self.launcher = resolve_launcher(python, allow_fallback)
        self.isolation = self.launcher.isolation
        self._closed = False
        self._lock = threading.Lock()
        self._live: set[Worker] = set()
        self._idle: queue.LifoQueue[Worker] = queue.LifoQueue()
        if mode == "pool":
            for _ in range(workers):
                self._idle.put(self._start_worker())

    def run(
        self, source: str, *, stdin: bytes = b"", files: Mapping[str, bytes] | None = None, limits: Limits | None = None
    ) -> ExecResult:
        limits = limits or self.limits
        files = dict(files or {})
        for name in files:
            check_file_name(name)
        request = {
            "source": source,
            "stdin": base64.b64encode(stdin).decode(),
            "files": {name: base64.b64encode(content).decode() for name, content in files.items()},
            "limits": asdict(limits),
        }
        encoded = json.dumps(request).encode()
        worker = self._take_worker()
        started = time.monotonic()
        reply: dict | None = None
        try:
            reply = worker.execute(encoded, limits.wall_s + REPLY_GRACE_S)
            anomaly = reply["anomaly"]
        except WorkerBroken as error:
            anomaly = str(error)
        finally:
            self._release(worker, healthy=reply is not None and not reply["anomaly"])
        if reply is None:
            return ExecResult(
                None, None, b"", b"", b"", False, False, 0.0, time.monotonic() - started, 0, self.isolation, anomaly
            )
        return ExecResult(
            exit_code=reply["exit_code"],
            signal=reply["signal"],
            stdout=base64.b64decode(reply["stdout"]),
            stderr=base64.b64decode(reply["stderr"]),
            channel=base64.b64decode(reply["channel"]),
            truncated=reply["truncated"],
            timed_out=reply["timed_out"],
            cpu_s=float(reply["cpu_s"]),
            wall_s=float(reply["wall_s"]),
            peak_rss_kb=reply["peak_rss_kb"],
            isolation=self.isolation,
            anomaly=anomaly,
        )

    def _take_worker(self) -> Worker:
        if self.mode == "fresh":
            return self._start_worker()
        while True:
            if self._closed:
                raise RuntimeError("Sandbox is closed")
            try:
                return self._idle.get(timeout=0.5)
            except queue.Empty:
                continue

    def _start_worker(self) -> Worker:
        worker = Worker(self.launcher)
        with self._lock:
            if self._closed:
                worker.close()
                raise RuntimeError("Sandbox is closed")
            self._live.add(worker)
        return worker

    def _release(self, worker: Worker, healthy: bool) -> None:
        """Back to the pool, or closed (fresh mode, anomaly, recycling age) and replaced."""
        keep = self.mode == "pool" and healthy and worker.runs < self.recycle_after and not self._closed
        if keep:
            self._idle.put(worker)
            return
        with self._lock:
            self._live.discard(worker)
        worker.close()
        if self.mode == "pool" and not self._closed:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self._idle.put(self._start_worker())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._live = list(self._live), set()
        for worker in workers:
            worker.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()
