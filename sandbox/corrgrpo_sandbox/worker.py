"""The worker interpreter that runs INSIDE the sandbox (stdlib only, run as a script with `python -I`).

It reads requests from one pipe and writes replies to another. A request is a small header (limits, sizes)
followed by the body (the program, its files as JSON when it has any, stdin; each raw). The worker reads only the
header and forks the child FIRST; the child reads the body itself (stdin spliced into its memfd, never through its
memory), so no program, input or file ever enters the warm worker's memory, and the next child (a copy of the
worker) cannot find a previous run's data there. Output is read into fixed buffers that are zeroed after each reply
for the same reason.

The child becomes the candidate (own session, rlimits, cwd = a private tmp dir, fds 0-3 wired to a memfd and
pipes). The worker is a child subreaper: every process the candidate starts is its descendant, and CPU time is
that of the whole process tree (the worker's cgroup counter where it has one, else the rusage of every process
it reaps plus the live ones in /proc); the tree is killed when it reaches the CPU limit or the wall limit, and
when the child exits. A run ends only when every one of its processes is reaped. Then the writable mounts are
wiped (whatever permissions the candidate set), so nothing survives into the next run; a unix socket left in the
network namespace (the only family the seccomp filter allows, which refuses SysV IPC too) makes the run an anomaly,
and the worker and its namespaces are replaced. The pid and inode counters are moved after every run to where any
run would leave them (`PidCounter`, `InodeCounters`).

The candidate shares the sandbox with the worker, so the worker hides its pipes from it (moved to high fds,
closed in the child, and the worker is non-dumpable so /proc/<worker>/fd and ptrace are refused); if the
candidate kills the worker anyway, the parent sees a dead worker and reports an anomaly.
"""

from __future__ import annotations

import _signal
import atexit
import base64
import contextlib
import ctypes
import fcntl
import gc
import importlib.util
import json
import math
import mmap
import os
import resource
import select
import signal
import stat
import struct
import sys
import time
import traceback
import types
from collections.abc import Iterable

HEADER = struct.Struct(">I")
SETUP = struct.Struct(">dd")  # the child's set-up report: its CPU, and when its program began (monotonic)
STREAMS = ("stdout", "stderr", "channel")
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PROTOCOL_FD_BASE = 200  # the worker's own pipes live here; the child closes every fd >= 4
READ_CHUNK = 65536
PAGE = 4096
DOMAINNAME = "/proc/sys/kernel/domainname"
LAST_PID = "/proc/sys/kernel/ns_last_pid"  # the pid namespace's counter: the last pid it gave out
PID_ALLOWANCE = 1  # processes and threads a run may start besides its child and leave no trace (see PidCounter)
INODE_STRIDE = 4  # inode numbers of each writable mount a run may take (cwd, files, the worker's check: InodeCounters)
RLIMITS = tuple(getattr(resource, name) for name in sorted(dir(resource)) if name.startswith("RLIMIT_"))
UNIX_SOCKETS = "net/unix"  # in /proc/<pid>: the network namespace's unix sockets, one line each after a header
DRAIN_READS = 32  # a pipe holds at most 1 MiB; more means a straggler keeps writing, and it is about to be killed
STRAGGLER_ROUNDS = 2000  # x 1 ms: how long killed processes may take to disappear before the worker gives up
COALESCE_S = 0.002  # outputs are read at most this often while the child runs (see supervise)
POLL_S = 0.02  # how often a running tree's CPU is checked (runs shorter than this never pay for it)
SETUP_TIMEOUT_S = 5.0  # the child reads its program and sets up before its wall clock starts
NO_PROGRAM = 111  # the child's exit status when its program never arrived
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
PIPE_DEFAULT = 1 << 16  # a new pipe's size
LIBC = ctypes.CDLL(None, use_errno=True)


