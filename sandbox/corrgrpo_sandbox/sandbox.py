"""The parent side: the thread-safe `Sandbox.run` over worker processes (a warm pool, or one per run)."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict
from pathlib import PurePosixPath
from typing import Literal

from corrgrpo_sandbox.execution import ExecResult, Limits
from corrgrpo_sandbox.isolation import resolve_launcher
from corrgrpo_sandbox.pool import WorkerPool
from corrgrpo_sandbox.worker_handle import (
    WorkerBroken,
    WorkerHandle,
    WorkerLost,
    output_pipe_bytes,
    preload_files,
)

DEFAULT_LIMITS = Limits()
REPLY_GRACE_S = 3.0  # beyond the wall limit: worker start-up, straggler kill, wipe, transfer
# a request whose worker broke on the run before it never started: run it elsewhere, this often
LOST_RETRIES = 8


@functools.lru_cache(maxsize=64)
def _encoded_limits(limits: Limits) -> bytes:
    """The request header's limits, encoded once per distinct `Limits` (`asdict` cost a quarter of a run's
    parent time)."""
    return json.dumps(asdict(limits)).encode()


def check_file_name(name: str) -> None:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\x00" in name:
        raise ValueError(f"file name {name!r} must be a relative path without '..'")


def encoded_request(
    source: str, stdin: bytes, files: Mapping[str, bytes], limits: Limits
) -> tuple[bytes, list[bytes]]:
    """A run's request to a worker: the header it reads and the body's parts, sent as they are."""
    for name in files:
        check_file_name(name)
    # The body is the source, the files (JSON of base64; empty for none) and stdin, raw: the child decodes
    # no JSON for a run without files (every object it touches costs a page copy), and splices stdin
    # (worker.child.copy_stdin).
    encoded_source = source.encode("utf-8", "surrogatepass")
    encoded_files = b""
    if files:
        encoded_files = json.dumps(
            {name: base64.b64encode(data).decode() for name, data in files.items()}
        ).encode()
    body = [encoded_source, encoded_files, stdin]
    header = b'{"limits": %s, "source": %d, "files": %d, "stdin": %d}' % (
        _encoded_limits(limits),
        *map(len, body),
    )
    return header, body


def run_result(
    reply: dict | None, streams: list[bytes], isolation: str, anomaly: str | None, started: float
) -> ExecResult:
    """The run's result from its worker's reply. Without one (the worker broke), an empty result that names
    why."""
    if reply is None:
        return ExecResult(
            None,
            None,
            b"",
            b"",
            b"",
            False,
            False,
            0.0,
            time.monotonic() - started,
            0,
            isolation,
            anomaly,
        )
    return ExecResult(
        exit_code=reply["exit_code"],
        signal=reply["signal"],
        stdout=streams[0],
        stderr=streams[1],
        channel=streams[2],
        truncated=reply["truncated"],
        timed_out=reply["timed_out"],
        cpu_s=float(reply["cpu_s"]),
        wall_s=float(reply["wall_s"]),
        peak_rss_kb=reply["peak_rss_kb"],
        isolation=isolation,
        anomaly=anomaly,
    )


class Sandbox:
    """Runs untrusted Python in a fresh child per call: forked from a warm sandboxed worker (`pool`) or a new
    sandboxed interpreter per run (`fresh`). Thread-safe; `run` blocks until the child is reaped.

    `preload`: the caller's stdlib-only module files, which every worker imports under their own names (the
    file's stem) before its first run, so that a run's program can use them at no cost. They are the only
    files of the caller's that the sandbox shows inside (read-only). `packages`: import names of pure-Python
    packages of the caller's environment that a run's program may import (bwrap: copied beside the standard
    library)."""

    def __init__(
        self,
        mode: Literal["pool", "fresh"] = "pool",
        workers: int = os.cpu_count() or 1,
        limits: Limits = DEFAULT_LIMITS,
        recycle_after: int = 1000,
        python: str = sys.executable,
        isolation: str = "auto",
        preload: Iterable[str | os.PathLike[str]] = (),
        packages: Iterable[str] = (),
    ) -> None:
        if mode not in ("pool", "fresh"):
            raise ValueError(f"mode must be 'pool' or 'fresh', got {mode!r}")
        if workers < 1 or recycle_after < 1:
            raise ValueError("workers and recycle_after must be at least 1")
        self.mode = mode
        self.limits = limits
        self.preload = preload_files(preload)
        self.launcher = resolve_launcher(python, isolation, tuple(packages))
        self.isolation = self.launcher.isolation
        self.resident_files = self.launcher.resident_files  # False: runs can pass bits through the page cache
        self.pipe_bytes = output_pipe_bytes(workers)
        self._cancel = threading.local()
        self._pool = WorkerPool(mode, workers, recycle_after, self._new_worker)
        self._closed = False

    def _new_worker(self) -> WorkerHandle:
        return WorkerHandle(self.launcher, self.preload, self.pipe_bytes)

    @contextlib.contextmanager
    def cancellable(self, event: threading.Event) -> Iterator[None]:
        """Runs this thread starts inside the block raise `RunCancelled` soon after `event` is set, their
        worker killed with every process of the run (a client that went away must not keep a worker busy)."""
        self._cancel.event = event
        try:
            yield
        finally:
            self._cancel.event = None

    def run(
        self,
        source: str,
        *,
        stdin: bytes = b"",
        files: Mapping[str, bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        limits = limits or self.limits
        header, body = encoded_request(source, stdin, dict(files or {}), limits)
        cancel: threading.Event | None = getattr(self._cancel, "event", None)
        # a request queued behind a run that broke its worker goes to another worker
        for _ in range(LOST_RETRIES):
            worker = self._pool.take(cancel)
            started = time.monotonic()
            reply: dict | None = None
            streams: list[bytes] = []
            try:
                reply, streams = worker.execute(
                    header, body, limits.processes, limits.wall_s + REPLY_GRACE_S, cancel
                )
                anomaly = reply["anomaly"]
            except WorkerLost as error:
                anomaly = str(error)
                continue
            except WorkerBroken as error:
                anomaly = str(error)
            finally:
                self._pool.release(
                    worker, healthy=reply is not None and not reply["anomaly"] and not reply["spent"]
                )
            break
        return run_result(reply, streams, self.isolation, anomaly, started)

    def close(self) -> None:
        self._closed = True
        self._pool.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()
