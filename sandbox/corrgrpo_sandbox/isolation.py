"""How a worker interpreter is started: inside bubblewrap, or (loudly) in the rlimits-only fallback."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("corrgrpo_sandbox")

PACKAGE_DIR = Path(__file__).resolve().parent
INSIDE_PACKAGE_DIR = "/opt/corrgrpo_sandbox"
TMP_SIZE_BYTES = 256 * 1024 * 1024  # the sandbox's /tmp is a tmpfs (RAM): cap it
SHM_SIZE_BYTES = 64 * 1024 * 1024  # /dev/shm likewise (multiprocessing needs it); the rest of /dev is read-only
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}


@dataclass(frozen=True)
class Launcher:
    """The command prefix that starts a worker, and what the worker must know about its surroundings."""

    isolation: str  # "bwrap" or "fallback: <reason>"
    prefix: tuple[str, ...]  # followed by the worker's own arguments
    in_pid_namespace: bool
    scratch: tuple[str, ...]  # writable mounts the worker wipes after every run ("" = a fresh host temp dir)


def interpreter_prefix(python: str) -> Path:
    """The installation directory of the real interpreter behind `python` (a venv's python is a symlink)."""
    return Path(os.path.realpath(python)).parent.parent


def bwrap_prefix(bwrap: str, python: str) -> tuple[str, ...]:
    """Whitelist mounts: system dirs and the interpreter read-only; /work, /root, /home, /var, /run never appear.

    The environment is cleared twice: bwrap is itself started with an empty environment (its PID 1 inside the
    sandbox keeps the environment it was started with, readable as /proc/1/environ) and --clearenv."""
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
    args += ["--cap-drop", "ALL", "--clearenv"]
    for name, value in SANDBOX_ENV.items():
        args += ["--setenv", name, value]
    for directory in SYSTEM_DIRS:
        path = Path(directory)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), directory]
        elif path.is_dir():
            args += ["--ro-bind", directory, directory]
    prefix = interpreter_prefix(python)
    if not any(prefix.is_relative_to(directory) for directory in SYSTEM_DIRS):
        args += ["--ro-bind", str(prefix), str(prefix)]
    args += ["--ro-bind", str(PACKAGE_DIR), INSIDE_PACKAGE_DIR]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMP_SIZE_BYTES), "--tmpfs", "/tmp"]
    args += ["--size", str(SHM_SIZE_BYTES), "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--remount-ro", "/"]
    args += ["--chdir", "/tmp", os.path.realpath(python), "-I", f"{INSIDE_PACKAGE_DIR}/worker.py"]
    return tuple(args)


def probe_bwrap(python: str) -> str | None:
    """None when bwrap can start `python` here, else why not."""
    if os.environ.get("CORRGRPO_SANDBOX_BWRAP", "1") == "0":
        return "disabled by CORRGRPO_SANDBOX_BWRAP=0"
    return probe_bwrap_once(python)


@functools.cache
def probe_bwrap_once(python: str) -> str | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap not found on PATH"
    command = [*bwrap_prefix(bwrap, python)[:-1], "-c", "import os; assert not os.path.exists('/work')"]
    try:
        run = subprocess.run(command, env={}, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap probe failed: {error}"
    if run.returncode != 0:
        return f"bwrap probe exited {run.returncode}: {run.stderr.decode(errors='replace').strip()[-300:]}"
    return None


def resolve_launcher(python: str, allow_fallback: bool) -> Launcher:
    problem = probe_bwrap(python)
    if problem is None:
        bwrap = shutil.which("bwrap")
        assert bwrap is not None
        if os.geteuid() == 0:
            log.warning(
                "corrgrpo_sandbox runs as uid 0: the kernel ignores RLIMIT_NPROC, fork bombs are bounded by the wall timeout only"
            )
        return Launcher("bwrap", bwrap_prefix(bwrap, python), True, ("/tmp", "/dev/shm"))
    if not allow_fallback:
        raise RuntimeError(f"bubblewrap sandbox unavailable ({problem}) and allow_fallback=False")
    message = (
        f"corrgrpo_sandbox: UNSANDBOXED FALLBACK ({problem}): untrusted code runs with rlimits and a process group only, "
        "with the service's uid, file system and network"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning(message)
    return Launcher(f"fallback: {problem}", (os.path.realpath(python), "-I", str(PACKAGE_DIR / "worker.py")), False, ("",))