def read_message(fd: int) -> dict | None:
    """One length-prefixed JSON message, or None at a clean end of stream."""
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    body = read_exactly(fd, HEADER.unpack(header)[0])
    if body is None:
        raise EOFError("stream ended inside a message")
    return json.loads(body)


def read_exactly(fd: int, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, parts: list[bytes | memoryview]) -> None:
    """Gathered writes (a small reply is one write, so the reader wakes once) without joining: a joined copy of the
    streams would outlive their zeroed buffers in the heap that the next child inherits."""
    views = [memoryview(part) for part in parts if len(part)]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views.pop(0))
        if views:
            views[0] = views[0][written:]


def output_pipe(size: int) -> tuple[int, int]:
    """A pipe that holds `size` bytes (the run's output cap, within the parent's `output_pipe_bytes`): a program that
    writes a large output at once then never waits for the worker, which reads it when it exits. With the default
    64 KiB a 500 KB answer took twice its CPU time in wall time (see `supervise`)."""
    read_end, write_end = os.pipe()
    if size > PIPE_DEFAULT:  # never smaller: a flood past a small cap drains as fast as before
        with contextlib.suppress(OSError):  # refused by the kernel: the default size, only slower
            fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, size)
    return read_end, write_end


def prctl(option: int, value: int) -> None:
    if LIBC.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def unforked_buffer(size: int) -> mmap.mmap:
    """Zeroed memory that no child inherits (MADV_DONTFORK): a fork copies no page table entry of it and the worker's
    writes to it never fault on pages shared with a running child (a harness run's 3 MiB of output buffers were
    a third of the worker's memory, and so of what every fork copied)."""
    memory = mmap.mmap(-1, size)
    memory.madvise(mmap.MADV_DONTFORK)
    return memory


class Streams:
    """Fixed buffers the child's stdout, stderr and channel are read into, each capped, zeroed after every reply."""

    def __init__(self) -> None:
        self.cap = 0
        self.memory = unforked_buffer(READ_CHUNK)
        self.used = [0, 0, 0]
        self.truncated = False

    def reset(self, cap: int) -> None:
        if cap != self.cap:
            self.memory = unforked_buffer(3 * cap + READ_CHUNK)  # the last chunk swallows what lies beyond a cap
            self.cap = cap
        self.used = [0, 0, 0]
        self.truncated = False

    def read(self, fd: int, index: int) -> int:
        """One read of stream `index` from `fd`: bytes read, 0 at its end, -1 when nothing is there yet."""
        used = self.used[index]
        view = memoryview(self.memory)
        start, end = (index * self.cap + used, (index + 1) * self.cap) if used < self.cap else (3 * self.cap, None)
        target = view[start:end]
        try:
            count = os.readv(fd, [target])
        except BlockingIOError:
            return -1
        if used < self.cap:
            self.used[index] += count
        else:
            self.truncated |= count > 0
        return count

    def views(self) -> list[memoryview]:
        view = memoryview(self.memory)
        return [view[index * self.cap : index * self.cap + self.used[index]] for index in range(3)]

    def zero(self) -> None:
        for index, used in enumerate(self.used):
            self.memory[index * self.cap : index * self.cap + used] = bytes(used)
        if self.truncated:
            self.memory[3 * self.cap :] = bytes(READ_CHUNK)


