"""The `docker` isolation: each warm worker runs in its own locked-down container (hosts without bubblewrap).

`docker run -i` carries the worker protocol over the container's stdin/stdout. The worker (`worker/`, mounted
read-only) is the container's PID 1, so it is alone in its PID and IPC namespaces as under bwrap, and accounts
its children's CPU by rusage + /proc (no cgroups of its own inside the container). The container: no network,
read-only root, no capabilities, no-new-privileges, pids and memory limits, a non-root uid of its own, tmpfs
scratch, an empty environment. The Docker SDK for Python checks the engine and the image and removes
containers a dead service left behind (by label); `docker run` (the CLI) starts each worker. Settings
(environment, read when the launcher is made): CORRGRPO_SANDBOX_DOCKER_IMAGE (an image with python3 >= 3.10,
default the services' base image), CORRGRPO_SANDBOX_DOCKER_MEMORY_MB (default 2048),
CORRGRPO_SANDBOX_DOCKER_PIDS (default 256).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
from collections.abc import Callable

from corrgrpo_sandbox.isolation import (
    INSIDE_PACKAGE_DIR,
    PACKAGE_DIR,
    SANDBOX_ENV,
    SHM_SIZE_BYTES,
    TMP_SIZE_BYTES,
    IsolationUnavailable,
    Launcher,
    log,
    register_launcher,
)

DEFAULT_IMAGE = "python:3.11.7-slim-bookworm"
LABEL = "corrgrpo.sandbox"  # value: "<hostname>:<pid>" of the process that started the worker
CLIENT_ENV = (
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "HOME",
    "PATH",
)


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def remove_leftovers(client: object) -> int:
    """Remove worker containers whose starting process (on this host) is gone. Returns how many."""
    import docker

    removed = 0
    host = socket.gethostname()
    listed = client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)  # type: ignore[attr-defined]
    for container in listed:
        name, _, pid = container.labels.get(LABEL, "").rpartition(":")
        if name == host and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                container.remove(force=True)
            except docker.errors.APIError as error:  # gone or going already (`--rm`, `docker_stop`)
                if error.status_code not in (404, 409):
                    raise
            removed += 1
    return removed


# Each worker container gets its own uid, 2000000 + the pid of its `docker run` client (unique among live
# processes on this host): RLIMIT_NPROC counts processes per uid across the host (no user namespace), so with
# one shared uid a program forking in one container would make a neighbour's fork fail in another.
UID_BASE = 2_000_000
WITH_OWN_UID = (
    'u=$((UID_BASE + $$)); docker=$1; shift; exec "$docker" run --user "$u:$u" --name "NAME_PREFIX$$" '
    '--tmpfs "/tmp:rw,nosuid,nodev,size=TMP_SIZE,mode=700,uid=$u,gid=$u" '
    '--tmpfs "/dev/shm:rw,nosuid,nodev,size=SHM_SIZE,mode=700,uid=$u,gid=$u" "$@"'
)


def docker_head(memory_mb: int, pids: int) -> tuple[str, ...]:
    """`docker run` options before the mounts of preloaded files (`docker_seal` follows them)."""
    docker = shutil.which("docker")
    if docker is None:
        raise IsolationUnavailable("the docker CLI is not on PATH")
    # the scratch tmpfs belong to the worker's uid: it resets their modes after every run
    script = WITH_OWN_UID.replace("UID_BASE", str(UID_BASE)).replace("NAME_PREFIX", name_prefix())
    script = script.replace("TMP_SIZE", str(TMP_SIZE_BYTES)).replace("SHM_SIZE", str(SHM_SIZE_BYTES))
    args = ["/bin/sh", "-c", script, "corrgrpo-docker-worker", docker]
    args += ["-i", "--rm", "--pull", "never", "--log-driver", "none", "--label", f"{LABEL}={owner()}"]
    args += ["--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    args += ["--pids-limit", str(pids), "--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m"]
    return (*args, "-v", f"{PACKAGE_DIR}:{INSIDE_PACKAGE_DIR}:ro")


def name_prefix() -> str:
    """Worker containers are named this plus the pid of their `docker run` client (unique on this host)."""
    return f"corrgrpo-sandbox-{socket.gethostname()}-"


def docker_stop(docker: str, environment: dict[str, str]) -> Callable[[int], None]:
    """Remove the container of the client `pid`: killing the client leaves its container, and a run, going.
    Through the CLI that started it, in its environment: the SDK's `from_env` ignores DOCKER_CONTEXT."""

    def stop(pid: int) -> None:
        argv = [docker, "rm", "-f", f"{name_prefix()}{pid}"]
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # remove_leftovers retries at start
            subprocess.run(argv, env=environment, capture_output=True, timeout=60, check=False)

    return stop


def docker_mount(host: str, inside: str) -> tuple[str, ...]:
    return ("-v", f"{host}:{inside}:ro")


def docker_seal(image: str) -> tuple[str, ...]:
    """The rest of `docker run`, up to and including the image; `env -i` gives the worker an empty
    environment."""
    environment = (f"{name}={value}" for name, value in SANDBOX_ENV.items())
    return ("--workdir", "/tmp", "--entrypoint", "/usr/bin/env", image, "-i", *environment)


@functools.cache
def docker_launcher(python: str, packages: tuple[str, ...] = ()) -> Launcher:
    """Check engine and image with the SDK, clear leftovers; `python` (the host's) is not used inside, and a
    run imports the image's packages, not the caller's `packages`."""
    try:
        import docker
    except ImportError as error:
        raise IsolationUnavailable(
            "the Docker SDK for Python is missing: pip install 'corrgrpo-sandbox[docker]'"
        ) from error
    image = os.environ.get("CORRGRPO_SANDBOX_DOCKER_IMAGE", DEFAULT_IMAGE)
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        client.images.get(image)
        remove_leftovers(client)
    except docker.errors.ImageNotFound as error:
        raise IsolationUnavailable(f"image {image} is not on the engine: docker pull {image}") from error
    except docker.errors.DockerException as error:
        raise IsolationUnavailable(f"no Docker engine answers: {error}") from error
    finally:
        if "client" in locals():
            client.close()
    memory_mb = int(os.environ.get("CORRGRPO_SANDBOX_DOCKER_MEMORY_MB", "2048"))
    pids = int(os.environ.get("CORRGRPO_SANDBOX_DOCKER_PIDS", "256"))
    log.warning(
        "corrgrpo_sandbox: docker workers see the image's files through the host's page cache: a run can "
        "make a cold page resident and a later run see it (bits between runs; the sandbox README, 'The page "
        "cache')"
    )
    environment = {name: os.environ[name] for name in CLIENT_ENV if name in os.environ}
    return Launcher(
        "docker",
        docker_head(memory_mb, pids),
        ("python3", "-I", f"{INSIDE_PACKAGE_DIR}/worker/__main__.py"),
        namespaced=True,
        scratch=("/tmp", "/dev/shm"),
        mount=docker_mount,
        seal=docker_seal(image),
        cgroups=False,  # the container's processes are the engine's children, not the CLI's
        stdio=True,
        environment=environment,
        stop=docker_stop(shutil.which("docker") or "docker", environment),
    )


register_launcher("docker", docker_launcher)
