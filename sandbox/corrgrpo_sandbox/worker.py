"""The worker interpreter that runs INSIDE the sandbox (stdlib only, run as a script with `python -I`).

It reads length-prefixed JSON requests from one pipe and writes replies to another. Per request it forks a
child that becomes the candidate (own session, rlimits, cwd = a wiped private tmp dir, fds 0-3 wired to a
memfd and pipes), waits for it with wait4 (so CPU time and peak RSS come from the kernel), kills every
straggler the child left behind, wipes the writable mounts and reports. The candidate shares the sandbox
with the worker, so the worker hides its pipes from it (moved to high fds, closed in the child, and the
worker is non-dumpable so /proc/<worker>/fd and ptrace are refused); if the candidate kills the worker
anyway, the parent sees a dead worker and reports an anomaly.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import json
import math
import os
import resource
import select
import shutil
import signal
import struct
import sys
import time
import traceback
import types

HEADER = struct.Struct(">I")
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PROTOCOL_FD_BASE = 200  # the worker's own pipes live here; the child closes every fd >= 4
READ_CHUNK = 65536
DRAIN_READS = 32  # a pipe holds at most 1 MiB; more means a straggler keeps writing, and it is about to be killed
STRAGGLER_ROUNDS = 200


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


def write_message(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    view = memoryview(HEADER.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view) :]


LIBC = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    if LIBC.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def wipe(directory: str) -> None:
    """Delete everything below a writable mount (the candidate may have left anything there)."""
    if not os.path.isdir(directory):
        return
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def apply_limits(limits: dict) -> None:
    cpu = max(1, math.ceil(limits["cpu_s"]))
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at the soft limit, SIGKILL one second later
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def exit_status(error: SystemExit) -> int:
    """The exit status the interpreter would give for an uncaught SystemExit."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code & 0xFF
    print(error.code, file=sys.stderr)
    return 1


def become_candidate(source: str, workdir: str, limits: dict, fds: tuple[int, int, int, int]) -> None:
    """In the forked child: detach, rewire fds, limit, run `source` as __main__, exit. Never returns."""
    status = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])  # the worker's pipes included
        os.chdir(workdir)
        apply_limits(limits)
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
        threading = sys.modules.get("threading")
        if threading is not None:  # like interpreter shutdown: wait for the candidate's non-daemon threads
            threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
    finally:
        os._exit(status)


def collect(pipes: dict[int, str], pidfd: int, deadline: float, cap: int) -> tuple[dict[str, bytes], bool, bool]:
    """Read the child's pipes until it exits or the deadline passes; keep at most `cap` bytes per stream."""
    data = {name: bytearray() for name in pipes.values()}
    truncated = False
    open_fds = set(pipes)
    for fd in open_fds:
        os.set_blocking(fd, False)
    exited = False
    while not exited:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([*open_fds, pidfd], [], [], remaining)
        exited = pidfd in ready
        for fd in open_fds.copy() if exited else ready:
            if fd == pidfd:
                continue
            for _ in range(DRAIN_READS if exited else 1):  # after exit, drain what the child left in the pipe
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    break
                if not chunk:
                    open_fds.discard(fd)
                    break
                buffer = data[pipes[fd]]
                keep = max(0, cap - len(buffer))
                buffer += chunk[:keep]
                truncated |= len(chunk) > keep
    return {name: bytes(value) for name, value in data.items()}, truncated, exited


def kill_stragglers(in_pid_namespace: bool) -> bool:
    """Kill and reap every process the candidate left behind; True when none is left.

    Inside bwrap's PID namespace kill(-1) reaches every process except the worker and the namespace's init;
    outside (fallback) the worker is a child subreaper, so orphans are reparented to it and found in /proc."""
    me = str(os.getpid())
    for _ in range(STRAGGLER_ROUNDS):
        if in_pid_namespace:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as stat:
                        if stat.read().rsplit(")", 1)[1].split()[1] == me:
                            children.append(int(entry))
                except (OSError, IndexError):
                    continue
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
        if not children:
            return True
        time.sleep(0.001)
    return False


def execute(request: dict, in_pid_namespace: bool, scratch: list[str]) -> dict:
    limits = request["limits"]
    workdir = os.path.join(scratch[0], "work")
    os.mkdir(workdir, 0o700)
    for name, content in request["files"].items():
        path = os.path.join(workdir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(content))
    stdin_fd = os.memfd_create("stdin", 0)
    os.write(stdin_fd, base64.b64decode(request["stdin"]))
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    pipes = {name: os.pipe() for name in ("stdout", "stderr", "channel")}
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        become_candidate(request["source"], workdir, limits, (stdin_fd, *(pipes[name][1] for name in pipes)))
    pidfd = os.pidfd_open(pid)
    os.close(stdin_fd)
    for _, write_end in pipes.values():
        os.close(write_end)
    readers = {read_end: name for name, (read_end, _) in pipes.items()}
    streams, truncated, exited = collect(readers, pidfd, started + limits["wall_s"], limits["output_bytes"])
    if not exited:
        for target in (-pid, pid):  # its process group, and the child itself should it have left the group
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    for fd in (pidfd, *readers):
        os.close(fd)
    clean = kill_stragglers(in_pid_namespace)
    for directory in scratch:
        wipe(directory)
    killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    return {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": killed_by,
        **{name: base64.b64encode(value).decode() for name, value in streams.items()},
        "truncated": truncated,
        "timed_out": not exited
        or killed_by == signal.SIGXCPU
        or (killed_by == signal.SIGKILL and usage.ru_utime + usage.ru_stime >= math.ceil(limits["cpu_s"])),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": wall,
        "peak_rss_kb": usage.ru_maxrss,
        "anomaly": None if clean else "processes left behind by the candidate could not be killed",
    }


def main(argv: list[str]) -> None:
    request_fd, reply_fd = (os.dup2(int(fd), PROTOCOL_FD_BASE + i, inheritable=False) for i, fd in enumerate(argv[1:3]))
    for original in argv[1:3]:
        os.close(int(original))
    in_pid_namespace = argv[3] == "1"
    scratch = argv[4:]  # writable mounts wiped after every run; the first one holds the child's cwd
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    for directory in scratch:
        wipe(directory)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # parent gone: die instead of looping on EPIPE
    while (request := read_message(request_fd)) is not None:
        try:
            reply = execute(request, in_pid_namespace, scratch)
        except Exception as error:
            reply = {"anomaly": f"worker error: {error!r}"}
        write_message(reply_fd, reply)
        if reply.get("anomaly"):
            return


if __name__ == "__main__":
    main(sys.argv)