def remove_tree(path: str) -> None:
    """Delete `path` whatever modes the candidate gave it (the owner may always chmod, even without privileges).
    An empty directory (the run's cwd, most runs) goes in one call: rmdir needs no permission on the directory itself,
    and refuses a symlink or a file (ENOTDIR), which is unlinked, never followed."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except NotADirectoryError:
        os.unlink(path)
        return
    except OSError:  # not empty
        pass
    os.chmod(path, 0o700)
    for entry in os.listdir(path):
        remove_tree(os.path.join(path, entry))
    os.rmdir(path)


def wipe(directory: str, mode: int) -> bool:
    """Delete everything below a writable mount and give it back its `mode`; True when it is empty afterwards."""
    try:
        os.chmod(directory, mode)  # the candidate may have locked the mount point itself
    except FileNotFoundError:
        return True
    failed = False
    for entry in os.listdir(directory):
        try:
            remove_tree(os.path.join(directory, entry))
        except (OSError, RecursionError):
            failed = True
    # every process of the run is gone (else the run is an anomaly anyway): nothing can add an entry meanwhile, so
    # only a failed removal needs a second listing
    return not failed or not os.listdir(directory)


class KernelFile:
    """A /proc or cgroup file the worker reads after every run, kept open and read with pread from offset 0: one
    system call per read, where `open().read()` made eight (the kernel writes the text anew at each read). The fd is
    the worker's alone: the child closes every fd above 3 before the program runs."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, path: str) -> KernelFile:
        return cls(os.open(path, os.O_RDONLY | os.O_CLOEXEC))

    def read(self) -> bytes:
        """The whole text (a file of many records, such as /proc/net/unix, may take several reads)."""
        chunks, offset = [], 0
        while chunk := os.pread(self.fd, READ_CHUNK, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def read_small(self) -> bytes:
        """A file of one short record (a counter, a limit table): the kernel writes it in one piece, one read."""
        return os.pread(self.fd, PAGE, 0)


class Invariants:
    """What a run must leave as it found it in the worker, checked after every run: the worker's limits, priority,
    CPU affinity and scheduling, and the namespace's UTS names. The seccomp filter should make each change
    impossible; a change seen anyway makes the run an anomaly and the worker is replaced, so no later run (nor a
    reference timing) is measured in a worker the candidate reached. Read with system calls, not from /proc/self:
    under bwrap the worker's /proc entry is hidden (`isolation.bwrap_head`), and with it its OOM score."""

    def __init__(self) -> None:
        self.domainname = KernelFile.open(DOMAINNAME) if os.path.exists(DOMAINNAME) else None
        self.expected = self.read()

    def read(self) -> dict[str, object]:
        return {
            "limits": [resource.getrlimit(limit) for limit in RLIMITS],
            "priority": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": os.sched_getaffinity(0),
            "scheduler": (os.sched_getscheduler(0), os.sched_getparam(0)),
            "UTS names": (os.uname().nodename, self.domainname.read_small() if self.domainname else None),
        }

    def broken(self) -> str | None:
        """Why the worker can no longer be trusted, or None."""
        changed = [name for name, value in self.read().items() if value != self.expected[name]]
        return f"the run changed the worker's {', '.join(changed)}" if changed else None


class PidCounter:
    """The pid namespace's counter, which every later run on the worker reads in its own pid: a run that started k
    processes or threads would tell the next one k. After each run the worker spends pids (threads that exit at once)
    until the counter stands where a run that started `PID_ALLOWANCE` of them leaves it; after a run that started
    more the worker is spent, replaced before another run (a fork, a thread: forked judges, threaded programs).
    The pids are spent after the reply (`settle`): a thread waits to be scheduled, and so would the caller."""

    def __init__(self) -> None:
        self.last = KernelFile.open(LAST_PID)
        # a thread that starts in pthread_exit(NULL) (the start routine's own signature) ends as it begins
        self.start, self.thread = ctypes.cast(LIBC.pthread_exit, ctypes.c_void_p), ctypes.c_ulong()
        self.owed = 0

    def check(self, child: int) -> bool:
        """After the run whose child was `child`: True when `settle` can put the counter where it is after any run."""
        extra = int(self.last.read_small()) - child
        self.owed = PID_ALLOWANCE - extra
        return 0 <= extra <= PID_ALLOWANCE  # negative: the counter wrapped

    def settle(self) -> None:
        for _ in range(self.owed):
            if LIBC.pthread_create(ctypes.byref(self.thread), None, self.start, None) != 0:
                raise OSError(ctypes.get_errno(), "no thread to spend a pid on")
            LIBC.pthread_join(self.thread, None)


class InodeCounters:
    """The inode numbers of the writable tmpfs mounts: each new file or directory takes the next one, so a later run
    would read in its own files' numbers how many an earlier one made. After each run the worker spends numbers
    (files that vanish when closed, O_TMPFILE) until each counter stands `INODE_STRIDE` past where it stood before;
    a run that made more (its cwd and the request's files included) leaves the worker spent, like `PidCounter`.
    /dev/mqueue numbers its files from the host's one counter (pipes, sockets): out of any run's control."""

    def __init__(self, directories: Iterable[str]) -> None:
        self.last = {directory: number for directory in directories if (number := self.take(directory)) is not None}

    @staticmethod
    def take(directory: str) -> int | None:
        """The next inode number of `directory`'s file system, spent; None where it has no anonymous files."""
        try:
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o600)
        except OSError:
            return None
        try:
            return os.fstat(fd).st_ino
        finally:
            os.close(fd)

    def settle(self) -> bool:
        """After a run: True when every counter is where it always is after a run."""
        for directory, last in self.last.items():
            now = self.take(directory)
            if now is None or not 0 < now - last <= INODE_STRIDE:
                return False
            for _ in range(INODE_STRIDE - (now - last)):
                self.take(directory)
            self.last[directory] = last + INODE_STRIDE
        return True


