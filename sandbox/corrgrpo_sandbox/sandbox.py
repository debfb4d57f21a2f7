"""The parent side: worker processes (warm pool or one per run) and the thread-safe `Sandbox.run`."""

from __future__ import annotations

import base64
import contextlib
import functools
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
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Literal

from corrgrpo_sandbox.execution import ExecResult, Limits
from corrgrpo_sandbox.isolation import INSIDE_PRELOAD_DIR, Launcher, WorkerCgroup, cgroup_parents, resolve_launcher
from corrgrpo_sandbox.worker import HEADER, PIPE_DEFAULT, STREAMS, write_all

DEFAULT_LIMITS = Limits()
REPLY_GRACE_S = 3.0  # beyond the wall limit: worker start-up, straggler kill, wipe, transfer
MAX_REPLY_BYTES = 64 * 1024 * 1024
CANCEL_POLL_S = 0.05  # how soon a cancelled run notices
PIPE_MAX = 1 << 20  # the kernel's default pipe-max-size: larger is refused without CAP_SYS_RESOURCE
PIPE_SOFT_LIMIT = "/proc/sys/fs/pipe-user-pages-soft"
READ_AHEAD = 65536  # bytes asked for at once from a worker's reply stream
WORKER_TASKS = 2  # bwrap and the worker (the namespace's init) share the worker's pids cgroup with the run
REPLY_FIELDS = {
    "exit_code": (int, type(None)),
    "signal": (int, type(None)),
    "stdout": int,  # lengths: the streams' bytes follow the reply in this order
    "stderr": int,
    "channel": int,
    "truncated": bool,
    "timed_out": bool,
    "cpu_s": (float, int),
    "wall_s": (float, int),
    "peak_rss_kb": int,
    "spent": bool,  # the worker serves no further run (its pid counter would tell the next one of this one)
    "anomaly": (str, type(None)),
}


class RunCancelled(Exception):
    """The caller cancelled the run (`Sandbox.cancellable`): its worker, and every process of the run, was killed."""


class WorkerBroken(Exception):
    """The worker died, hung or answered garbage: nothing it reported can be trusted."""


def output_pipe_bytes(workers: int) -> int:
    """How large each of a run's three output pipes may grow with `workers` running at once: a quarter of the user's
    soft pipe budget between them (past that budget the kernel gives each new pipe the workers make two pages), within
    the kernel's default size and `PIPE_MAX`. A worker asks for no more than the run's output cap."""
    try:
        with open(PIPE_SOFT_LIMIT) as limit:
            soft_pages = int(limit.read())
    except (OSError, ValueError):
        return PIPE_DEFAULT
    budget = soft_pages * os.sysconf("SC_PAGE_SIZE") // (4 * len(STREAMS) * workers) if soft_pages else PIPE_MAX
    return 1 << (max(PIPE_DEFAULT, min(PIPE_MAX, budget)).bit_length() - 1)  # a power of two: the kernel rounds up


