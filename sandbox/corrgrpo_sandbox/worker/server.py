"""The worker's loop: read a request's header, fork the child, supervise the run, reply, clean up; repeat."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib.util
import json
import math
import os
import select
import signal
import stat
import sys
import time
import types

from . import seccomp
from .child import SETUP, become_program, cpu_cap_s
from .kernel import KernelFile, namespace_file, prctl
from .process_tree import ProcessTree
from .protocol import HEADER, STREAMS, read_message, write_all
from .residue import UNIX_SOCKETS, InodeCounters, Invariants, PidCounter, wipe
from .streams import Streams, output_pipe

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PROTOCOL_FD_BASE = 200  # the worker's own pipes live here. The child closes every fd >= 4
# a pipe holds at most 1 MiB. More means a straggler keeps writing, and it is about to be killed
DRAIN_READS = 32
COALESCE_S = 0.002  # outputs are read at most this often while the child runs (see supervise)
POLL_S = 0.02  # how often a running tree's CPU is checked (runs shorter than this never pay for it)
SETUP_TIMEOUT_S = 5.0  # the child reads its program and sets up before its wall clock starts


def tree_cpu_cap(limits: dict) -> float:
    """All of a run's processes together get what one process gets from RLIMIT_CPU: its hard limit."""
    return cpu_cap_s(limits["cpu_s"])


def read_setup(go_fd: int) -> tuple[float, float] | None:
    """The child's set-up report (CPU, start of its program), once it is written; None before, or if it
    never was."""
    try:
        message = os.read(go_fd, SETUP.size)  # written at once, far below PIPE_BUF: never a part of it
    except BlockingIOError:
        return None
    return SETUP.unpack(message) if len(message) == SETUP.size else None


def supervise(
    readers: dict[int, int],
    pidfd: int,
    go_fd: int,
    tree: ProcessTree,
    streams: Streams,
    limits: dict,
    forked: float,
) -> tuple[tuple[float, float] | None, bool, bool]:
    """Read the outputs until the child exits, the deadline passes or the tree's CPU reaches its cap. Returns
    (the child's set-up report or None, child exited, CPU cap reached).

    Until the set-up report arrives the deadline is `SETUP_TIMEOUT_S` after the fork; then it is `wall_s`
    after the program began, and the CPU cap `tree_cpu_cap` plus the set-up's CPU. Wake-ups cost a short run
    most of its overhead, so the worker sleeps through the report and the first outputs until the child exits
    or the first check (`POLL_S` after the fork): a run shorter than that wakes it once, where it woke for the
    report, for the first output and for the exit. A pipe holds 64 KiB meanwhile (a child that fills one waits
    at most until that check). After that, each read is followed by a rest of `COALESCE_S` (the exit still
    wakes the worker at once): a program that writes many small messages would otherwise cost a context switch
    per message."""
    open_fds = set(readers)
    for fd in (*open_fds, go_fd):
        os.set_blocking(fd, False)
    setup: tuple[float, float] | None = None
    deadline, cpu_cap = forked + SETUP_TIMEOUT_S, math.inf
    next_check = resting_until = forked + POLL_S
    while True:
        if setup is None and (setup := read_setup(go_fd)) is not None:
            deadline, cpu_cap = setup[1] + limits["wall_s"], tree_cpu_cap(limits) + setup[0]
        now = time.monotonic()
        if now >= deadline:
            return setup, False, False
        if now >= next_check:
            tree.reap_orphans()
            if tree.cpu() >= cpu_cap:
                return setup, False, True
            # a /proc scan of a whole host (no namespace, no cgroup) may be slow: keep checking to ~5% of a
            # core
            next_check = now + max(POLL_S, 20 * (time.monotonic() - now))
        resting = now < resting_until
        wake = min(deadline, next_check, resting_until) if resting else min(deadline, next_check)
        ready, _, _ = select.select([pidfd] if resting else [*open_fds, pidfd], [], [], wake - now)
        exited = pidfd in ready
        if ready or resting:  # while resting only the exit is watched: what came meanwhile is read now
            for fd in open_fds.copy():
                # after exit, drain what the child left in the pipe
                for _ in range(DRAIN_READS if exited else 1):
                    count = streams.read(fd, readers[fd])
                    if count == 0:
                        open_fds.discard(fd)
                    if count <= 0:
                        break
            resting_until = time.monotonic() + COALESCE_S if ready else 0.0
        if exited:
            return setup or read_setup(go_fd), True, False