def namespace_file(name: str) -> KernelFile:
    """A file of /proc/<pid> that shows the namespaces, not the process, opened through a short-lived child: the
    worker's own entry (/proc/self, /proc/net) is hidden under bwrap. The open file keeps reading the namespace."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write_end)
        os.read(read_end, 1)  # until the worker has opened the file
        os._exit(0)
    try:
        return KernelFile.open(f"/proc/{pid}/{name}")
    finally:
        os.close(write_end)
        os.close(read_end)
        os.waitpid(pid, 0)


def load_module(path: str) -> types.ModuleType:
    """The stdlib-only module file `path`, imported under its file's stem (the worker runs as a script with `-I`:
    no package to import from)."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs, as an import would
    spec.loader.exec_module(module)
    return module


def apply_limits(limits: dict) -> None:
    cpu = max(1, math.ceil(limits["cpu_s"]))
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at the soft limit, SIGKILL one second later
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def tree_cpu_cap(limits: dict) -> float:
    """All of a run's processes together get what one process gets from RLIMIT_CPU: its hard limit."""
    return max(1, math.ceil(limits["cpu_s"])) + 1


def exit_status(error: SystemExit) -> int:
    """The exit status the interpreter would give for an uncaught SystemExit."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code & 0xFF
    print(error.code, file=sys.stderr)
    return 1


def set_up(files: bytes, workdir: str, request_fd: int, stdin_size: int) -> None:
    """In the child: its private cwd with the request's files (JSON of base64, parsed only when there are any), and
    stdin as a memfd on fd 0."""
    os.mkdir(workdir, 0o700)
    for name, content in (json.loads(files) if files else {}).items():
        path = os.path.join(workdir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(content))
    stdin_fd = os.memfd_create("stdin", 0)
    copy_stdin(request_fd, stdin_fd, stdin_size)
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    os.dup2(stdin_fd, 0)
    os.chdir(workdir)


def copy_stdin(request_fd: int, stdin_fd: int, size: int) -> None:
    """Move stdin from the request stream into its memfd inside the kernel (splice), never through this process's
    memory: the child that runs the program is this process, or (assert mode's judge) forks it, and a copy freed here
    would stay readable in its heap. Where splice is refused, one buffer is reused and zeroed."""
    remaining = size
    with contextlib.suppress(OSError):
        while remaining:
            moved = os.splice(request_fd, stdin_fd, remaining)
            if not moved:
                raise EOFError("stream ended inside stdin")
            remaining -= moved
    buffer = bytearray(min(remaining, READ_CHUNK))
    while remaining:
        count = os.readv(request_fd, [memoryview(buffer)[: min(remaining, len(buffer))]])
        if not count:
            raise EOFError("stream ended inside stdin")
        os.write(stdin_fd, memoryview(buffer)[:count])
        remaining -= count
    buffer[:] = bytes(len(buffer))


def become_candidate(
    request_fd: int,
    sizes: tuple[int, int, int],
    workdir: str,
    limits: dict,
    outputs: list[int],
    go_fd: int,
) -> None:
    """In the forked child: read the program (and files), detach, rewire fds, limit, run it as __main__, exit.
    Never returns. The seccomp filter is the worker's own, inherited (`Worker.serve`).

    The child reports on `go_fd` that the body was consumed (so the request stream is in step again), how much CPU
    the set-up took (subtracted: it is not the candidate's) and when the program began (the run's wall clock starts
    there). Everything before that is the worker's code, so the report is trusted."""
    status = NO_PROGRAM
    try:
        encoded, files = read_exactly(request_fd, sizes[0]), read_exactly(request_fd, sizes[1])
        if encoded is None or files is None:
            return
        status = 1
        os.setsid()
        for target, fd in enumerate(outputs, start=1):
            os.dup2(fd, target)
        try:
            source = encoded.decode("utf-8", "surrogatepass")
            del encoded
            set_up(files, workdir, request_fd, sizes[2])
            del files
        finally:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            os.write(go_fd, SETUP.pack(usage.ru_utime + usage.ru_stime, time.monotonic()))
        os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])  # the worker's pipes included
        apply_limits(limits)
        # the worker's own is SIG_DFL (see `serve`); `_signal`'s call, not `signal`'s enum wrapper: 20 fewer page faults
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        # sys.stdin/stdout/stderr are the worker's own, never used, so their buffers are empty: after dup2 they are
        # exactly what a fresh interpreter on these fds would have, at no cost
        sys.argv = ["<candidate>"]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        try:
            exec(compile(source, "<candidate>", "exec"), main.__dict__)
            status = 0
        except SystemExit as error:
            status = exit_status(error)
        except BaseException as error:
            traceback.print_exception(type(error), error, error.__traceback__.tb_next if error.__traceback__ else None)
            status = 1
        # Like interpreter shutdown: wait for the candidate's non-daemon threads, run its exit functions. Only when
        # there are any: every object the child touches costs a copy-on-write fault (~4 us), and these calls alone
        # cost a tenth of a trivial run.
        threading = sys.modules.get("threading")
        if threading is not None and threading.active_count() > 1:
            threading._shutdown()
        if atexit._ncallbacks():  # the worker cleared its own (`Worker.serve`): these are the candidate's
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(status)


