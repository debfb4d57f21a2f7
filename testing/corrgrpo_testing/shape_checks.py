"""The code service's hostile-completion checks, one set of test bodies for every shape it ships in
(issue 48).

A test module subclasses `ShapeChecks` as `Test...` and provides a `shape` fixture (a `Shape`): the service's
URL in that shape (a proxy's route prefix included), the headers it needs (a bearer token) and its processes
on this machine. tests/security/test_shapes.py runs them in the local shapes and compose, tests/ray_serve in
Ray Serve. Problems carry a fresh id: nothing is answered from a cache. Only HTTP reaches the service.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest


@dataclass(frozen=True)
class Shape:
    name: str
    url: str  # where /v1/score and /readyz are served
    ready: dict[str, Any]  # its /readyz body
    processes: Callable[[], list[int]] = list  # the service's processes (replicas) on this machine, if any
    headers: dict[str, str] = field(default_factory=dict)  # on every request (a bearer token)


def score(shape: Shape, problem: dict[str, Any], *completions: str) -> list[dict[str, Any]]:
    """The results of `completions` (fenced) to `problem`, one request."""
    items = [{"completion": f"```python\n{code}\n```", "problem": problem} for code in completions]
    response = httpx.post(f"{shape.url}/v1/score", json={"items": items}, headers=shape.headers, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def fresh(**problem: Any) -> dict[str, Any]:
    return {"task_id": f"shapes/{uuid.uuid4().hex}", **problem}


ADD = {
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    "reference": "def add(a, b):\n    return a + b\n",
}
# What a candidate causes is its own failure, never an item error, and never its neighbour's.
FAULTS = {
    "nested-3k": ("x = " + "-" * 3000 + "1", "syntax", 0),  # RecursionError in the parent's parser
    "nested-6k": ("x = " + "-" * 6000 + "1", "syntax", 0),  # MemoryError (the parser's stack)
    # the worker handles no signal (bwrap: its namespace's init): the kill does nothing, the add passes
    "kill-the-worker": (
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ADD["reference"],
        None,
        1,
    ),
    "close-the-channels": (
        "import os\nos.close(1)\nos.close(2)\nos.close(3)\ndef add(a, b):\n    return a + b",
        None,
        0,
    ),
    "fork-bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        None,
        0,
    ),
    "8-GiB": ("blob = bytearray(8 << 30)\ndef add(a, b):\n    return a + b", None, 0),
}

# The candidate sees no network, no writable system path and none of the service's environment.
ISOLATION_PROBE = """
import os, socket

def probe():
    seen = []
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
        seen.append("tcp")
    except OSError:
        pass
    for path in ("/etc/probe", "/usr/probe"):
        try:
            open(path, "w").close()
            seen.append(path)
        except OSError:
            pass
    seen += [name for name in os.environ if name.startswith("CORRGRPO_")]
    return seen
"""

# Copies of the reference whose work runs in a process nobody it counts waits for: a child the kernel
# reaps (SIGCHLD ignored), or a grandchild orphaned to the worker. Its CPU counts (or the trick is refused).
BUSY = """
def busy(seconds):
    import time
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
"""
REFERENCE = BUSY + "\ndef work(n):\n    busy(0.1)\n    return n * 2\n"
FAST = "def work(n):\n    return n * 2\n"  # what efficiency pays: a shape that measures none fails here
ELSEWHERE = {
    "sigchld-ignored": ("import signal\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)", "True"),
    "orphaned-grandchild": ("", "os.fork() == 0 or os._exit(0)"),  # the child exits, the grandchild works
}


def elsewhere(preamble: str, worker: str) -> str:
    return f"""{BUSY}
import os
{preamble}

def work(n):
    read, write = os.pipe()
    if os.fork() == 0:
        if {worker}:
            busy(0.1)
        os._exit(0)
    os.close(write)
    os.read(read, 1)  # end of file: whoever did the work is gone
    os.close(read)
    return n * 2
"""


# A stdin problem's time limit holds for work split over children the kernel reaps. They run at once: on a
# quiet machine the wall limit (2 x 1 s + 1) does not end them, only counting their CPU does (under heavy
# load the wall limit may end both programs first: then the test holds but proves less).
SPLIT = (
    BUSY
    + """
import os, signal
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ends = []
for _ in range(4):
    read, write = os.pipe()
    if os.fork() == 0:
        busy(0.4)
        os._exit(0)
    os.close(write)
    ends.append(read)
for read in ends:
    os.read(read, 1)  # end of file: that child is gone
