"""The parent's side of one worker: starting it inside its isolation, sending it requests and checking its
replies.

A worker serves one run at a time, but a second request may wait in its request pipe (`QUEUE_DEPTH`): the
worker starts it as soon as it has written the reply before, without waiting for the parent to read that reply
and send another (on a busy machine, the parent's threads got a core only after a fraction of a millisecond,
each time). The replies come in the order of the requests. Each caller reads its own in turn. A request queued
behind a run that broke the worker never started: the caller gets `WorkerLost` and runs it elsewhere."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from corrgrpo_sandbox.cgroups import WorkerCgroup, cgroup_parents
from corrgrpo_sandbox.execution import RunCancelled
from corrgrpo_sandbox.isolation import INSIDE_PRELOAD_DIR, Launcher
from corrgrpo_sandbox.worker.protocol import HEADER, PIPE_DEFAULT, STREAMS, write_all

MAX_REPLY_BYTES = 64 * 1024 * 1024
CANCEL_POLL_S = 0.05  # how soon a cancelled run notices
PIPE_MAX = 1 << 20  # the kernel's default pipe-max-size: larger is refused without CAP_SYS_RESOURCE
PIPE_SOFT_LIMIT = "/proc/sys/fs/pipe-user-pages-soft"
READ_AHEAD = 65536  # bytes asked for at once from a worker's reply stream
QUEUE_DEPTH = 2  # requests a pool's worker holds at once: the one it runs and the next
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

RESERVED_NAMES = {"worker"}  # the package the worker runs as (`worker/__main__.py`)


class WorkerBroken(Exception):
    """The worker died, hung or answered garbage: nothing it reported can be trusted."""


class WorkerLost(Exception):
    """The worker broke or ended before this request's run began (on an earlier run, or while the request was
    being written): it never ran, and may run on another worker."""


def output_pipe_bytes(workers: int) -> int:
    """How large each of a run's three output pipes may grow with `workers` running at once: a quarter of the
    user's soft pipe budget between them (past that budget the kernel gives each new pipe the workers make two
    pages), within the kernel's default size and `PIPE_MAX`. A worker asks for no more than the run's output
    cap."""
    try:
        with open(PIPE_SOFT_LIMIT) as limit:
            soft_pages = int(limit.read())
    except (OSError, ValueError):
        return PIPE_DEFAULT
    budget = (
        soft_pages * os.sysconf("SC_PAGE_SIZE") // (4 * len(STREAMS) * workers) if soft_pages else PIPE_MAX
    )
    # a power of two: the kernel rounds up
    return 1 << (max(PIPE_DEFAULT, min(PIPE_MAX, budget)).bit_length() - 1)


def preload_files(paths: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    """The caller's module files, checked: each a `.py` file named as a module that shadows no standard
    one."""
    files = tuple(Path(path).resolve(strict=True) for path in paths)
    names = [file.stem for file in files]
    for file in files:
        if not file.is_file() or file.suffix != ".py" or not file.stem.isidentifier():
            raise ValueError(f"preload {file}: not a Python module file")
        if file.stem in sys.stdlib_module_names or file.stem in RESERVED_NAMES or names.count(file.stem) > 1:
            raise ValueError(f"preload {file}: the module name {file.stem!r} is taken")
    return files


def preload_mounts(launcher: Launcher, files: tuple[Path, ...]) -> tuple[list[str], list[str]]:
    """The launcher's options that show each file (alone of its directory) read-only inside, and its path
    there."""
    if launcher.mount is None:  # no isolation: the worker reads the host's files
        return [], [str(file) for file in files]
    mounts, inside = [], []
    for file in files:
        inside.append(f"{INSIDE_PRELOAD_DIR}/{file.name}")
        mounts += launcher.mount(str(file), inside[-1])
    return mounts, inside


def checked_reply(text: bytes) -> dict:
    """The worker's reply, every field present with its type and the streams' sizes possible; else
    WorkerBroken."""
    try:
        reply = json.loads(text)
    except ValueError as error:
        raise WorkerBroken(f"worker reply is not JSON: {error}") from error
    if not isinstance(reply, dict):
        raise WorkerBroken("worker reply is not an object")
    if reply.get("anomaly") and set(reply) == {"anomaly"}:
        raise WorkerBroken(str(reply["anomaly"]))
    for name, kind in REPLY_FIELDS.items():
        if not isinstance(reply.get(name), kind) or (kind is int and isinstance(reply.get(name), bool)):
            raise WorkerBroken(f"worker reply field {name!r} is missing or mistyped")
    if (
        not 0 <= sum(reply[name] for name in STREAMS) <= MAX_REPLY_BYTES
        or min(reply[name] for name in STREAMS) < 0
    ):
        raise WorkerBroken("worker reply announces impossible stream sizes")
    return reply


@dataclass(frozen=True)
class StartedWorker:
    """A worker process just started: the two ends of its protocol and what it holds on the host."""

    process: subprocess.Popen[bytes]
    request_fd: int
    reply_fd: int
    cgroup: WorkerCgroup | None
    host_scratch: list[str]


def start_worker(launcher: Launcher, preload: tuple[Path, ...], pipe_bytes: int) -> StartedWorker:
    """Start one worker interpreter inside the launcher's isolation, with its own cgroup where the host has
    them."""
    host_scratch = [tempfile.mkdtemp(prefix="corrgrpo-sandbox-") for path in launcher.scratch if not path]
    scratch = [path for path in launcher.scratch if path] + host_scratch
    parents = cgroup_parents() if launcher.cgroups else {}
    cgroup = WorkerCgroup(parents) if parents else None
    counter_fds: tuple[int, ...] = ()
    # an open file, not a path: a path the worker can read, every run could (past CPU)
    if cgroup is not None:
        counter_fds = (os.open(cgroup.cpu_counter, os.O_RDONLY | os.O_CLOEXEC),)
    if launcher.stdio:
        pass_fds: tuple[int, ...] = counter_fds
        protocol = ("0", "1")
    else:
        request_read, request_fd = os.pipe()
        reply_fd, reply_write = os.pipe()
        pass_fds, protocol = (
            (request_read, reply_write, *counter_fds),
            (str(request_read), str(reply_write)),
        )
    counter = str(counter_fds[0]) if counter_fds else "-"
    mounts, inside = preload_mounts(launcher, preload)
    arguments = [
        *protocol,
        "1" if launcher.namespaced else "0",
        counter,
        str(pipe_bytes),
        json.dumps(inside),
    ]
    try:
        process = subprocess.Popen(
            [*launcher.head, *mounts, *launcher.seal, *launcher.command, *arguments, *scratch],
            stdin=subprocess.PIPE if launcher.stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if launcher.stdio else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=pass_fds,
            env=launcher.environment,  # never hand the service's environment to anything in the sandbox
            start_new_session=True,
            preexec_fn=cgroup.enter if cgroup else None,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    finally:
        for fd in pass_fds:
            os.close(fd)
    if launcher.stdio:
        assert process.stdin is not None and process.stdout is not None
        request_fd, reply_fd = process.stdin.fileno(), process.stdout.fileno()
    return StartedWorker(process, request_fd, reply_fd, cgroup, host_scratch)


class ReplyStream:
    """The worker's reply pipe, read ahead: a small reply and its streams come in one read, and what was read
    of the next request's reply stays in `unread` for that request's turn."""

    def __init__(self, fd: int, process: subprocess.Popen[bytes]) -> None:
        self.fd = fd
        self.process = process  # its exit status explains a reply that ended early
        self.unread = bytearray()

    def read_reply(self, deadline: float, cancel: threading.Event | None) -> tuple[dict, list[bytes]]:
        """The next reply, checked, and its streams."""
        size = HEADER.unpack(self.read_exactly(HEADER.size, deadline, cancel))[0]
        if size > MAX_REPLY_BYTES:
            raise WorkerBroken(f"worker reply of {size} bytes")
        reply = checked_reply(self.read_exactly(size, deadline))
        return reply, [self.read_exactly(reply[name], deadline) for name in STREAMS]

    def read_exactly(self, size: int, deadline: float, cancel: threading.Event | None = None) -> bytes:
        """`size` bytes of the reply stream."""
        while True:
            # checked before the read-ahead too: a cancelled caller's reply may have come with the one before
            if cancel is not None and cancel.is_set():
                raise RunCancelled("run cancelled")
            if len(self.unread) >= size:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerBroken("worker did not answer in time")
            wait = remaining if cancel is None else min(remaining, CANCEL_POLL_S)
            try:
                if not select.select([self.fd], [], [], wait)[0]:
                    continue
                chunk = os.read(self.fd, min(max(size - len(self.unread), READ_AHEAD), 1 << 20))
            except OSError as error:
                raise WorkerBroken(f"worker reply unreadable: {error!r}") from error
            if not chunk:
                raise WorkerBroken(f"worker died (exit status {self.process.poll()})")
            self.unread += chunk
        data = bytes(self.unread[:size])
        del self.unread[:size]
        return data


class RequestTickets:
    """The order of a worker's requests in flight: each waits for the replies before its own, and once the
    worker is lost, none still queued starts (its caller gets WorkerLost)."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self.sent = self.answered = 0  # requests written, replies read
        self._tasks: int | None = None  # the process limit of the requests in flight
        # why the worker can serve nothing more: requests still queued never started
        self.lost: str | None = None

    def take(self, processes: int) -> int:
        """A ticket behind the requests in flight (with the same process limit: it is the worker's, not the
        run's)."""
        with self._turns:
            while self.lost is None and self.answered < self.sent and self._tasks != processes:
                self._turns.wait()
            if self.lost is not None:
                raise WorkerLost(self.lost)
            ticket, self._tasks = self.sent, processes
            self.sent += 1  # before the write: its reply may be read ahead before this thread runs again
        return ticket

    def wait_turn(self, ticket: int) -> None:
        """Return once every reply before this ticket's has been read."""
        with self._turns:
            while self.answered < ticket and self.lost is None:
                self._turns.wait()
            if self.lost is not None:
                raise WorkerLost(self.lost)

    def answer(self, ticket: int, read_past: bool, last: bool) -> None:
        """The ticket's reply was read (`last`: the worker ends after it)."""
        with self._turns:
            # nothing else asked: the worker writes only replies
            if read_past and self.sent == ticket + 1:
                raise WorkerBroken("worker wrote past its reply")
            self.answered += 1
            if last:
                self.lost = "the worker ended after the run before this one"
            self._turns.notify_all()

    def end(self, why: str) -> None:
        """No more requests: those queued never start."""
        with self._turns:
            self.lost = self.lost or why
            self._turns.notify_all()