class ProcessTree:
    """The processes of one run: every descendant of the worker (a subreaper, so orphans stay descendants)."""

    def __init__(self, namespaced: bool, usage: KernelFile | None) -> None:
        self.namespaced = namespaced  # alone in a PID namespace: every process but init and the worker is the run's
        # the worker's cgroup CPU counter (ns), counting even processes nobody waited for
        self.usage = usage
        self.me = os.getpid()
        self.reaped_cpu = 0.0
        self.peak_rss_kb = 0
        self.child_status: int | None = None
        self.child_cpu = 0.0
        self.child = 0

    def start(self, child: int) -> None:
        self.child = child
        self.reaped_cpu = 0.0
        self.peak_rss_kb = 0
        self.child_status = None
        self.child_cpu = 0.0
        self.counter_start = self.counter()

    def counter(self) -> float:
        """Cgroup CPU of everything in the worker's cgroup minus the worker's own, in seconds."""
        if self.usage is None:
            return 0.0
        total = int(self.usage.read_small()) / 1e9
        own = resource.getrusage(resource.RUSAGE_SELF)
        return total - own.ru_utime - own.ru_stime

    def record(self, pid: int, status: int, usage: resource.struct_rusage) -> None:
        cpu = usage.ru_utime + usage.ru_stime  # the process's own and that of every descendant it waited for
        self.reaped_cpu += cpu
        self.peak_rss_kb = max(self.peak_rss_kb, usage.ru_maxrss)
        if pid == self.child:
            self.child_status, self.child_cpu = status, cpu

    def reap_orphans(self) -> None:
        """Reap exited descendants other than the child (whose exit the pidfd reports) and count their CPU."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == self.child:
                return
            self.record(*os.wait4(info.si_pid, 0))

    def descendants(self) -> list[int]:
        """Live (and zombie) processes of the run, from /proc."""
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
        if self.namespaced:
            return [pid for pid in pids if pid not in (1, self.me)]
        parents = {pid: stat_fields(pid)[1:2] for pid in pids}
        found, frontier = [], {self.me}
        while frontier:
            frontier = {pid for pid, parent in parents.items() if parent and int(parent[0]) in frontier}
            found += frontier
        return found

    def cpu(self) -> float:
        """CPU time of every process of the run so far."""
        if self.usage is not None:
            return max(0.0, self.counter() - self.counter_start)
        live = 0.0
        for pid in self.descendants():
            fields = stat_fields(pid)
            if len(fields) > 14:  # utime, stime and what it has waited for
                live += sum(int(value) for value in fields[11:15]) / CLOCK_TICK
        return self.reaped_cpu + live

    def kill(self) -> None:
        if self.namespaced:  # every process the worker may signal, except the namespace's init and the worker
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
            return
        for pid in self.descendants():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def end(self) -> bool:
        """Kill and reap every process of the run; True when none is left."""
        for _ in range(STRAGGLER_ROUNDS):
            while True:
                try:
                    reaped = os.wait4(-1, os.WNOHANG)
                except ChildProcessError:  # no child at all: no descendant either
                    return True
                if reaped[0] == 0:
                    break
                self.record(*reaped)
            self.kill()
            time.sleep(0.001)
        return False


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (state, ppid, ...), or [] when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return []


def read_setup(go_fd: int) -> tuple[float, float] | None:
    """The child's set-up report (CPU, start of its program), once it is written; None before, or if it never was."""
    try:
        message = os.read(go_fd, SETUP.size)  # written at once, far below PIPE_BUF: never a part of it
    except BlockingIOError:
        return None
    return SETUP.unpack(message) if len(message) == SETUP.size else None


