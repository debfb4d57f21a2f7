"""The forked child's side of a run: it reads the program, sets up its cwd and stdin, limits itself and runs
the program as `__main__`. Everything here runs in the child before the program, so what it reports is
trusted."""

from __future__ import annotations

import _signal
import atexit
import base64
import contextlib
import json
import math
import os
import resource
import struct
import sys
import time
import traceback
import types

from .kernel import READ_CHUNK
from .protocol import read_exactly

SETUP = struct.Struct(">dd")  # the child's set-up report: its CPU, and when its program began (monotonic)
NO_PROGRAM = 111  # the child's exit status when its program never arrived


def cpu_cap_s(cpu_s: float) -> int:
    """The most CPU a run with limit `cpu_s` may spend, its whole process tree: RLIMIT_CPU's hard limit."""
    return max(1, math.ceil(cpu_s)) + 1


def apply_limits(limits: dict) -> None:
    cpu = cpu_cap_s(limits["cpu_s"]) - 1  # the soft limit: SIGXCPU a second before the cap
    mb = 1024 * 1024
    # SIGXCPU at the soft limit, SIGKILL one second later
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
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


def set_up(files: bytes, workdir: str, request_fd: int, stdin_size: int) -> None:
    """In the child: its private cwd with the request's files (JSON of base64, parsed only when there are
    any), and stdin as a memfd on fd 0."""
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
    """Move stdin from the request stream into its memfd inside the kernel (splice), never through this
    process's memory: the child that runs the program is this process, or a process the program forks, and a
    copy freed here would stay readable in its heap. Where splice is refused, one buffer is reused and
    zeroed."""
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


def become_program(
    request_fd: int,
    sizes: tuple[int, int, int],
    workdir: str,
    limits: dict,
    outputs: list[int],
    go_fd: int,
) -> None:
    """In the forked child: read the program (and files), detach, rewire fds, limit, run it as __main__, exit.
    Never returns. The seccomp filter is the worker's own, inherited (`WorkerServer.serve`).

    The child reports on `go_fd` that the body was consumed (so the request stream is in step again), how much
    CPU the set-up took (subtracted: it is not the program's) and when the program began (the run's wall clock
    starts there). Everything before that is the worker's code, so the report is trusted."""
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
        # the worker's own is SIG_DFL (see `serve`); `_signal`'s call, not `signal`'s enum wrapper: 20 fewer
        # page faults
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        # sys.stdin/stdout/stderr are the worker's own, never used, so their buffers are empty: after dup2
        # they are exactly what a fresh interpreter on these fds would have, at no cost
        sys.argv = ["<program>"]
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        try:
            exec(compile(source, "<program>", "exec"), main.__dict__)
            status = 0
        except SystemExit as error:
            status = exit_status(error)
        except BaseException as error:
            traceback.print_exception(
                type(error), error, error.__traceback__.tb_next if error.__traceback__ else None
            )
            status = 1
        # Like interpreter shutdown: wait for the program's non-daemon threads, run its exit functions. Only
        # when there are any: every object the child touches costs a copy-on-write fault (~4 us), and these
        # calls alone cost a tenth of a trivial run.
        threading = sys.modules.get("threading")
        if threading is not None and threading.active_count() > 1:
            threading._shutdown()
        if atexit._ncallbacks():  # the worker cleared its own (`WorkerServer.serve`): these are the program's
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(status)
