"""Cross-run channels in a warm worker (issue 37, item 1): what one run leaves in the namespaces its worker
keeps, a later run of another program on that worker must not find.

The attack that was found: a run that solves a problem slowly closes ~20 loopback TCP connections whose source
addresses and ports carry its answers; they stay in TIME_WAIT, listed in /proc/net/tcp for a minute, and a
later run of a different program answers from them at once. Each writer here leaves a secret in one kind of
namespaced state (TCP over IPv4 and IPv6, UDP, the namespace's packet counters, unix sockets in flight); a
reader run must then see exactly what it saw before the writer ran. One worker, so both run in the same
namespaces.

Runs under bwrap here, and under docker too where `make compose-test` sets CORRGRPO_TEST_DOCKER=1.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from corrgrpo_sandbox import Limits, Sandbox

NETWORK_TABLES = (
    "tcp",
    "tcp6",
    "udp",
    "udp6",
    "raw",
    "raw6",
    "unix",
    "snmp",
    "snmp6",
    "netstat",
    "dev",
    "sockstat",
)

# What a later run can read of its network namespace. sockstat's `alloc`, `mem` and `orphan` count the whole
# host's sockets (the kernel keeps them global, not per namespace); its `used` drops to 0 only an RCU grace
# period after bwrap's netlink socket (it brings up lo) is closed.
READER = f"""
import json, re
seen = {{}}
for name in {NETWORK_TABLES!r}:
    try:
        with open("/proc/net/" + name) as table:
            seen[name] = re.sub(r" (alloc|mem|orphan|used) \\d+", "", table.read())
    except OSError as error:
        seen[name] = type(error).__name__
print(json.dumps(seen))
"""

# Each writer reports which of its sockets the kernel let it create (none may be).
PRELUDE = """
import json, socket
made = []
def attempt(name, family, kind=socket.SOCK_STREAM):
    try:
        made.append(name)
        return socket.socket(family, kind)
    except OSError:
        made.remove(name)
        return None
"""
WRITERS = {
    # the found attack: the secret in the source address and port of a connection closed from this side
    "tcp time-wait": """
server = attempt("tcp listener", socket.AF_INET)
if server:
    server.bind(("127.0.0.1", 0)); server.listen()
    for chunk, secret in enumerate((42, 17, 99)):
        client = attempt("tcp client", socket.AF_INET)
        client.bind((f"127.{secret}.{chunk}.1", 40000 + chunk)); client.connect(server.getsockname())
        accepted, _ = server.accept(); client.close(); accepted.close()
""",
    "tcp6 time-wait": """
server = attempt("tcp6 listener", socket.AF_INET6)
if server:
    server.bind(("::1", 0)); server.listen()
    client = attempt("tcp6 client", socket.AF_INET6)
    client.bind(("::1", 40042)); client.connect(server.getsockname()[:2])
    accepted, _ = server.accept(); client.close(); accepted.close()
""",
    # a UDP socket ends with its process, but the datagrams it sent are counted in snmp and on lo
    "udp counters": """
receiver = attempt("udp", socket.AF_INET, socket.SOCK_DGRAM)
sender = attempt("udp6", socket.AF_INET6, socket.SOCK_DGRAM)
if receiver:
    receiver.bind(("127.0.0.1", 0))
    for _ in range(42):
        receiver.sendto(b"x", receiver.getsockname())
if sender:
    sender.sendto(b"x" * 42, ("::1", 9))
""",
    "other families": """
families = (("AF_NETLINK", 3), ("AF_PACKET", 3), ("AF_KEY", 3), ("AF_VSOCK", 5), ("AF_TIPC", 5))
for name, kind in (*families, ("AF_ALG", 5)):
    if hasattr(socket, name):  # 3 raw, 5 seqpacket
        attempt(name, getattr(socket, name), kind)
""",
    # two unix sockets each sent over the other: no process holds them, the kernel keeps them for its
    # collector
    "unix sockets in flight": """