print(int(input()) * 2)
"""
)


def descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in map(int, (task / "children").read_text().split()):
                found += [child, *descendants(child)]
    return found


def busy_worker(shape: Shape) -> int | None:
    """A sandbox worker of the service running a run now: a process with the worker's command line (not
    bwrap's, which names it too) with a child that has it as well (the run it forked). Searched among the
    service processes' descendants (bwrap) or their containers' processes (docker)."""
    roots = shape.processes()
    if shape.name == "docker":
        roots = [pid for service in roots for pid in container_pids(service)]
    for root in roots:
        for pid in [root, *descendants(root)]:
            if is_worker(pid) and any(is_worker(child) for child in descendants(pid)):
                return pid
    return None


def container_pids(service_pid: int) -> list[int]:
    """The init pids of the sandbox containers the service `service_pid` started (docker_backend's label)."""
    owner = f"label=corrgrpo.sandbox={socket.gethostname()}:{service_pid}"
    listed = subprocess.run(["docker", "ps", "-q", "--filter", owner], capture_output=True, text=True)
    inspect = ["docker", "inspect", "-f", "{{.State.Pid}}", *listed.stdout.split()]
    return [int(pid) for pid in subprocess.run(inspect, capture_output=True, text=True).stdout.split()]


def is_worker(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # gone meanwhile
        return False
    return not argv[0].endswith(b"bwrap") and any(b"corrgrpo_sandbox/worker" in arg for arg in argv)


class ShapeChecks:
    """The checks; collected where a test module subclasses this as `Test...` beside a `shape` fixture."""

    def test_readyz_names_the_isolation_cpu_processes_and_page_cache(self, shape: Shape) -> None:
        expected = "docker" if shape.name == "docker" else "bwrap"
        assert shape.ready["ready"] is True and shape.ready["checks"]["sandbox"] == expected, shape.ready
        assert shape.ready["checks"]["cpu"] == "every process of a run counted", shape.ready
        # as uid 0 without a pids cgroup only a run's CPU and wall limits end its processes: /readyz says so
        expected = "unbounded" if shape.name == "bwrap-cgroup2" else "at most 16"
        assert shape.ready["checks"]["processes"].startswith(expected), shape.ready
        # bwrap runs see tmpfs copies alone; docker workers read the image's files via the host's page cache
        expected = "open under docker" if shape.name == "docker" else "every file a run sees is a tmpfs copy"
        assert shape.ready["checks"]["page_cache"].startswith(expected), shape.ready

    @pytest.mark.parametrize(("code", "stage", "passes"), FAULTS.values(), ids=FAULTS.keys())
    def test_candidate_faults_are_its_failures(
        self, shape: Shape, code: str, stage: str | None, passes: int
    ) -> None:
        hostile, neighbour = score(shape, fresh(**ADD), code, ADD["reference"])
        assert hostile["error"] is None, hostile["error"]
        assert hostile["components"]["correct"] == passes, hostile["info"]
        assert (hostile["info"]["stage"] == "passed") == bool(passes), hostile["info"]
        if stage:
            assert hostile["info"]["stage"] == stage and hostile["components"]["syntax"] == 0
        assert neighbour["error"] is None and neighbour["components"]["correct"] == 1, neighbour

    def test_the_candidate_sees_no_network_files_or_service_environment(self, shape: Shape) -> None:
        test = "def check(candidate):\n    assert candidate() == []\n"
        problem = fresh(entry_point="probe", test=test, reference=ISOLATION_PROBE)
        (result,) = score(shape, problem, ISOLATION_PROBE)
        assert result["error"] is None and result["components"]["correct"] == 1, result["info"]

    @pytest.mark.parametrize("trick", ELSEWHERE)
    def test_work_done_where_nobody_waits_is_not_paid_as_efficiency(self, shape: Shape, trick: str) -> None:
        test = "def check(candidate):\n    assert candidate(3) == 6\n    assert candidate(5) == 10\n"
        problem = fresh(entry_point="work", test=test, reference=REFERENCE)
        honest, hidden, fast = score(shape, problem, REFERENCE, elsewhere(*ELSEWHERE[trick]), FAST)
        assert honest["components"]["correct"] == 1 and honest["components"]["efficiency"] <= 0.3, honest
        assert hidden["error"] is None and hidden["components"]["efficiency"] <= 0.3, hidden
        assert fast["components"]["efficiency"] >= 0.5, fast  # efficiency is measured in this shape

    def test_a_time_limit_holds_for_work_split_over_reaped_children(self, shape: Shape) -> None:
        problem = fresh(stdin_cases=[{"input": "21\n", "output": "42\n"}], time_limit_s=1.0)
        whole, split = score(shape, problem, BUSY + "busy(1.6)\nprint(int(input()) * 2)\n", SPLIT)
        assert whole["components"]["correct"] == 0 and whole["info"]["stage"] == "timeout", whole["info"]
        assert split["error"] is None and split["components"]["correct"] == 0, split["info"]

    def test_a_worker_killed_from_outside_costs_a_retry(self, shape: Shape) -> None:
        """The OOM killer, an operator or a crashed container ends a worker mid-run: the item is run again,
        neither scored as the candidate's failure nor an error."""
        if not shape.processes():
            pytest.skip(f"{shape.name}: its workers are out of reach; compose_stack.py kills a replica there")
        problem = fresh(stdin_cases=[{"input": "1 2\n", "output": "3\n"}])
        slow = "import time\ntime.sleep(1.5)\na, b = map(int, input().split())\nprint(a + b)\n"
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(score, shape, problem, slow)
            deadline, worker = time.monotonic() + 30, None
            while worker is None and time.monotonic() < deadline and not pending.done():
                worker = busy_worker(shape)
            assert worker is not None, "no worker was seen running the item"
            os.kill(worker, signal.SIGKILL)
            (result,) = pending.result()
        assert result["error"] is None and result["components"]["correct"] == 1, result["info"]