class WorkerHandle:
    """The parent's handle on one worker interpreter (sandboxed per `launcher`): starts it, sends it requests
    (up to `QUEUE_DEPTH` in flight) and checks each reply (the worker's own side:
    `worker.server.WorkerServer`)."""

    def __init__(
        self, launcher: Launcher, preload: tuple[Path, ...] = (), pipe_bytes: int = PIPE_DEFAULT
    ) -> None:
        self.runs = 0
        self.stop = launcher.stop
        self.retired = False  # replaced (`WorkerPool.retire`): closed once its last request is answered
        self.taken = 0  # requests the pool handed out on this worker and not yet given back (`WorkerPool`)
        self._sending = threading.Lock()  # requests go out whole and in ticket order
        # held while a caller reads its reply: the reply fd is closed only after it, never under the reader
        # (where its number, reused by a replacement's pipe, would hand it another run's reply)
        self._reading = threading.Lock()
        self.tickets = RequestTickets()
        started = start_worker(launcher, preload, pipe_bytes)
        self.process, self.cgroup, self.host_scratch = started.process, started.cgroup, started.host_scratch
        self.request_fd = started.request_fd
        self.replies = ReplyStream(started.reply_fd, started.process)

    def execute(
        self,
        header: bytes,
        body: list[bytes],
        processes: int,
        timeout: float,
        cancel: threading.Event | None = None,
    ) -> tuple[dict, list[bytes]]:
        """Send one request (the header the worker reads, the body's parts its child reads). The reply and the
        streams. The parts go out as they are, gathered (a copy of megabytes of stdin cost more than the
        write). Raises WorkerLost when this request never ran: an earlier one broke the worker, or it could
        not be sent whole. `timeout` counts from this request's turn. A cancel is noticed from then on (before
        it, another's run holds the worker)."""
        with self._sending:
            ticket = self._send(header, body, processes)
        self.tickets.wait_turn(ticket)
        try:
            deadline = time.monotonic() + timeout
            with self._reading:
                reply, streams = self.replies.read_reply(deadline, cancel)
            self.tickets.answer(ticket, bool(self.replies.unread), bool(reply["anomaly"] or reply["spent"]))
        except BaseException as error:
            self.end(f"the worker broke on the run before this one: {error!r}")
            raise
        return reply, streams

    def _send(self, header: bytes, body: list[bytes], processes: int) -> int:
        """Write one request behind those in flight. Its ticket."""
        ticket = self.tickets.take(processes)
        self.runs += 1
        try:
            if self.cgroup is not None:  # RLIMIT_NPROC does not hold for uid 0. The pids cgroup does
                self.cgroup.limit_tasks(processes + WORKER_TASKS)
        except OSError as error:
            self.end(f"cannot set the worker's process limit: {error!r}")
            raise WorkerBroken(f"cannot set the worker's process limit: {error!r}") from error
        try:
            # one write for a small request
            write_all(self.request_fd, [HEADER.pack(len(header)), header, *body])
        except OSError as error:  # a program starts only once its whole request is read: this one never ran
            self.end(f"worker unreachable: {error!r}")
            raise WorkerLost(f"worker unreachable: {error!r}") from error
        return ticket

    @property
    def lost(self) -> str | None:
        """Why the worker can serve nothing more; None while it can."""
        return self.tickets.lost

    def end(self, why: str) -> None:
        """No more requests: those queued never start (their callers get WorkerLost)."""
        self.tickets.end(why)

    def close(self) -> None:
        """Kill the worker and every process of its runs, then close its pipes: a request being written
        fails at once and a reply being read ends (their other ends are gone), so each pipe is closed only
        after its user is done, never under its feet. A reply written whole before the kill is read whole."""
        self.end("the worker was closed")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.stop is not None:
            self.stop(self.process.pid)
        for lock, fd, stream in (
            (self._sending, self.request_fd, self.process.stdin),
            (self._reading, self.replies.fd, self.process.stdout),
        ):
            with lock, contextlib.suppress(OSError):
                if stream is not None:  # the protocol runs over stdio
                    stream.close()
                else:
                    os.close(fd)
        self.process.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        for path in self.host_scratch:
            shutil.rmtree(path, ignore_errors=True)
