"""The shapes the sandbox and the code service are deployed in, made on one machine (issue 48).

- `bwrap-root`: as the test's user (root here and in CI), with the host's cgroup v1 counters if any.
- `bwrap-uid10001`: as the images' uid 10001: bwrap in an unprivileged user namespace, no cgroup it may write.
- `bwrap-cgroup2`: as root in a private mount namespace where /sys/fs/cgroup is the unified (v2) hierarchy
  alone, as on a cgroup v2 host: no v1 counter to find.

`shape_argv` runs a command in a shape; making the last two needs root (a mount namespace, another uid).
`code_service` starts the code service in one of them or in `docker` (`CORRGRPO_CODE_ISOLATION=docker`).
tests/sandbox runs sandboxes in them; tests/security/test_shapes.py and tests/reliability the code service, in
the shapes `CORRGRPO_TEST_SHAPES` names (`chosen_shapes`).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from .servers import SERVICE_PYTHON, ServiceProcess, free_port, start_service

SHAPES = ("bwrap-root", "bwrap-uid10001", "bwrap-cgroup2")
LOCAL_SHAPES = (*SHAPES, "docker")  # the code service as a process of this machine
IMAGE_UID = 10001  # deploy/docker/service.Dockerfile's USER
# pyenv keeps the interpreter under /root, which other uids cannot enter: the private mount namespace shows
# that directory as an empty tmpfs holding only the interpreter's prefix, where an image's uid can read it
OPEN_PREFIX = (
    'set -e; staging=$(mktemp -d); mount --bind "$1" "$staging"; mount -t tmpfs -o mode=755 tmpfs "$2"; '
    'mkdir -p "$1"; mount --move "$staging" "$1"; shift 2; exec "$@"'
)
UNIFIED_ONLY = 'set -e; umount -R /sys/fs/cgroup; mount -t cgroup2 cgroup2 /sys/fs/cgroup; exec "$@"'


def fail_or_skip(message: str) -> None:
    """A shape this machine cannot make: skipped locally, a failure under CI (where every shape must run)."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def closed_ancestor(path: Path) -> Path | None:
    """The outermost directory above `path` that other users cannot enter, if any."""
    closed = (parent for parent in reversed(path.parents) if not parent.stat().st_mode & stat.S_IXOTH)
    return next(closed, None)


def shape_argv(shape: str, argv: list[str]) -> list[str]:
    """`argv` as run in `shape` (one of SHAPES)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
    if shape != "bwrap-root" and os.geteuid() != 0:
        fail_or_skip(f"making the shape {shape} needs root")
    if shape == "bwrap-root":
        return argv
    if shape == "bwrap-cgroup2":
        return ["unshare", "--mount", "--", "sh", "-c", UNIFIED_ONLY, "sh", *argv]
    as_image_user = ["setpriv", f"--reuid={IMAGE_UID}", f"--regid={IMAGE_UID}", "--clear-groups", "--", *argv]
    prefix = Path(sys.base_prefix).resolve()
    closed = closed_ancestor(prefix)
    if closed is None:
        return as_image_user
    opened = ["sh", "-c", OPEN_PREFIX, "sh", str(prefix), str(closed)]
    return ["unshare", "--mount", "--", *opened, *as_image_user]


def chosen_shapes() -> list[str]:
    """The shapes `CORRGRPO_TEST_SHAPES` (comma-separated) names; by default SHAPES, which need no engine."""
    chosen = os.environ.get("CORRGRPO_TEST_SHAPES", ",".join(SHAPES))
    return [name.strip() for name in chosen.split(",") if name.strip()]


@contextmanager
def code_service(shape: str, env: dict[str, str], port: int | None = None) -> Iterator[ServiceProcess]:
    """`python -m corrgrpo_code` in `shape` (one of LOCAL_SHAPES), `env` over this process's, on `port` (a
    free one by default) until the `with` ends; a shape that cannot start skips locally, fails under CI."""
    if shape == "docker":
        with ExitStack() as stack:
            try:
                service = stack.enter_context(
                    start_service("code", env={**env, "CORRGRPO_CODE_ISOLATION": "docker"}, port=port)
                )
            except RuntimeError as error:  # it refused to start (no engine, no image)
                fail_or_skip(f"the code service did not start in shape docker: {error}")
            yield service
        return
    port = port or free_port()
    log_path = f"/tmp/corrgrpo-code-{port}.log"
    argv = [SERVICE_PYTHON, "-m", "corrgrpo_code", "--host", "127.0.0.1", "--port", str(port)]
    full_env = {**os.environ, "CORRGRPO_LOG_JSON": "true", **env, "CORRGRPO_CODE_ISOLATION": "bwrap"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            shape_argv(shape, argv),
            env={**full_env, "HOME": "/nonexistent"},
            cwd="/",
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    service = ServiceProcess("code", f"http://127.0.0.1:{port}", process, log_path)
    try:
        service.wait_healthy(60)
        yield service
    except BaseException:
        sys.stderr.write(service.log()[-4000:])
        raise
    finally:
        service.stop()
        Path(log_path).unlink(missing_ok=True)
