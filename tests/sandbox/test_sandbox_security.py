"""Issue 14 (sandbox part), against the real sandbox with bwrap: CPU of every process counts and is capped
over the whole tree (14.2, 14.3), nothing of a run survives into the next one (14.5), no isolation means no
run unless asked for by an unsafe name (14.7). Each test failed on the code before these fixes."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from corrgrpo_sandbox import ExecResult, IsolationUnavailable, Limits, Sandbox
from corrgrpo_sandbox.cgroups import cgroup_parents

pytestmark = pytest.mark.usefixtures("require_bwrap")


def busy(seconds: float, indent: str) -> str:
    """Source that burns `seconds` of CPU, indented for a block."""
    return (
        f"{indent}end = time.process_time() + {seconds}\n{indent}while time.process_time() < end:\n"
        f"{indent}    pass"
    )


@pytest.fixture
def one_worker() -> Iterator[Sandbox]:
    """A single warm worker, so consecutive runs surely share it."""
    with Sandbox("pool", workers=1) as sandbox:
        yield sandbox


def only_worker_remains(sandbox: Sandbox) -> bool:
    """Inside the PID namespace: the worker as init (1) and the process asking."""
    result = sandbox.run("import os\nprint(sum(p.isdigit() for p in os.listdir('/proc')))")
    return result.stdout == b"2\n"


# 14.2: efficiency faked by forking

GRANDCHILD_DOES_THE_WORK = f"""
import os, signal, time
if {{ignore_sigchld}}:
    try:  # children would be reaped by the kernel, their CPU lost: nobody would ever wait for them
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    except PermissionError:
        print("refused")
ready, done = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:  # the grandchild, orphaned at once, works
{busy(0.6, " " * 8)}
        os.write(done, b"x")
    os._exit(0)