def supervise(
    readers: dict[int, int], pidfd: int, go_fd: int, tree: ProcessTree, streams: Streams, limits: dict, forked: float
) -> tuple[tuple[float, float] | None, bool, bool]:
    """Read the outputs until the child exits, the deadline passes or the tree's CPU reaches its cap. Returns (the
    child's set-up report or None, child exited, CPU cap reached).

    Until the set-up report arrives the deadline is `SETUP_TIMEOUT_S` after the fork; then it is `wall_s` after the
    program began, and the CPU cap `tree_cpu_cap` plus the set-up's CPU. Wake-ups cost a short run most of its
    overhead, so the worker sleeps through the report and the first outputs until the child exits or the first check
    (`POLL_S` after the fork): a run shorter than that wakes it once, where it woke for the report, for the first
    output and for the exit. A pipe holds 64 KiB meanwhile (a child that fills one waits at most until that check).
    After that, each read is followed by a rest of `COALESCE_S` (the exit still wakes the worker at once): the harness
    writes one message per test, and waking for each message cost a context switch per message."""
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
            # a /proc scan of a whole host (no namespace, no cgroup) may be slow: keep checking to ~5% of a core
            next_check = now + max(POLL_S, 20 * (time.monotonic() - now))
        resting = now < resting_until
        wake = min(deadline, next_check, resting_until) if resting else min(deadline, next_check)
        ready, _, _ = select.select([pidfd] if resting else [*open_fds, pidfd], [], [], wake - now)
        exited = pidfd in ready
        if ready or resting:  # while resting only the exit is watched: what came meanwhile is read now
            for fd in open_fds.copy():
                for _ in range(DRAIN_READS if exited else 1):  # after exit, drain what the child left in the pipe
                    count = streams.read(fd, readers[fd])
                    if count == 0:
                        open_fds.discard(fd)
                    if count <= 0:
                        break
            resting_until = time.monotonic() + COALESCE_S if ready else 0.0
        if exited:
            return setup or read_setup(go_fd), True, False