class WorkerServer:
    """The worker inside the sandbox, serving one run at a time. Holds what lives across runs: the protocol's
    fds, the scratch mounts, the output buffers, the residue checks."""

    def __init__(self, argv: list[str]) -> None:
        passed = [int(fd) for fd in (*argv[1:3], argv[4]) if fd != "-"]  # the pipes, the CPU counter if any
        moved = [os.dup2(fd, PROTOCOL_FD_BASE + i, inheritable=False) for i, fd in enumerate(passed)]
        for original in set(passed) - set(moved):
            os.close(original)
        self.request_fd, self.reply_fd = moved[:2]
        self.namespaced = argv[3] == "1"
        self.tree = ProcessTree(self.namespaced, KernelFile(moved[2]) if len(moved) > 2 else None)
        self.pipe_bytes = int(argv[5])  # the most each output pipe may hold (`streams.output_pipe`)
        self.scratch = argv[7:]  # writable mounts wiped after every run. The first one holds the child's cwd
        self.modes = {directory: stat.S_IMODE(os.stat(directory).st_mode) for directory in self.scratch}
        self.streams = Streams()

    def execute(self, header: dict) -> tuple[dict, list[memoryview]]:
        limits = header["limits"]
        self.streams.reset(limits["output_bytes"])
        pipes = [output_pipe(min(limits["output_bytes"], self.pipe_bytes)) for _ in STREAMS]
        go_read, go_write = os.pipe()
        forked = time.monotonic()
        pid = os.fork()
        if pid == 0:
            become_program(
                self.request_fd,
                (header["source"], header["files"], header["stdin"]),
                os.path.join(self.scratch[0], "work"),
                limits,
                [write_end for _, write_end in pipes],
                go_write,
            )
        self.tree.start(pid)
        pidfd = os.pidfd_open(pid)
        for _, write_end in pipes:
            os.close(write_end)
        os.close(go_write)
        readers = {read_end: index for index, (read_end, _) in enumerate(pipes)}
        setup, exited, cpu_exceeded = supervise(
            readers, pidfd, go_read, self.tree, self.streams, limits, forked
        )
        clean = self.tree.end()
        setup_cpu, started = setup or (0.0, forked)
        wall = time.monotonic() - started
        cpu = max(0.0, max(self.tree.reaped_cpu, self.tree.cpu()) - setup_cpu)
        for fd in (pidfd, go_read, *readers):
            os.close(fd)
        for directory, mode in self.modes.items():
            clean &= wipe(directory, mode)
        # a socket that outlives its processes: one in flight in a cycle of them
        if self.unix_sockets is not None:
            clean &= self.unix_sockets.read().count(b"\n") <= 1
        if broken := self.invariants.broken():
            return {"anomaly": broken}, []
        spent = self.pids is not None and not (self.pids.check(pid) and self.inodes.settle())
        if setup is None:
            return {"anomaly": "the child ended before it had its program"}, []
        status = self.tree.child_status
        killed_by = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
        views = self.streams.views()
        reply = {
            "exit_code": os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None,
            "signal": killed_by,
            **{name: len(view) for name, view in zip(STREAMS, views, strict=True)},
            "truncated": self.streams.truncated,
            "timed_out": not exited
            or cpu_exceeded
            or killed_by == signal.SIGXCPU
            or (killed_by == signal.SIGKILL and self.tree.child_cpu >= math.ceil(limits["cpu_s"])),
            "cpu_s": cpu,
            "wall_s": wall,
            "peak_rss_kb": self.tree.peak_rss_kb,
            "spent": spent,
            "anomaly": None if clean else "processes, files or sockets left by the run could not be removed",
        }
        return reply, views

    def serve(self) -> None:
        prctl(PR_SET_DUMPABLE, 0)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        for directory, mode in self.modes.items():
            wipe(directory, mode)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # parent gone: die instead of looping on EPIPE
        # As its namespace's init (bwrap --as-pid-1, docker) the worker gets only the signals it handles from
        # inside: with Python's SIGINT handler gone, a run can signal it nothing at all
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # Once, here: every child inherits the filter and none can remove it. Installing it in each child cost
        # a fifth of a trivial run (the kernel compiles the filter, the child's Python faults in copied
        # pages).
        # no filter for this architecture: `isolation` refuses it but unsafe-none
        with contextlib.suppress(ValueError):
            seccomp.install(seccomp.build_filter())
        # what site and the imports registered is the worker's: a child runs only its own (see above)
        atexit._clear()
        # the worker's objects out of the collector's reach: a child's collections never copy their pages
        gc.freeze()
        self.invariants = Invariants()
        # unix sockets are the only ones a run may create (`seccomp`). The kernel frees one that was sent over
        # another in a cycle only when its collector runs, meanwhile listed with the name the program chose
        self.unix_sockets = namespace_file(UNIX_SOCKETS) if self.namespaced else None
        self.pids = PidCounter() if self.namespaced else None  # unsandboxed, the counters are the host's
        self.inodes = InodeCounters(self.modes if self.namespaced else ())
        while (header := read_message(self.request_fd)) is not None:
            views: list[memoryview] = []
            try:
                reply, views = self.execute(header)
            except Exception as error:
                reply = {"anomaly": f"worker error: {error!r}"}
            body = json.dumps(reply).encode()
            write_all(self.reply_fd, [HEADER.pack(len(body)), body, *views])
            del views
            self.streams.zero()
            if reply.get("anomaly") or reply.get("spent"):
                return
            if self.pids is not None:
                self.pids.settle()  # an error ends the worker, which the next run finds dead (an anomaly)


def load_module(path: str) -> types.ModuleType:
    """The stdlib-only module file `path`, imported under its file's stem (the worker has no path to import
    it from)."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs, as an import would
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> None:
    """argv: the request and reply fds, namespaced (1/0), the CPU counter's fd or "-", the output pipes' size,
    the caller's preloaded module files (a JSON list), then the scratch mounts.

    The preloaded files are imported under their own names before the first run: every child inherits them
    compiled and initialised, so a program that imports one pays nothing for it. They hold no run's data: they
    are loaded before any request is read."""
    for path in json.loads(argv[6]):
        load_module(path)
    WorkerServer(argv).serve()