os.read(ready, 1)  # the child waits on a pipe, not on a process
print("done")
"""


@pytest.mark.parametrize("ignore_sigchld", [False, True], ids=["orphan", "auto-reaped"])
def test_cpu_of_a_grandchild_counts(pool_sandbox: Sandbox, ignore_sigchld: bool) -> None:
    """In every shape (test_guarantees_by_shape): ignoring SIGCHLD is refused, no CPU leaves with a child."""
    result = pool_sandbox.run(
        GRANDCHILD_DOES_THE_WORK.format(ignore_sigchld=ignore_sigchld), limits=Limits(wall_s=30)
    )
    stdout = b"refused\ndone\n" if ignore_sigchld else b"done\n"
    assert (result.exit_code, result.stdout, result.anomaly) == (0, stdout, None)
    assert result.cpu_s >= 0.5, result  # it reported ~0.01 s: only the direct child's own time


def test_descendants_share_one_cpu_budget(pool_sandbox: Sandbox) -> None:
    """Each forked process had a fresh RLIMIT_CPU: three children burnt 1 s each and the run 'passed'."""
    source = "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        while True:\n            pass\n"
    source += "for _ in range(3):\n    os.wait()\n"
    result = pool_sandbox.run(source, limits=Limits(cpu_s=1, wall_s=60))
    assert result.timed_out and result.exit_code is None, result
    # the tree's cap is what one process gets (RLIMIT_CPU hard limit: 2 s); generous for a loaded machine
    assert 1.5 <= result.cpu_s <= 4.0, result
    assert result.wall_s < 30
    assert only_worker_remains(pool_sandbox) and only_worker_remains(pool_sandbox)


# 14.3: one item's processes cannot take another item's CPU

SETSID_BUSY_LOOPS = """
import os, time
for _ in range(12):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
time.sleep(300)
"""


def test_a_dozen_setsid_busy_loops_are_capped_killed_and_counted() -> None:
    neighbour_source = f"import time\n{busy(0.3, '')}\nprint('neighbour done')"
    results: dict[str, ExecResult] = {}
    with Sandbox("pool", workers=2) as sandbox:
        hog = threading.Thread(
            target=lambda: results.update(
                hog=sandbox.run(SETSID_BUSY_LOOPS, limits=Limits(cpu_s=1, wall_s=120))
            )
        )
        hog.start()
        time.sleep(0.3)  # the busy loops are running
        results["neighbour"] = sandbox.run(neighbour_source, limits=Limits(cpu_s=5, wall_s=60))
        hog.join()
        assert only_worker_remains(sandbox) and only_worker_remains(sandbox)
    neighbour, hog_result = results["neighbour"], results["hog"]
    assert (neighbour.exit_code, neighbour.timed_out, neighbour.anomaly) == (0, False, None), neighbour
    assert neighbour.stdout == b"neighbour done\n"
    # its children were killed at the tree's cap (2 s of CPU in all), long before the 120 s wall limit, and
    # their CPU is the hog's: before, it read ~0 s while the children burnt 12 x 1-2 s
    assert hog_result.timed_out and hog_result.anomaly is None, hog_result
    assert 1.5 <= hog_result.cpu_s <= 5.0 and hog_result.wall_s < 60, hog_result


FORK_40 = (
    "import os, time\nforked = 0\nfor _ in range(40):\n    try:\n        if os.fork() == 0:\n"
    "            time.sleep(60)\n        forked += 1\n    except OSError:\n        pass\nprint(forked)"
)


def test_the_process_limit_holds_for_root() -> None:
    """The kernel ignores RLIMIT_NPROC for uid 0 (a root service's sandbox): 40 forks all succeeded."""
    if "pids" not in cgroup_parents():
        pytest.skip("no writable cgroup v1 pids controller here: RLIMIT_NPROC only (see README)")
    with Sandbox("pool", workers=1) as sandbox:
        result = sandbox.run(FORK_40, limits=Limits(processes=8))
        assert result.exit_code == 0 and int(result.stdout) == 7, result  # the child itself is the 8th
        assert int(sandbox.run(FORK_40).stdout) == 15  # the limit follows each run's Limits.processes (16)
        assert only_worker_remains(sandbox)


def test_a_request_queued_behind_a_run_leaves_it_its_process_limit() -> None:
    """A worker holds the next request while it runs one (`QUEUE_DEPTH`); the pids limit is the worker's, so a
    request with another limit waits until the run is over, instead of lifting the run's limit under it."""
    if "pids" not in cgroup_parents():
        pytest.skip("no writable cgroup v1 pids controller here: RLIMIT_NPROC only (see README)")
    with Sandbox("pool", workers=1) as sandbox, ThreadPoolExecutor(1) as thread:
        limited = thread.submit(
            sandbox.run, "import time\ntime.sleep(1.0)\n" + FORK_40, limits=Limits(processes=8)
        )
        time.sleep(0.5)  # the run sleeps before it forks
        assert sandbox.run("print('next')", limits=Limits(processes=16)).stdout == b"next\n"
        assert int(limited.result().stdout) == 7
        assert only_worker_remains(sandbox)


# 14.5: IPC and leftovers between runs

SYSV_AND_POSIX_IPC = """
import ctypes, ctypes.util, json, os
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
rt.mq_open.restype = ctypes.c_int
libc.shmat.restype = ctypes.c_void_p
found = {}
shm = libc.shmget(0x5EC12E7, 1 << 20, 0o1666 if CREATE else 0o666)  # IPC_CREAT = 0o1000
found["shm"] = shm >= 0
if shm >= 0:
    address = libc.shmat(shm, None, 0)
    if CREATE:
        ctypes.memmove(address, b"secret-in-shm", 13)
    found["shm_text"] = ctypes.string_at(address, 13).decode(errors="replace")
found["sem"] = libc.semget(0x5EC12E8, 1, 0o1666 if CREATE else 0o666) >= 0
found["msg"] = libc.msgget(0x5EC12E9, 0o1666 if CREATE else 0o666) >= 0
found["mq"] = rt.mq_open(b"/corrgrpo-left-over", os.O_RDWR | (os.O_CREAT if CREATE else 0), 0o666, None) >= 0
found["tables"] = [
    len(open(f"/proc/sysvipc/{kind}").read().splitlines()) - 1 for kind in ("shm", "sem", "msg")
]
print(json.dumps(found))
"""


def test_ipc_objects_do_not_outlive_their_run(one_worker: Sandbox) -> None:
    """SysV IPC is refused (seccomp: its ids counted every object the namespace made, and segments outlived
    their run and the memory limit); a POSIX message queue is wiped with /dev/mqueue."""
    created = one_worker.run("CREATE = True\n" + SYSV_AND_POSIX_IPC)
    assert created.exit_code == 0, created.stderr
    assert json.loads(created.stdout) == {
        "shm": False,
        "sem": False,
        "msg": False,
        "mq": True,
        "tables": [0, 0, 0],
    }
    later = one_worker.run("CREATE = False\n" + SYSV_AND_POSIX_IPC)
    assert later.exit_code == 0, later.stderr
    assert json.loads(later.stdout) == {
        "shm": False,
        "sem": False,
        "msg": False,
        "mq": False,
        "tables": [0, 0, 0],
    }


def test_locked_directories_are_wiped(one_worker: Sandbox) -> None:
    source = """
import os
for top in ("/tmp", "/dev/shm", "."):
    os.makedirs(f"{top}/locked/inner")
    open(f"{top}/locked/inner/answers.txt", "w").write("left over")
    os.chmod(f"{top}/locked/inner", 0)
    os.chmod(f"{top}/locked", 0)
os.chmod("/dev/shm", 0)
"""
    assert one_worker.run(source).exit_code == 0
    listing = (
        "import os\n"
        "print([sorted(os.listdir(d)) for d in ('.', '/tmp', '/dev/shm')], os.access('/dev/shm', os.W_OK))"
    )
    result = one_worker.run(listing)
    assert result.stdout == b"[[], ['work'], []] True\n", result.stdout


MEMORY_SCAN = """
import hashlib, json, re
# the secret, or base64 of it (of "CORRGRPOSECR..."); the pattern does not match itself
pattern = re.compile(rb"CORRGRPOSECRET[0-9a-f]{32}|Q09SUkdSUE9TRUNS[A-Za-z0-9+/]{40}")
digests = set()
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as memory:
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        start, end = (int(value, 16) for value in span.split("-"))
        try:
            memory.seek(start)
            data = memory.read(end - start)
        except (OSError, OverflowError, ValueError):
            continue
        digests.update(hashlib.sha256(match).hexdigest() for match in pattern.findall(data))
print(json.dumps(sorted(digests)))
"""


def test_no_run_finds_a_previous_runs_program_or_data_in_memory(one_worker: Sandbox) -> None:
    """The warm worker used to read every program, input and output into its heap; each child is a copy.
    Outputs of several sizes: a copy of one left in the worker's heap survives or not by the allocator's size
    classes."""
    secret = f"CORRGRPOSECRET{secrets.token_hex(16)}".encode()
    own = one_worker.run(f"ANSWER = {secret.decode()!r}\n" + MEMORY_SCAN)  # the scan finds what is there
    assert hashlib.sha256(secret).hexdigest() in json.loads(own.stdout)
    # program, input, file and output hold it; the very next run scans
    for padding in (0, 300, 600, 1200, 5000):
        spilled = one_worker.run(
            f"import sys\nANSWER = {secret.decode()!r}\n"
            f"print(ANSWER, sys.stdin.read(), open('expected.txt').read(), 'x' * {padding})",
            stdin=secret,
            files={"expected.txt": secret},
        )
        assert spilled.stdout.count(secret) == 3
        later = one_worker.run(MEMORY_SCAN)
        assert later.exit_code == 0, later.stderr
        assert hashlib.sha256(secret).hexdigest() not in json.loads(later.stdout), (
            f"found after a {padding}-byte pad"
        )


def test_stdin_never_passes_through_the_childs_memory(one_worker: Sandbox) -> None:
    """Assert mode's judge reads the test from stdin after forking the candidate, so a copy of stdin left in
    the forking process's heap would be the candidate's to find: stdin is spliced from the request into its
    memfd. (Before, stdin came base64-encoded inside the JSON body, and its freed copies stayed in the
    heap.)"""
    secret = f"CORRGRPOSECRET{secrets.token_hex(16)}".encode()
    forked_scan = (
        f"import os, sys\nif os.fork() == 0:\n    os.close(0)\n    exec({MEMORY_SCAN!r})\n"
        "    sys.stdout.flush()\n    os._exit(0)\nos.wait()"
    )
    for copies in (10, 200, 1000, 2000, 5000):  # the old code left 1-2 copies at most of these sizes
        result = one_worker.run(forked_scan, stdin=secret * copies)
        assert (result.exit_code, json.loads(result.stdout)) == (0, []), f"{copies} copies: {result}"


# 14.7: no silent fallback


def test_no_isolation_refuses_with_instructions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = tmp_path / "python"  # another interpreter path: the probe is not answered from its cache
    python.symlink_to(os.path.realpath(sys.executable))
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(IsolationUnavailable, match="apt-get install bubblewrap") as refused:
        Sandbox("pool", workers=1, python=str(python))
    assert "unsafe-none" in str(refused.value) and "bwrap not found" in str(refused.value)
    if importlib.util.find_spec("corrgrpo_sandbox.docker_backend") is None:  # until the docker backend exists
        with pytest.raises(IsolationUnavailable, match="docker: not available"):
            Sandbox("pool", workers=1, isolation="docker")
    with pytest.raises(ValueError, match="isolation must be one of"):
        Sandbox("pool", workers=1, isolation="none")


def test_without_cgroups_the_tree_is_still_counted_and_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts without writable cgroup v1 (containers, cgroup v2 only): rusage of every reaped process +
    /proc."""
    monkeypatch.setattr("corrgrpo_sandbox.worker_handle.cgroup_parents", lambda: ())
    with Sandbox("pool", workers=1) as sandbox:
        assert all(worker.cgroup is None for worker in sandbox._pool.live)
        orphaned = sandbox.run(
            GRANDCHILD_DOES_THE_WORK.format(ignore_sigchld=False), limits=Limits(wall_s=30)
        )
        assert (orphaned.exit_code, orphaned.stdout) == (0, b"done\n") and orphaned.cpu_s >= 0.5, orphaned
        hog = sandbox.run(SETSID_BUSY_LOOPS, limits=Limits(cpu_s=1, wall_s=120))
        assert hog.timed_out and 1.5 <= hog.cpu_s <= 5.0 and hog.wall_s < 60, hog
        assert only_worker_remains(sandbox)