import array
first = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
second = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
first.bind(b"\\0secret-42"); second.bind(b"\\0secret-17")
fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [first.fileno(), second.fileno()]))]
first.sendmsg([b"x"], fds, 0, b"\\0secret-17"); second.sendmsg([b"x"], fds, 0, b"\\0secret-42")
""",
}


def observe(sandbox: Sandbox, reader: str) -> dict[str, Any]:
    """What a clean run of `reader` sees, printed as JSON."""
    result = sandbox.run(reader, limits=Limits(output_bytes=1 << 20))
    assert result.exit_code == 0 and result.anomaly is None, result
    return json.loads(result.stdout)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_run_leaves_nothing_in_the_network_namespace(one_worker: Sandbox, writer: str) -> None:
    before = observe(one_worker, READER)
    result = one_worker.run(PRELUDE + WRITERS[writer] + "print(json.dumps(made))", limits=Limits(wall_s=5))
    after = observe(one_worker, READER)
    assert {name: text for name, text in after.items() if text != before[name]} == {}
    # the writer may be an anomaly (its worker then replaced): what matters is what the next run saw
    if result.anomaly is None:
        assert result.exit_code == 0, result
        assert json.loads(result.stdout) == [], f"the kernel let the run create: {result.stdout.decode()}"


def test_unix_sockets_still_work(one_worker: Sandbox) -> None:
    """What multiprocessing and asyncio need (a unix socket pair, a bound unix socket) is still allowed."""
    source = """
import asyncio, multiprocessing, socket
left, right = multiprocessing.Pipe()
left.send("pipe")
named = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
named.bind("listener")
named.sendto(b"named", "listener")
print(right.recv(), named.recv(16).decode(), asyncio.run(asyncio.sleep(0, "loop")))
"""
    result = one_worker.run(source)
    assert (result.exit_code, result.anomaly, result.stdout) == (0, None, b"pipe named loop\n"), result


# What a later run can read of its worker (pid 1, its namespace's init) and of the pid counter.
WORKER_READER = """
import json, os
seen = {"pid": os.getpid(), "last pid": open("/proc/loadavg").read().split()[-1]}
for directory in ("/proc/1", "/proc/1/task/1"):
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        try:
            with open(f"{directory}/{name}", "rb") as entry:
                seen[f"{directory}/{name}"] = entry.read(4096).decode(errors="replace")
        except OSError as error:
            seen[f"{directory}/{name}"] = type(error).__name__
print(json.dumps(seen))
"""
# A writer that makes its worker's counters grow by what it wants to tell: page faults (counted to the worker
# when it reaps the run), CPU time, wake-ups of the worker (outputs spread over time).
COUNTER_WRITER = """
import mmap, time
memory = mmap.mmap(-1, 42 << 20)
memory.write(b"x" * (42 << 20))
for _ in range(5):
    print("x", flush=True)
    time.sleep(0.03)
"""
# Writers that start `k` processes or threads: the pid counter would tell the next run k.
FORKS = "import os\nfor _ in range({k}):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\n"
THREAD = "import threading\nthread = threading.Thread(target=print)\nthread.start()\nthread.join()\n"


def test_the_workers_counters_do_not_tell_of_earlier_runs(one_worker: Sandbox) -> None:
    """The worker's /proc entry (stat, status, schedstat, its children) grew with each run it served."""
    if one_worker.isolation == "docker":
        pytest.xfail(
            "docker mounts /proc itself: the worker's entry cannot be hidden (see sandbox/README.md)"
        )
    before = observe(one_worker, WORKER_READER)
    assert one_worker.run(COUNTER_WRITER).exit_code == 0
    after = observe(one_worker, WORKER_READER)
    changed = {name for name, value in after.items() if value != before.get(name)}
    assert changed == {"pid", "last pid"}, sorted(changed)


