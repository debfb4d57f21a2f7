"""The `docker` isolation against a real engine: the key abuse tests of the bwrap suite, with docker's layout.

Differences from bwrap that the expectations below state: the worker is the container's PID 1 (no bwrap init),
so a run sees two processes, and a candidate's SIGKILL to its parent is ignored by the kernel (PID 1 of a
namespace only gets signals it handles) instead of ending in an anomaly. The image's own empty /home, /var,
/run exist. Collected only with CORRGRPO_TEST_DOCKER=1 (tests/sandbox/conftest.py): `make compose-test` runs
it with an engine up, and no engine is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest

from corrgrpo_sandbox import IsolationUnavailable, Limits, Sandbox, docker_backend


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except docker.errors.DockerException as error:
        pytest.fail(f"no Docker engine answers: {error}")
    yield client
    client.close()


@pytest.fixture(scope="module")
def sandbox(engine: object) -> Iterator[Sandbox]:
    try:
        with Sandbox("pool", workers=2, isolation="docker") as sandbox:
            yield sandbox
    except IsolationUnavailable as error:
        pytest.fail(str(error))


def observe(sandbox: Sandbox, source: str) -> object:
    result = sandbox.run(source, limits=Limits(wall_s=20))
    assert result.exit_code == 0 and result.anomaly is None, result
    return json.loads(result.stdout)


def test_worker_containers_are_locked_down(sandbox: Sandbox, engine: object) -> None:
    label = f"{docker_backend.LABEL}={docker_backend.owner()}"
    deadline = time.monotonic() + 60
    while (
        len(containers := engine.containers.list(filters={"label": label})) < 2
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)  # workers start in the background
    assert len(containers) == 2
    users = {container.attrs["Config"]["User"] for container in containers}
    assert len(users) == 2, "one uid per worker: RLIMIT_NPROC counts per uid across containers"
    for container in containers:
        host = container.attrs["HostConfig"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in host["SecurityOpt"] and host["Privileged"] is False
        assert host["PidsLimit"] > 0 and host["Memory"] > 0 and set(host["Tmpfs"]) == {"/tmp", "/dev/shm"}
        uid = int(container.attrs["Config"]["User"].split(":")[0])
        assert uid >= docker_backend.UID_BASE and container.attrs["Config"]["User"] == f"{uid}:{uid}"


def test_no_network_no_writes_clean_environment_non_root(sandbox: Sandbox) -> None:
    source = """
import json, os, socket
seen = {"uid": os.getuid(), "env": sorted(os.environ), "writes": []}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    seen["net"] = "open"
except OSError as error:
    seen["net"] = error.errno
for path in ("/", "/usr", "/etc", "/opt/corrgrpo_sandbox"):
    try:
        open(os.path.join(path, "probe"), "w").close()
        seen["writes"].append(path)
    except OSError:
        pass
