"""Execution-level abuse: each program tries to escape, spy or disrupt; each test asserts containment AND an
honest result. (Harness-level abuse such as forged verdicts is tested with the harness.)"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
from pathlib import Path

import pytest

from corrgrpo_sandbox import Limits, Sandbox

LIST_PIDS = "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"


pytestmark = pytest.mark.usefixtures("require_bwrap")


def channel_json(sandbox: Sandbox, source: str, **kwargs: object) -> object:
    result = sandbox.run(source, **kwargs)  # type: ignore[arg-type]
    assert result.exit_code == 0 and result.anomaly is None, result.stderr
    return json.loads(result.channel)


def assert_only_worker_remains(sandbox: Sandbox) -> None:
    """Inside the PID namespace: the worker as init (1) and the process asking; nothing left over."""
    result = sandbox.run(LIST_PIDS)
    assert result.exit_code == 0
    assert json.loads(result.stdout)[0] == 1 and len(json.loads(result.stdout)) == 2, result.stdout


def test_no_network_not_even_to_a_host_listener(sandbox: Sandbox) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        source = f"""
import json, os, socket
outcomes = []
for address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
    try:
        socket.create_connection(address, timeout=1).close()
        outcomes.append("connected")
    except OSError as error:
        outcomes.append(type(error).__name__)
interfaces = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
os.write(3, json.dumps([outcomes, interfaces]).encode())
"""
        outcomes, interfaces = channel_json(sandbox, source)  # type: ignore[misc]
    assert "connected" not in outcomes
    assert interfaces == ["lo"]


def test_no_writes_outside_the_private_tmp(sandbox: Sandbox) -> None:
    targets = [
        "/etc/corrgrpo-x",
        "/usr/corrgrpo-x",
        "/corrgrpo-x",
        "/opt/corrgrpo_sandbox/x",
        "/proc/corrgrpo-x",
        "/dev/corrgrpo-x",
    ]
    source = f"""
import json, os
refused = []
for path in {targets!r}:
    try:
        open(path, "w").write("x")
    except OSError:
        refused.append(path)
os.write(3, json.dumps(refused).encode())
"""
    assert channel_json(sandbox, source) == targets
    assert not any(Path(path).exists() for path in targets[:3])


def test_service_environment_is_invisible(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = secrets.token_hex(16)
    monkeypatch.setenv("CORRGRPO_TEST_SECRET", secret)
    mode = "pool" if sandbox.mode == "pool" else "fresh"
    with Sandbox(mode, workers=1) as spied_on:  # started after the secret entered this process's environment
        source = f"""
import os
seen = [repr(dict(os.environ))]
for pid in ["self", "1", "2", str(os.getppid()), "{os.getpid()}"]:
    try:
        seen.append(open(f"/proc/{{pid}}/environ", "rb").read().decode(errors="replace"))
    except OSError as error:
        seen.append(type(error).__name__)
print("\\n".join(seen))
"""
        result = spied_on.run(source)
    assert result.exit_code == 0, result.stderr
    assert secret.encode() not in result.stdout
    # it did read the environments it can see
    assert b"CORRGRPO" not in result.stdout and b"PATH" in result.stdout


def test_service_files_are_invisible(sandbox: Sandbox, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("the answers")
    probes = [
        "/work",
        "/work/main/README.md",
        "/root/.bashrc",
        "/home",
        "/var",
        "/run",
        str(secret_file),
        "/tmp/pytest-of-root",
    ]
    source = f"""
import json, os
visible = []
for path in {probes!r}:
    if os.path.exists(path):
        visible.append(path)