@pytest.mark.parametrize("writer", ["", FORKS.format(k=1), THREAD], ids=["nothing", "one fork", "one thread"])
def test_the_pid_counter_does_not_tell_what_a_run_started(one_worker: Sandbox, writer: str) -> None:
    """The next run's pid is the same whether the run before it started nothing, a process or a thread."""
    first = observe(one_worker, WORKER_READER)
    assert one_worker.run(writer + "print('done')").stdout.endswith(b"done\n")
    second = observe(one_worker, WORKER_READER)
    reference = one_worker.run("")
    assert reference.exit_code == 0
    third = observe(one_worker, WORKER_READER)
    assert (second["pid"] - first["pid"], second["last pid"]) == (
        third["pid"] - second["pid"],
        str(second["pid"]),
    )


def test_a_run_that_started_more_leaves_a_fresh_worker(one_worker: Sandbox) -> None:
    """Past the allowance the worker is replaced: the next run sees a new worker's counter, not the run's
    count."""
    with Sandbox("pool", workers=1, isolation=one_worker.isolation) as new:
        fresh = observe(new, WORKER_READER)["pid"]
    observe(one_worker, WORKER_READER)  # the worker has served runs: its counter is past a fresh one's
    result = one_worker.run(FORKS.format(k=5) + "print('done')")
    assert (result.exit_code, result.stdout, result.anomaly) == (0, b"done\n", None)
    assert observe(one_worker, WORKER_READER)["pid"] == fresh


# What a later run can read in its own new files and IPC objects, and in the files of the sandbox.
NUMBERS_READER = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
seen = {"cwd": os.stat(".").st_ino, "sandbox files": sorted(os.listdir("/opt"))}
for directory in ("/tmp", "/dev/shm"):
    with open(f"{directory}/probe", "w") as probe:
        seen[directory] = os.fstat(probe.fileno()).st_ino
# key 0: IPC_PRIVATE
seen["SysV ids"] = [libc.shmget(0, 4096, 0o1600), libc.semget(0, 1, 0o1600), libc.msgget(0, 0o1600)]
print(json.dumps(seen))
"""
NUMBERS_WRITERS = {
    # two files: within what any run may take; every later number is where it would be had the run made none
    "two files": "open('/tmp/a', 'w').close()\nopen('/dev/shm/b', 'w').close()\n",
    "SysV objects": (
        "import ctypes\nlibc = ctypes.CDLL(None)\nfor _ in range(7):\n    libc.shmget(0, 4096, 0o1600)\n"
    ),
    # the worker's cgroup CPU counter used to be a file in the sandbox (/opt/corrgrpo_cpuacct.usage)
    "CPU time": (
        "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.2:\n    pass\n"
    ),
}


@pytest.mark.parametrize("writer", list(NUMBERS_WRITERS))
def test_numbers_a_run_is_given_do_not_tell_of_earlier_runs(one_worker: Sandbox, writer: str) -> None:
    """Inode numbers of the scratch mounts and SysV IPC ids count what the namespace ever made."""
    first = observe(one_worker, NUMBERS_READER)
    assert one_worker.run(NUMBERS_WRITERS[writer]).exit_code == 0
    second = observe(one_worker, NUMBERS_READER)
    assert one_worker.run("").exit_code == 0  # a run that makes nothing
    third = observe(one_worker, NUMBERS_READER)
    steps = [
        {name: value - before[name] for name, value in after.items() if isinstance(value, int)}
        for before, after in ((first, second), (second, third))
    ]
    assert steps[0] == steps[1]
    assert first["SysV ids"] == [-1, -1, -1] and first["sandbox files"] == ["corrgrpo_sandbox"]


def test_a_run_that_made_many_files_leaves_a_fresh_worker(one_worker: Sandbox) -> None:
    with Sandbox("pool", workers=1, isolation=one_worker.isolation) as new:
        fresh = observe(new, NUMBERS_READER)
    observe(one_worker, NUMBERS_READER)
    result = one_worker.run("for i in range(50):\n    open(f'/tmp/{i}', 'w').close()\nprint('done')")
    assert (result.exit_code, result.stdout, result.anomaly) == (0, b"done\n", None)
    assert observe(one_worker, NUMBERS_READER) == fresh
