"""How a worker interpreter is started: one setting chooses the isolation, and nothing falls back silently.

`auto` takes bubblewrap, else a registered `docker` launcher, else refuses; `unsafe-none` (no isolation at
all) runs only when asked for by that name. A backend plugs in with `register_launcher(name, factory)`; the
module `corrgrpo_sandbox.<name>_backend`, when it exists, is imported on first use so that it can register
itself.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import shutil
import subprocess
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from corrgrpo_sandbox.cgroups import cgroup_parents
from corrgrpo_sandbox.rootfs import RootFs, RootFsError, build_rootfs, resident_copy
from corrgrpo_sandbox.worker import seccomp

log = logging.getLogger("corrgrpo_sandbox")

ISOLATIONS = ("auto", "bwrap", "docker", "unsafe-none")
AUTO_ORDER = ("bwrap", "docker")
PACKAGE_DIR = Path(__file__).resolve().parent
INSIDE_PACKAGE_DIR = "/opt/corrgrpo_sandbox"
INSIDE_PRELOAD_DIR = "/opt/corrgrpo_preload"  # where the caller's preloaded module files appear, read-only
TMP_SIZE_BYTES = 256 * 1024 * 1024  # the sandbox's /tmp is a tmpfs (RAM): cap it
# /dev/shm likewise (multiprocessing needs it). The rest of /dev is read-only
SHM_SIZE_BYTES = 64 * 1024 * 1024
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; it needs unprivileged user namespaces, "
    "or root), "
    "or, only where the code you run is trusted, choose isolation 'unsafe-none'"
)


class IsolationUnavailable(RuntimeError):
    """The isolation asked for cannot run here. The message says why and what to do."""


@dataclass(frozen=True)
class Launcher:
    """How to start a worker and what the worker may assume about its surroundings."""

    isolation: str  # "bwrap", "docker", "unsafe-none"
    head: tuple[str, ...]  # the isolating wrapper and its options; () for none
    # then the mounts of preloaded files (`mount`), then `seal` (e.g. making the root read-only), then:
    command: tuple[str, ...]  # the worker interpreter. The worker's arguments follow it
    # alone in its own PID and network namespaces: kill(-1) is safe, their state the sandbox's
    namespaced: bool
    scratch: tuple[str, ...]  # writable mounts the worker wipes after every run ("" = a fresh host temp dir)
    # options that show one host file read-only at a path inside, placed after `head`; None: the worker sees
    # the host
    mount: Callable[[str, str], tuple[str, ...]] | None = None
    # the worker's processes descend from the launched one (a cgroup entered before exec holds them)
    cgroups: bool = True
    seal: tuple[str, ...] = ()
    # the protocol runs over the worker's stdin/stdout instead of passed fds (e.g. `docker run -i`)
    stdio: bool = False
    # for the launched command (the worker gets none)
    environment: dict[str, str] = field(default_factory=dict)
    resident_files: bool = False  # every file a run sees is a tmpfs copy: no page-cache bits between runs
    stop: Callable[[int], None] | None = None  # ends a worker that outlives its launched process (by pid)


LAUNCHERS: dict[str, Callable[[str, tuple[str, ...]], Launcher]] = {}


def register_launcher(name: str, factory: Callable[[str, tuple[str, ...]], Launcher]) -> None:
    """`factory(python, packages)` returns a working Launcher or raises IsolationUnavailable with the
    reason."""
    LAUNCHERS[name] = factory


def worker_command(python: str, package_dir: str) -> tuple[str, ...]:
    return (os.path.realpath(python), "-I", f"{package_dir}/worker/__main__.py")


def bwrap_head(bwrap: str, rootfs: RootFs) -> tuple[str, ...]:
    """Whitelist mounts: the tmpfs copy of what the worker needs (`rootfs`), read-only. No host directory.

    The environment is cleared twice: bwrap is itself started with an empty environment (its PID 1 inside the
    sandbox keeps the environment it was started with, readable as /proc/1/environ) and --clearenv."""
    # --as-pid-1: the worker is the namespace's init, with no bwrap init beside it that a program of the same
    # uid could trace (the worker is non-dumpable) or signal (an init gets only the signals it handles)
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
    ]
    args += ["--as-pid-1"]
    args += ["--cap-drop", "ALL", "--clearenv"]
    for name, value in SANDBOX_ENV.items():
        args += ["--setenv", name, value]
    args += rootfs.bwrap_args(INSIDE_PACKAGE_DIR)
    # /proc read-only: as uid 0 of its user namespace a program could otherwise write the namespaced sysctls
    # (net, IPC, mqueue, UTS names) that outlive its run, /proc/<worker>/oom_score_adj, and, for a service
    # running as root, host-wide ones under /proc/sys
    args += [
        "--proc",
        "/proc",
        "--remount-ro",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(TMP_SIZE_BYTES),
        "--tmpfs",
        "/tmp",
    ]
    # the worker's /proc entry hidden (under an empty read-only tmpfs): its counters (page faults and CPU time
    # of the runs it reaped, context switches, CPU time) grow with what each run did, and every later run
    # could read them
    args += ["--tmpfs", "/proc/1", "--remount-ro", "/proc/1"]
    args += ["--size", str(SHM_SIZE_BYTES), "--tmpfs", "/dev/shm", "--mqueue", "/dev/mqueue"]
    return (*args, "--remount-ro", "/dev")


BWRAP_SEAL = ("--remount-ro", "/", "--chdir", "/tmp")


def bwrap_mount(host: str, inside: str) -> tuple[str, ...]:
    return ("--ro-bind", str(resident_copy(Path(host))), inside)


@functools.cache
def bwrap_launcher(python: str, packages: tuple[str, ...] = ()) -> Launcher:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise IsolationUnavailable("bwrap not found on PATH")
    try:
        rootfs = build_rootfs(python, PACKAGE_DIR, packages)
    except (RootFsError, OSError, subprocess.TimeoutExpired) as error:
        raise IsolationUnavailable(f"the worker's tmpfs root: {error}") from error
    head, command = bwrap_head(bwrap, rootfs), worker_command(python, INSIDE_PACKAGE_DIR)
    probe = [*head, *BWRAP_SEAL, command[0], "-I", "-c", "import os; assert not os.path.exists('/work')"]
    try:
        run = subprocess.run(probe, env={}, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise IsolationUnavailable(f"bwrap probe failed: {error}") from error
    if run.returncode != 0:
        stderr = run.stderr.decode(errors="replace").strip()[-300:]
        raise IsolationUnavailable(f"bwrap probe exited {run.returncode}: {stderr}")
    if os.geteuid() == 0 and "pids" not in cgroup_parents():
        log.warning(
            "corrgrpo_sandbox runs as uid 0 without a pids cgroup: the kernel ignores RLIMIT_NPROC; a run's "
            "processes "
            "are bounded by its CPU and wall limits over the whole process tree"
        )
    return Launcher(
        "bwrap",
        head,
        command,
        namespaced=True,
        scratch=("/tmp", "/dev/shm", "/dev/mqueue"),
        mount=bwrap_mount,
        seal=BWRAP_SEAL,
        resident_files=True,
    )


def unsafe_launcher(python: str) -> Launcher:
    message = (
        "corrgrpo_sandbox: isolation 'unsafe-none': untrusted code runs with rlimits and a process group "
        "only, "
        "with the service's uid, file system and network"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=4)
    log.warning(message)
    return Launcher(
        "unsafe-none", (), worker_command(python, str(PACKAGE_DIR)), namespaced=False, scratch=("",)
    )


register_launcher("bwrap", bwrap_launcher)


def resolve_launcher(python: str, isolation: str, packages: tuple[str, ...] = ()) -> Launcher:
    """The launcher for `isolation` (one of ISOLATIONS), or IsolationUnavailable saying why and what to do."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}")
    if isolation == "unsafe-none":
        return unsafe_launcher(python)
    try:
        seccomp.build_filter()
    except ValueError as error:
        raise IsolationUnavailable(f"{error}: runs could reach the worker (see worker/seccomp.py)") from error
    reasons = []
    for name in AUTO_ORDER if isolation == "auto" else (isolation,):
        if name not in LAUNCHERS:
            with contextlib.suppress(ModuleNotFoundError):
                importlib.import_module(f"corrgrpo_sandbox.{name}_backend")  # registers itself
        factory = LAUNCHERS.get(name)
        if factory is None:
            reasons.append(f"{name}: not available in this installation")
            continue
        try:
            return factory(python, packages)
        except IsolationUnavailable as error:
            reasons.append(f"{name}: {error}")
    raise IsolationUnavailable(
        f"no working sandbox for isolation {isolation!r} ({'; '.join(reasons)}): {INSTALL_HINT}"
    )