class Worker:
    """One worker interpreter (sandboxed per `launcher`) that executes requests one at a time."""

    def __init__(self, launcher: Launcher, preload: tuple[Path, ...] = (), pipe_bytes: int = PIPE_DEFAULT) -> None:
        self.runs = 0
        self.retired = False  # replaced (`Sandbox._retire`): closed instead of serving again
        self.unread = bytearray()  # read ahead of the reply stream
        self.host_scratch = [tempfile.mkdtemp(prefix="corrgrpo-sandbox-") for path in launcher.scratch if not path]
        scratch = [path for path in launcher.scratch if path] + self.host_scratch
        parents = cgroup_parents() if launcher.cgroups else {}
        self.cgroup = WorkerCgroup(parents) if parents else None
        counter_fds: tuple[int, ...] = ()
        if self.cgroup is not None:  # an open file, not a path: a path the worker can read, every run could (past CPU)
            counter_fds = (os.open(self.cgroup.cpu_counter, os.O_RDONLY | os.O_CLOEXEC),)
        if launcher.stdio:
            pass_fds: tuple[int, ...] = counter_fds
            protocol = ("0", "1")
        else:
            request_read, self.request_fd = os.pipe()
            self.reply_fd, reply_write = os.pipe()
            pass_fds, protocol = (request_read, reply_write, *counter_fds), (str(request_read), str(reply_write))
        counter = str(counter_fds[0]) if counter_fds else "-"
        mounts, inside = preload_mounts(launcher, preload)
        arguments = [*protocol, "1" if launcher.namespaced else "0", counter, str(pipe_bytes), json.dumps(inside)]
        try:
            self.process = subprocess.Popen(
                [*launcher.head, *mounts, *launcher.seal, *launcher.command, *arguments, *scratch],
                stdin=subprocess.PIPE if launcher.stdio else subprocess.DEVNULL,
                stdout=subprocess.PIPE if launcher.stdio else subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=pass_fds,
                env=launcher.environment,  # never hand the service's environment to anything in the sandbox
                start_new_session=True,
                preexec_fn=self.cgroup.enter if self.cgroup else None,
            )
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        finally:
            for fd in pass_fds:
                os.close(fd)
        if launcher.stdio:
            assert self.process.stdin is not None and self.process.stdout is not None
            self.request_fd, self.reply_fd = self.process.stdin.fileno(), self.process.stdout.fileno()

    def execute(
        self, header: bytes, body: list[bytes], processes: int, timeout: float, cancel: threading.Event | None = None
    ) -> tuple[dict, list[bytes]]:
        """Send one request (the header the worker reads, the body's parts its child reads); the reply and the
        streams. The parts go out as they are, gathered (a copy of megabytes of stdin cost more than the write)."""
        self.runs += 1
        if self.cgroup is not None:  # RLIMIT_NPROC does not hold for uid 0; the pids cgroup does
            try:
                self.cgroup.limit_tasks(processes + WORKER_TASKS)
            except OSError as error:
                raise WorkerBroken(f"cannot set the worker's process limit: {error!r}") from error
        try:
            write_all(self.request_fd, [HEADER.pack(len(header)), header, *body])  # one write for a small request
        except OSError as error:
            raise WorkerBroken(f"worker unreachable: {error!r}") from error
        deadline = time.monotonic() + timeout
        size = HEADER.unpack(self.read_exactly(HEADER.size, deadline, cancel))[0]
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
        for name, kind in REPLY_FIELDS.items():
            if not isinstance(reply.get(name), kind) or (kind is int and isinstance(reply.get(name), bool)):
                raise WorkerBroken(f"worker reply field {name!r} is missing or mistyped")
        if not 0 <= sum(reply[name] for name in STREAMS) <= MAX_REPLY_BYTES or min(reply[name] for name in STREAMS) < 0:
            raise WorkerBroken("worker reply announces impossible stream sizes")
        streams = [self.read_exactly(reply[name], deadline) for name in STREAMS]
        if self.unread:
            raise WorkerBroken("worker wrote past its reply")
        return reply, streams

    def read_exactly(self, size: int, deadline: float, cancel: threading.Event | None = None) -> bytes:
        """`size` bytes of the reply stream. Reads ahead (a small reply and its streams come in one read), but never
        past this reply: the worker writes nothing until it is sent the next request."""
        while len(self.unread) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerBroken("worker did not answer in time")
            if cancel is not None and cancel.is_set():
                raise RunCancelled("run cancelled")
            wait = remaining if cancel is None else min(remaining, CANCEL_POLL_S)
            try:
                if not select.select([self.reply_fd], [], [], wait)[0]:
                    continue
                chunk = os.read(self.reply_fd, min(max(size - len(self.unread), READ_AHEAD), 1 << 20))
            except OSError as error:  # closed meanwhile (`Sandbox.close` during the run)
                raise WorkerBroken(f"worker closed: {error!r}") from error
            if not chunk:
                raise WorkerBroken(f"worker died (exit status {self.process.poll()})")
            self.unread += chunk
        data = bytes(self.unread[:size])
        del self.unread[:size]
        return data

    def close(self) -> None:
        if self.process.stdin is not None and self.process.stdout is not None:  # the protocol runs over stdio
            for stream in (self.process.stdin, self.process.stdout):
                with contextlib.suppress(OSError):
                    stream.close()
        else:
            for fd in (self.request_fd, self.reply_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        for path in self.host_scratch:
            shutil.rmtree(path, ignore_errors=True)


@functools.lru_cache(maxsize=64)
def _encoded_limits(limits: Limits) -> bytes:
    """The request header's limits, encoded once per distinct `Limits` (`asdict` cost a quarter of a run's parent time)."""
    return json.dumps(asdict(limits)).encode()


def check_file_name(name: str) -> None:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\x00" in name:
        raise ValueError(f"file name {name!r} must be a relative path without '..'")


def preload_files(paths: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    """The caller's module files, checked: each a `.py` file named as a module that shadows no standard one."""
    files = tuple(Path(path).resolve(strict=True) for path in paths)
    names = [file.stem for file in files]
    for file in files:
        if not file.is_file() or file.suffix != ".py" or not file.stem.isidentifier():
            raise ValueError(f"preload {file}: not a Python module file")
        if file.stem in sys.stdlib_module_names or names.count(file.stem) > 1:
            raise ValueError(f"preload {file}: the module name {file.stem!r} is taken")
    return files


def preload_mounts(launcher: Launcher, files: tuple[Path, ...]) -> tuple[list[str], list[str]]:
    """The launcher's options that show each file (alone of its directory) read-only inside, and its path there."""
    if launcher.mount is None:  # no isolation: the worker reads the host's files
        return [], [str(file) for file in files]
    mounts, inside = [], []
    for file in files:
        inside.append(f"{INSIDE_PRELOAD_DIR}/{file.name}")
        mounts += launcher.mount(str(file), inside[-1])
    return mounts, inside


class Sandbox:
    """Runs untrusted Python in a fresh child per call: forked from a warm sandboxed worker (`pool`) or a new
    sandboxed interpreter per run (`fresh`). Thread-safe; `run` blocks until the child is reaped.

    `preload`: the caller's stdlib-only module files, which every worker imports under their own names (the file's
    stem) before its first run, so that a run's program can use them at no cost; they are the only files of the
    caller's that the sandbox shows inside (read-only)."""

    def __init__(
        self,
        mode: Literal["pool", "fresh"] = "pool",
        workers: int = os.cpu_count() or 1,
        limits: Limits = DEFAULT_LIMITS,
        recycle_after: int = 1000,
        python: str = sys.executable,
        isolation: str = "auto",
        preload: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        if mode not in ("pool", "fresh"):
            raise ValueError(f"mode must be 'pool' or 'fresh', got {mode!r}")
        if workers < 1 or recycle_after < 1:
            raise ValueError("workers and recycle_after must be at least 1")
        self.mode = mode
        self.limits = limits
        self.recycle_after = recycle_after
        self.preload = preload_files(preload)
        self.launcher = resolve_launcher(python, isolation)
        self.isolation = self.launcher.isolation
        self.pipe_bytes = output_pipe_bytes(workers)
        self._closed = False
        self._lock = threading.Lock()
        self._live: set[Worker] = set()
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()  # C-implemented: taking and returning are cheap
        # bwrap --die-with-parent is bound to the THREAD that started it: workers are started by one thread that
        # lives as long as the sandbox, not by whichever caller's thread happened to replace a worker
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="corrgrpo-sandbox-starter")
        self._cancel = threading.local()
        if mode == "pool":
            for _ in range(workers):
                self._idle.put(self._start_worker())

    @contextlib.contextmanager
    def cancellable(self, event: threading.Event) -> Iterator[None]:
        """Runs this thread starts inside the block raise `RunCancelled` soon after `event` is set, their worker
        killed with every process of the run (a client that went away must not keep a worker busy)."""
        self._cancel.event = event
        try:
            yield
        finally:
            self._cancel.event = None

    def run(
        self, source: str, *, stdin: bytes = b"", files: Mapping[str, bytes] | None = None, limits: Limits | None = None
    ) -> ExecResult:
        limits = limits or self.limits
        files = dict(files or {})
        for name in files:
            check_file_name(name)
        # The body is the source, the files (JSON of base64; empty for none) and stdin, raw: the child decodes no JSON for
        # a run without files (every object it touches costs a page copy), and splices stdin (worker.copy_stdin).
        encoded_source = source.encode("utf-8", "surrogatepass")
        encoded_files = b""
        if files:
            encoded_files = json.dumps({name: base64.b64encode(data).decode() for name, data in files.items()}).encode()
        body = [encoded_source, encoded_files, stdin]
        header = b'{"limits": %s, "source": %d, "files": %d, "stdin": %d}' % (_encoded_limits(limits), *map(len, body))
        cancel: threading.Event | None = getattr(self._cancel, "event", None)
        worker = self._take_worker(cancel)
        started = time.monotonic()
        reply: dict | None = None
        streams: list[bytes] = []
        try:
            reply, streams = worker.execute(header, body, limits.processes, limits.wall_s + REPLY_GRACE_S, cancel)
            anomaly = reply["anomaly"]
        except WorkerBroken as error:
            anomaly = str(error)
        finally:
            self._release(worker, healthy=reply is not None and not reply["anomaly"] and not reply["spent"])
        if reply is None:
            return ExecResult(
                None, None, b"", b"", b"", False, False, 0.0, time.monotonic() - started, 0, self.isolation, anomaly
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
            isolation=self.isolation,
            anomaly=anomaly,
        )

    def _take_worker(self, cancel: threading.Event | None = None) -> Worker:
        if cancel is not None and cancel.is_set():
            raise RunCancelled("run cancelled")
        if self.mode == "fresh":
            return self._start_worker()
        while True:
            if self._closed:
                raise RuntimeError("Sandbox is closed")
            if cancel is not None and cancel.is_set():
                raise RunCancelled("run cancelled")
            try:
                worker = self._idle.get(timeout=0.5 if cancel is None else CANCEL_POLL_S)
            except queue.Empty:
                continue
            if not worker.retired:
                return worker
            self._discard(worker)

    def _start_worker(self) -> Worker:
        try:
            worker = self._starter.submit(Worker, self.launcher, self.preload, self.pipe_bytes).result()
        except RuntimeError as error:  # the starter was shut down: closed meanwhile
            raise RuntimeError("Sandbox is closed") from error
        with self._lock:
            if self._closed:
                worker.close()
                raise RuntimeError("Sandbox is closed")
            self._live.add(worker)
        return worker

    def _retire(self, old: Worker) -> None:
        """On the starter thread: start `old`'s replacement, then retire `old` (closed when next taken). The pool keeps
        every worker while a replacement starts (~0.1 s), where closing first left a caller waiting and a core idle."""
        worker = Worker(self.launcher, self.preload, self.pipe_bytes)
        with self._lock:
            if self._closed or old not in self._live:  # closed, or `old` failed and was replaced meanwhile
                worker.close()
                return
            self._live.add(worker)
            old.retired = True
        self._idle.put(worker)

    def _discard(self, worker: Worker) -> None:
        with self._lock:
            self._live.discard(worker)
        worker.close()

    def _release(self, worker: Worker, healthy: bool) -> None:
        """Back to the pool (its replacement started in the background once it is `recycle_after` runs old), or closed
        (fresh mode, anomaly, spent, retired) and, unless already replaced, replaced."""
        if self.mode == "pool" and healthy and not worker.retired and not self._closed:
            if worker.runs == self.recycle_after:
                with contextlib.suppress(RuntimeError):  # the starter is shut down: closed meanwhile
                    self._starter.submit(self._retire, worker)
            self._idle.put(worker)
            return
        self._discard(worker)
        if self.mode == "pool" and not worker.retired and not self._closed:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self._idle.put(self._start_worker())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._live = list(self._live), set()
        for worker in workers:
            worker.close()
        self._starter.shutdown(wait=False)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()