seen["procs"] = sum(p.isdigit() for p in os.listdir("/proc"))
print(json.dumps(seen))
"""
    seen = observe(sandbox, source)
    # EPERM: the seccomp filter refuses every socket but AF_UNIX (and there is only lo)
    assert seen["net"] == 1
    assert seen["writes"] == [] and seen["uid"] >= docker_backend.UID_BASE
    assert seen["env"] == ["HOME", "LANG", "PATH", "TMPDIR"]
    assert seen["procs"] == 2  # the worker (PID 1) and this child: no host process is visible


def test_fork_bomb_is_contained_and_cleaned_up(sandbox: Sandbox) -> None:
    result = sandbox.run(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        limits=Limits(cpu_s=2, wall_s=4),
    )
    assert result.timed_out and result.anomaly is None, result
    assert observe(sandbox, "import os\nprint(sum(p.isdigit() for p in os.listdir('/proc')))") == 2


def test_daemons_and_files_do_not_survive_the_run(sandbox: Sandbox) -> None:
    source = (
        "import os, time\nopen('/tmp/left', 'w').write('x')\nif os.fork() == 0:\n    os.setsid()\n"
        "    time.sleep(60)\n"
    )
    for _ in range(2):  # two workers: reach both
        assert sandbox.run(source).exit_code == 0
    for _ in range(2):
        listing = "import os, json\nprocs = sum(p.isdigit() for p in os.listdir('/proc'))\n"
        listing += "print(json.dumps([procs, os.listdir('/tmp'), os.listdir()]))"
        assert observe(sandbox, listing) == [2, ["work"], []]  # only this run's own empty cwd


def test_the_worker_cannot_be_killed_from_inside(sandbox: Sandbox) -> None:
    result = sandbox.run("import os\nos.kill(os.getppid(), 9)\nos.kill(1, 9)\n")
    assert result.exit_code == 0 and result.anomaly is None  # PID 1 ignores signals it has no handler for
    assert observe(sandbox, "print(1)") == 1


def test_memory_bomb_fails_inside_the_limit(sandbox: Sandbox) -> None:
    result = sandbox.run("x = bytearray(4 << 30)", limits=Limits(memory_mb=256))
    assert result.exit_code == 1 and b"MemoryError" in result.stderr and result.anomaly is None


def test_leftover_containers_of_a_dead_service_are_removed(engine: object) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    label = {docker_backend.LABEL: f"{docker_backend.socket.gethostname()}:{finished.pid}"}
    image = os.environ.get("CORRGRPO_SANDBOX_DOCKER_IMAGE", docker_backend.DEFAULT_IMAGE)
    leftover = engine.containers.create(image, ["sleep", "60"], labels=label)
    assert docker_backend.remove_leftovers(engine) >= 1
    with pytest.raises(docker.errors.NotFound):
        leftover.reload()


HOLD = (
    "import os, time\nfor _ in range(12):\n    if os.fork() == 0:\n        time.sleep(4)\n"
    "        os._exit(0)\ntime.sleep(4)\n"
)
FORK = (
    "import os\nfor _ in range(8):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\n"
    "print('forked')\n"
)


def test_a_neighbours_processes_do_not_count_against_a_run(sandbox: Sandbox) -> None:
    """RLIMIT_NPROC counts per uid across the host: with one uid for every worker, the 13 processes a run
    holds made the forks of a run in the other container fail (EAGAIN)."""
    limits = Limits(processes=16, wall_s=20)
    with ThreadPoolExecutor(2) as pool:
        holding = pool.submit(sandbox.run, HOLD, limits=limits)
        time.sleep(1.5)  # the first run holds its processes for 4 s
        forking = sandbox.run(FORK, limits=limits)
        assert not holding.done(), "the runs did not overlap: no evidence either way"
        assert holding.result().exit_code == 0
    assert forking.exit_code == 0 and forking.stdout == b"forked\n", forking


def test_a_preloaded_file_alone_of_its_tree_is_mounted_read_only(engine: object, tmp_path: Path) -> None:
    """One read-only `-v` per preloaded file: the worker imports it, a run cannot write it or see its
    folder."""
    (tmp_path / "greeting.py").write_text(
        "import os\nLOADED_IN = os.getpid()\n\ndef greet(name):\n    return f'hello {name}'\n"
    )
    # writable by any uid: only the read-only mount can refuse the write
    (tmp_path / "greeting.py").chmod(0o666)
    (tmp_path / "secret.txt").write_text("beside the module")
    program = (
        "import errno, json, os, sys\n"
        "preloaded = 'greeting' in sys.modules\n"
        "import greeting\n"
        "try:\n"
        "    open(greeting.__file__, 'a').write('X = 1\\n')\n"
        "    written = 'written'\n"
        "except OSError as error:\n"
        "    written = errno.errorcode[error.errno]\n"
        "print(json.dumps([preloaded, greeting.greet('run'), greeting.LOADED_IN != os.getpid(), "
        "greeting.__file__,\n"
        f"                  sorted(os.listdir('/opt/corrgrpo_preload')), os.path.exists({str(tmp_path)!r}), "
        f"written]))\n"
    )
    with Sandbox("pool", workers=1, isolation="docker", preload=[tmp_path / "greeting.py"]) as sandbox:
        seen = observe(sandbox, program)
    assert seen == [
        True,
        "hello run",
        True,
        "/opt/corrgrpo_preload/greeting.py",
        ["greeting.py"],
        False,
        "EROFS",
    ]