class Worker:
    """State that lives across runs: the protocol, the scratch mounts, the output buffers."""

    def __init__(self, argv: list[str]) -> None:
        passed = [int(fd) for fd in (*argv[1:3], argv[4]) if fd != "-"]  # the pipes, the CPU counter if any
        moved = [os.dup2(fd, PROTOCOL_FD_BASE + i, inheritable=False) for i, fd in enumerate(passed)]
        for original in set(passed) - set(moved):
            os.close(original)
        self.request_fd, self.reply_fd = moved[:2]
        self.namespaced = argv[3] == "1"
        self.tree = ProcessTree(self.namespaced, KernelFile(moved[2]) if len(moved) > 2 else None)
        self.pipe_bytes = int(argv[5])  # the most each output pipe may hold (`output_pipe`)
        self.scratch = argv[7:]  # writable mounts wiped after every run; the first one holds the child's cwd
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
            become_candidate(
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
        setup, exited, cpu_exceeded = supervise(readers, pidfd, go_read, self.tree, self.streams, limits, forked)
        clean = self.tree.end()
        setup_cpu, started = setup or (0.0, forked)
        wall = time.monotonic() - started
        cpu = max(0.0, max(self.tree.reaped_cpu, self.tree.cpu()) - setup_cpu)
        for fd in (pidfd, go_read, *readers):
            os.close(fd)
        for directory, mode in self.modes.items():
            clean &= wipe(directory, mode)
        if self.unix_sockets is not None:  # a socket that outlives its processes: one in flight in a cycle of them
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
            "anomaly": None if clean else "processes, files or sockets left by the candidate could not be removed",
        }
        return reply, views

    def serve(self, seccomp: types.ModuleType) -> None:
        prctl(PR_SET_DUMPABLE, 0)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        for directory, mode in self.modes.items():
            wipe(directory, mode)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # parent gone: die instead of looping on EPIPE
        # As its namespace's init (bwrap --as-pid-1, docker) the worker gets only the signals it handles from inside:
        # with Python's SIGINT handler gone, a candidate can signal it nothing at all
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        # Once, here: every child inherits the filter and none can remove it. Installing it in each child cost a
        # fifth of a trivial run (the kernel compiles the filter, the child's Python faults in copied pages).
        with contextlib.suppress(ValueError):  # no filter for this architecture: `isolation` refuses it but unsafe-none
            seccomp.install(seccomp.build_filter())
        atexit._clear()  # what site and the imports registered is the worker's: a child runs only its own (see above)
        gc.freeze()  # the worker's objects out of the collector's reach: a child's collections never copy their pages
        self.invariants = Invariants()
        # unix sockets are the only ones a run may create (`seccomp`); the kernel frees one that was sent over another
        # in a cycle only when its collector runs, meanwhile listed with the name the program chose
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


def preload(paths: list[str]) -> None:
    """Import the caller's module files (argv[6], a JSON list) under their own names before the first run: every
    child inherits them compiled and initialised, so a program that imports one pays nothing for it. They hold no
    run's data: they are loaded before any request is read."""
    for path in paths:
        load_module(path)


if __name__ == "__main__":
    preload(json.loads(sys.argv[6]))
    Worker(sys.argv).serve(load_module(os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccomp.py")))
