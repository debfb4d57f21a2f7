"""The code service's hostile-completion checks in each shape it ships in (issue 48), one set of test bodies.

`CORRGRPO_TEST_SHAPES` (comma-separated) picks the shapes; default: the three that need no Docker engine,
`python -m corrgrpo_code` with bwrap in each of corrgrpo_testing.shapes' SHAPES (as root, as the images'
uid 10001, on a cgroup v2 host). Besides them:
- `docker`: `CORRGRPO_CODE_ISOLATION=docker` (an engine and `CORRGRPO_SANDBOX_DOCKER_IMAGE`).
- `compose`: the compose stack's nginx at `CORRGRPO_TEST_CODE_URL`, code replicas behind it.
make compose-test runs the last two (deploy/compose-test.sh, tests/deploy/compose_stack.py). A shape that
cannot start skips locally and fails under CI. Problems carry a fresh id: nothing is answered from a cache.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from corrgrpo_code.app import HIDDEN_CPU_S, uncounted_cpu
from corrgrpo_sandbox import ExecResult, Limits
from corrgrpo_testing.servers import SERVICE_PYTHON, ServiceProcess, free_port, start_service
from corrgrpo_testing.shapes import SHAPES, fail_or_skip, shape_argv


@dataclass(frozen=True)
class Shape:
    name: str
    url: str
    ready: dict[str, Any]  # its /readyz body
    pid: int | None  # the service process, where it runs here


@contextmanager
def namespaced_service(shape: str, env: dict[str, str]) -> Iterator[ServiceProcess]:
    """The code service in one of corrgrpo_testing.shapes' shapes, from this interpreter."""
    port = free_port()
    log_path = f"/tmp/corrgrpo-code-{port}.log"
    argv = [SERVICE_PYTHON, "-m", "corrgrpo_code", "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            shape_argv(shape, argv),
            env={**os.environ, **env, "HOME": "/nonexistent"},
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


@contextmanager
def started(shape: str) -> Iterator[tuple[str, int | None]]:
    """The base URL of the code service in `shape` and its pid if local, for the length of the `with`."""
    env = {"CORRGRPO_CODE_WORKERS": "2", "CORRGRPO_LOG_JSON": "true"}
    if shape == "compose":
        url = os.environ.get("CORRGRPO_TEST_CODE_URL")
        if not url:
            fail_or_skip("shape compose needs CORRGRPO_TEST_CODE_URL (tests/deploy/compose_stack.py sets it)")
        yield url.rstrip("/"), None
        return
    if shape in SHAPES:
        with namespaced_service(shape, {**env, "CORRGRPO_CODE_ISOLATION": "bwrap"}) as service:
            yield service.url, service.process.pid
        return
    if shape != "docker":
        pytest.fail(f"unknown shape {shape!r} in CORRGRPO_TEST_SHAPES")
    try:
        with start_service("code", env={**env, "CORRGRPO_CODE_ISOLATION": "docker"}) as service:
            yield service.url, service.process.pid
    except RuntimeError as error:  # it refused to start (no engine, no image): its log is on stderr
        fail_or_skip(f"the code service did not start in shape docker: {error}")


def shapes() -> list[str]:
    chosen = os.environ.get("CORRGRPO_TEST_SHAPES", ",".join(SHAPES))
    return [name.strip() for name in chosen.split(",") if name.strip()]


@pytest.fixture(scope="module", params=shapes())
def shape(request: pytest.FixtureRequest) -> Iterator[Shape]:
    with started(request.param) as (url, pid):
        ready = httpx.get(f"{url}/readyz", timeout=30)
        yield Shape(request.param, url, ready.json(), pid)


def score(shape: Shape, problem: dict[str, Any], *completions: str) -> list[dict[str, Any]]:
    """The results of `completions` (fenced) to `problem`, one request."""
    items = [{"completion": f"```python\n{code}\n```", "problem": problem} for code in completions]
    response = httpx.post(f"{shape.url}/v1/score", json={"items": items}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def fresh(**problem: Any) -> dict[str, Any]:
    return {"task_id": f"shapes/{uuid.uuid4().hex}", **problem}


ADD = {
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    "reference": "def add(a, b):\n    return a + b\n",
}


def test_readyz_names_the_isolation_cpu_processes_and_page_cache(shape: Shape) -> None:
    expected = "docker" if shape.name == "docker" else "bwrap"
    assert shape.ready["ready"] is True and shape.ready["checks"]["sandbox"] == expected, shape.ready
    assert shape.ready["checks"]["cpu"] == "every process of a run counted", shape.ready
    # as uid 0 without a pids cgroup only a run's CPU and wall limits end its processes: /readyz says so
    expected = "unbounded" if shape.name == "bwrap-cgroup2" else "at most 16"
    assert shape.ready["checks"]["processes"].startswith(expected), shape.ready
    # bwrap runs see tmpfs copies alone; docker workers read the image's files through the host's page cache
    expected = "open under docker" if shape.name == "docker" else "every file a run sees is a tmpfs copy"
    assert shape.ready["checks"]["page_cache"].startswith(expected), shape.ready


class LosingSandbox:
    """Counts only the CPU of processes a run waits for (the sandbox without a cgroup counter did), after
    `anomalies` runs whose worker broke."""

    limits = Limits()

    def __init__(self, cpu_s: float, anomalies: int = 0) -> None:
        self.cpu_s, self.anomalies = cpu_s, anomalies

    def run(self, source: str, limits: Limits) -> ExecResult:
        self.anomalies -= 1
        anomaly = "worker died" if self.anomalies >= 0 else None
        streams = {"stdout": b"", "stderr": b"", "channel": b"", "truncated": False, "timed_out": False}
        ends = {"wall_s": 0.2, "peak_rss_kb": 1, "isolation": "bwrap", "anomaly": anomaly}
        return ExecResult(0, None, **streams, cpu_s=self.cpu_s, **ends)


def test_a_shape_that_loses_reaped_cpu_is_refused() -> None:
    """The shapes above are ready; a sandbox that loses the probe's reaped CPU makes the service refuse."""
    reason = uncounted_cpu(LosingSandbox(HIDDEN_CPU_S + 0.003))
    assert reason == "0.053 s of a run's 0.1 s in reaped processes counted"
    assert uncounted_cpu(LosingSandbox(2 * HIDDEN_CPU_S + 0.004)) is None
    # one broken worker is retried; two are a refusal naming the anomaly
    assert uncounted_cpu(LosingSandbox(2 * HIDDEN_CPU_S, anomalies=1)) is None
    failed = uncounted_cpu(LosingSandbox(2 * HIDDEN_CPU_S, anomalies=2))
    assert failed == "the probe run failed: worker died"


# What a candidate causes is its own failure, never an item error, and never its neighbour's.
@pytest.mark.parametrize(
    ("code", "stage", "passes"),
    [
        ("x = " + "-" * 3000 + "1", "syntax", 0),  # RecursionError in the parent's parser
        ("x = " + "-" * 6000 + "1", "syntax", 0),  # MemoryError (the parser's stack)
        # the worker handles no signal (bwrap: its namespace's init): the kill does nothing, the add passes
        ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + ADD["reference"], None, 1),
        ("import os\nos.close(1)\nos.close(2)\nos.close(3)\ndef add(a, b):\n    return a + b", None, 0),
        ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", None, 0),
        ("blob = bytearray(8 << 30)\ndef add(a, b):\n    return a + b", None, 0),
    ],
    ids=["nested-3k", "nested-6k", "kill-the-worker", "close-the-channels", "fork-bomb", "8-GiB"],
)
def test_candidate_faults_are_its_failures(shape: Shape, code: str, stage: str | None, passes: int) -> None:
    hostile, neighbour = score(shape, fresh(**ADD), code, ADD["reference"])
    assert hostile["error"] is None, hostile["error"]
    assert hostile["components"]["correct"] == passes, hostile["info"]
    assert (hostile["info"]["stage"] == "passed") == bool(passes), hostile["info"]
    if stage:
        assert hostile["info"]["stage"] == stage and hostile["components"]["syntax"] == 0
    assert neighbour["error"] is None and neighbour["components"]["correct"] == 1, neighbour


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


def test_the_candidate_sees_no_network_files_or_service_environment(shape: Shape) -> None:
    test = "def check(candidate):\n    assert candidate() == []\n"
    problem = fresh(entry_point="probe", test=test, reference=ISOLATION_PROBE)
    (result,) = score(shape, problem, ISOLATION_PROBE)
    assert result["error"] is None and result["components"]["correct"] == 1, result["info"]


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


@pytest.mark.parametrize("trick", ELSEWHERE)
def test_work_done_where_nobody_waits_is_not_paid_as_efficiency(shape: Shape, trick: str) -> None:
    test = "def check(candidate):\n    assert candidate(3) == 6\n    assert candidate(5) == 10\n"
    problem = fresh(entry_point="work", test=test, reference=REFERENCE)
    honest, hidden = score(shape, problem, REFERENCE, elsewhere(*ELSEWHERE[trick]))
    assert honest["components"]["correct"] == 1 and honest["components"]["efficiency"] <= 0.3, honest
    assert hidden["error"] is None and hidden["components"]["efficiency"] <= 0.3, hidden


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


def test_a_time_limit_holds_for_work_split_over_reaped_children(shape: Shape) -> None:
    problem = fresh(stdin_cases=[{"input": "21\n", "output": "42\n"}], time_limit_s=1.0)
    whole, split = score(shape, problem, BUSY + "busy(1.6)\nprint(int(input()) * 2)\n", SPLIT)
    assert whole["components"]["correct"] == 0 and whole["info"]["stage"] == "timeout", whole["info"]
    assert split["error"] is None and split["components"]["correct"] == 0, split["info"]


def descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in map(int, (task / "children").read_text().split()):
                found += [child, *descendants(child)]
    return found


def busy_worker(shape: Shape, service_pid: int) -> int | None:
    """The sandbox worker of the service running a run now: a process with the worker's command line (not
    bwrap's, which names it too) with a child that has it as well (the run it forked). Searched among the
    service's descendants (bwrap) or its containers' processes (docker)."""
    roots = [service_pid]
    if shape.name == "docker":
        owner = f"label=corrgrpo.sandbox={socket.gethostname()}:{service_pid}"  # docker_backend.LABEL
        listed = subprocess.run(["docker", "ps", "-q", "--filter", owner], capture_output=True, text=True)
        inspect = ["docker", "inspect", "-f", "{{.State.Pid}}", *listed.stdout.split()]
        roots = [int(pid) for pid in subprocess.run(inspect, capture_output=True, text=True).stdout.split()]
    for root in roots:
        for pid in [root, *descendants(root)]:
            if is_worker(pid) and any(is_worker(child) for child in descendants(pid)):
                return pid
    return None


def is_worker(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # gone meanwhile
        return False
    return not argv[0].endswith(b"bwrap") and any(b"corrgrpo_sandbox/worker" in arg for arg in argv)


def test_a_worker_killed_from_outside_costs_a_retry(shape: Shape) -> None:
    """The OOM killer, an operator or a crashed container ends a worker mid-run: the item is run again,
    neither scored as the candidate's failure nor an error."""
    if shape.pid is None:
        pytest.skip(f"{shape.name}: its workers are out of reach; compose_stack.py kills a replica there")
    problem = fresh(stdin_cases=[{"input": "1 2\n", "output": "3\n"}])
    slow = "import time\ntime.sleep(1.5)\na, b = map(int, input().split())\nprint(a + b)\n"
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(score, shape, problem, slow)
        deadline, worker = time.monotonic() + 30, None
        while worker is None and time.monotonic() < deadline and not pending.done():
            worker = busy_worker(shape, shape.pid)
        assert worker is not None, "no worker was seen running the item"
        os.kill(worker, signal.SIGKILL)
        (result,) = pending.result()
    assert result["error"] is None and result["components"]["correct"] == 1, result["info"]