os.write(3, json.dumps(visible).encode())
"""
    assert channel_json(sandbox, source) == []


def test_fork_bomb_is_contained_and_cleaned_up(pool_sandbox: Sandbox) -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = pool_sandbox.run(bomb, limits=Limits(wall_s=1.0, cpu_s=2, processes=16))
    assert result.anomaly is None and result.exit_code != 0
    for _ in range(2):  # both workers
        assert_only_worker_remains(pool_sandbox)


def test_memory_bomb_fails_inside_the_limit(sandbox: Sandbox) -> None:
    result = sandbox.run(
        "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))",
        limits=Limits(memory_mb=256),
    )
    assert result.exit_code == 1 and b"MemoryError" in result.stderr
    assert result.peak_rss_kb < 300 * 1024


def test_infinite_loop_is_stopped_by_the_cpu_limit(sandbox: Sandbox) -> None:
    # wall: slack for a loaded machine
    result = sandbox.run("while True:\n    pass", limits=Limits(cpu_s=1, wall_s=20))
    assert result.timed_out and result.exit_code is None
    # the kernel enforces RLIMIT_CPU at its tick granularity, so rusage can read a little under the limit
    assert (result.signal == signal.SIGXCPU and result.cpu_s >= 0.8) or result.wall_s >= 20


def test_ignoring_sigxcpu_still_ends_in_sigkill(pool_sandbox: Sandbox) -> None:
    source = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    result = pool_sandbox.run(source, limits=Limits(cpu_s=1, wall_s=20))
    assert result.timed_out and result.signal == signal.SIGKILL
    # the hard limit one second later (or, very loaded, the wall)
    assert result.cpu_s >= 1.6 or result.wall_s >= 20


def test_sleeping_past_the_wall_timeout(sandbox: Sandbox) -> None:
    result = sandbox.run(
        "import time\nprint('before', flush=True)\ntime.sleep(60)", limits=Limits(wall_s=0.5)
    )
    assert result.timed_out and result.signal == signal.SIGKILL
    assert result.stdout == b"before\n"
    assert 0.5 <= result.wall_s < 5


def test_output_flood_is_capped(sandbox: Sandbox) -> None:
    flood = (
        "import os, sys\nchunk = 'x' * 65536\nfor _ in range(800):\n"
        "    sys.stdout.write(chunk)\n    sys.stderr.write(chunk)\n    os.write(3, b'y' * 65536)"
    )
    result = sandbox.run(flood, limits=Limits(output_bytes=4096))
    assert result.exit_code == 0 and result.truncated
    assert (len(result.stdout), len(result.stderr), len(result.channel)) == (4096, 4096, 4096)


SIGNAL_THE_WORKER = [
    "import os\nos.kill(os.getppid(), 9)",
    "import os\ntry:\n    os.kill(-1, 9)\nexcept ProcessLookupError:\n    pass",  # nothing else it may signal
    "import os, signal\nos.kill(1, signal.SIGSTOP)",
    # Python's own handler would raise KeyboardInterrupt in it
    "import os, signal\nos.kill(1, signal.SIGINT)",
    "import os, signal\nos.kill(1, signal.SIGTERM)",
    "import os, signal\nfd = os.pidfd_open(1)\nsignal.pidfd_send_signal(fd, signal.SIGKILL)",
]


@pytest.mark.parametrize("attack", SIGNAL_THE_WORKER)
def test_the_worker_is_init_and_no_signal_of_a_candidate_reaches_it(
    pool_sandbox: Sandbox, attack: str
) -> None:
    """The worker is its namespace's init (bwrap --as-pid-1): it gets only signals it handles from inside, and
    it handles none. Before, a killed or stopped worker turned the candidate's run into an anomaly."""
    result = pool_sandbox.run(attack + "\nprint('still here')", limits=Limits(wall_s=2.0))
    assert (result.exit_code, result.anomaly, result.stdout) == (0, None, b"still here\n"), result
    assert pool_sandbox.run("import os\nprint(os.getppid())").stdout == b"1\n"
    assert_only_worker_remains(pool_sandbox)


def test_signalling_the_worker_in_fresh_mode_changes_nothing(fresh_sandbox: Sandbox) -> None:
    result = fresh_sandbox.run("import os\nos.kill(os.getppid(), 9)\nprint('done')")
    assert (result.exit_code, result.anomaly, result.stdout) == (0, None, b"done\n"), result


def test_daemons_do_not_survive_the_run(pool_sandbox: Sandbox) -> None:
    daemon = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        "
        "time.sleep(300)\n"
        "    os._exit(0)\nprint('parent done')"
    )
    result = pool_sandbox.run(daemon)
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"parent done\n", False)
    assert result.wall_s < 5  # the daemon holding stdout open did not make the run wait for the timeout
    for _ in range(2):
        assert_only_worker_remains(pool_sandbox)


@pytest.mark.parametrize(
    ("source", "code"),
    [("import sys\nsys.exit(0)", 0), ("import os\nos._exit(0)", 0), ("import sys\nsys.exit('no')", 1)],
)
def test_early_exit_is_reported_as_it_happened(sandbox: Sandbox, source: str, code: int) -> None:
    result = sandbox.run("import os\nos.write(3, b'before')\n" + source + "\nos.write(3, b'after')")
    assert (result.exit_code, result.channel, result.anomaly) == (code, b"before", None)


def test_child_cannot_reach_the_workers_reply_pipe(pool_sandbox: Sandbox) -> None:
    """The worker's pipes are closed in the child and the worker's /proc entry is hidden (were it not, the
    worker being non-dumpable, /proc/1/fd/* could not be opened); a forged reply written anywhere it can reach
    changes nothing."""
    forge = """
import json, os, struct
reply = json.dumps({"exit_code": 0, "anomaly": None}).encode()
forged = struct.pack(">I", len(reply)) + reply
reached = []
for fd in range(4, 1024):
    try:
        os.write(fd, forged)
        reached.append(fd)
    except OSError:
        pass
for name in os.listdir("/proc/1/fd") if os.path.isdir("/proc/1/fd") else []:
    path = f"/proc/1/fd/{name}"
    try:
        with open(path, "wb") as target:
            target.write(forged)
        reached.append(os.readlink(path))
    except OSError:
        pass
try:
    open("/proc/1/mem", "rb").read(1)
    reached.append("/proc/1/mem")
except OSError:
    pass
os.write(3, json.dumps(reached).encode())
os._exit(7)
"""
    result = pool_sandbox.run(forge)
    # bwrap's init keeps only /dev/null on 0-2; nothing else is writable
    assert (result.exit_code, result.anomaly) == (7, None)
    assert set(json.loads(result.channel)) <= {"/dev/null"}, result.channel


def test_channel_cannot_be_read_back(sandbox: Sandbox) -> None:
    source = "import os\ntry:\n    os.read(3, 1)\n    print('read')\nexcept OSError:\n    print('refused')"
    assert sandbox.run(source).stdout == b"refused\n"
