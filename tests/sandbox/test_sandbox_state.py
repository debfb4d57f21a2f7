"""Nothing a candidate does outlives its run (issue 26): the worker's limits, priority, affinity, scheduling
and OOM score, the namespace's UTS names, sysctls and keyrings, and the processes that survive a run (only the
worker) are out of a candidate's reach. Each attack reports which of its operations the kernel accepted (none
may be), and a probe run on the same worker afterwards must see exactly what it saw before.

Runs under bwrap here, and under docker too where `make compose-test` sets CORRGRPO_TEST_DOCKER=1.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from corrgrpo_sandbox import Limits, Sandbox

# What a later run can observe of the worker and the namespace. /proc/1 is the worker (its namespace's init);
# the old layout had bwrap's init there and the worker as the candidate's parent: both are read.
PROBE = """
import json, os, resource, socket
def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError as error:
        return type(error).__name__
limits = [n for n in sorted(dir(resource)) if n.startswith("RLIMIT_")]
seen = {"own limits": [resource.getrlimit(getattr(resource, n)) for n in limits]}
for pid in sorted({1, os.getppid()}):
    for name in ("limits", "oom_score_adj", "status"):
        lines = read(f"/proc/{pid}/{name}").splitlines()  # less what changes as the worker works
        changing = ("Vm", "Rss", "volunt", "nonvol", "State", "Sig")
        seen[f"{pid} {name}"] = [l for l in lines if not l.startswith(changing)]
    seen[f"{pid} nice"] = read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()[16:18]
seen["uts"] = [socket.gethostname(), read("/proc/sys/kernel/domainname")]
for path in (
    "kernel/msgmax", "kernel/shmmax", "fs/mqueue/msg_max", "net/ipv4/ip_forward", "net/core/somaxconn"
):
    seen[path] = read("/proc/sys/" + path)
# keys a run could add (keyrings come and go with every session and uid on the host: `.user_reg` counts them)
seen["keys"] = [line for line in read("/proc/keys").splitlines() if line.split()[7:8] != ["keyring"]]
seen["processes"] = sum(p.isdigit() for p in os.listdir("/proc"))
print(json.dumps(seen))
"""

# Each attack appends to `accepted` what the kernel let it do, and prints the list.
PRELUDE = """
import ctypes, json, os, resource, socket
libc = ctypes.CDLL(None, use_errno=True)
accepted = []
targets = sorted({1, os.getppid()})
def attempt(name, action):
    try:
        result = action()
    except OSError:
        return
    if result is None or result >= 0:
        accepted.append(name)
"""
ATTACKS = {
    "limits": """
for pid in targets:
    attempt(f"prlimit {pid} NOFILE", lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (63, 63)))
    attempt(f"prlimit {pid} CPU", lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1)))
    raw_as = lambda: libc.prlimit64(pid, resource.RLIMIT_AS, ctypes.c_void_p(0), None)
    attempt(f"prlimit {pid} AS raw", raw_as)
""",
    "priority": """
for pid in targets:
    attempt(f"setpriority {pid}", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
    ioprio_set = 251 if os.uname().machine == "x86_64" else 30
    attempt(f"ioprio_set {pid}", lambda: libc.syscall(ioprio_set, 1, pid, 7 | (3 << 13)))
attempt("setpriority PRIO_USER", lambda: os.setpriority(os.PRIO_USER, 0, 19))  # every process of the uid
""",
    "affinity and scheduling": """
for pid in targets:
    attempt(f"sched_setaffinity {pid}", lambda: os.sched_setaffinity(pid, {0}))
    attempt(f"sched_setscheduler {pid}", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))
""",
    "oom score": """
for pid in targets:
    def write():
        with open(f"/proc/{pid}/oom_score_adj", "w") as handle:
            handle.write("900")
    attempt(f"oom_score_adj {pid}", write)
""",
    "tracing": """
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
for pid in targets:
    for request, name in ((16, "PTRACE_ATTACH"), (0x4206, "PTRACE_SEIZE")):
        if libc.ptrace(request, pid, None, None) == 0:
            accepted.append(f"{name} {pid}")
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    def poke():
        with open(f"/proc/{pid}/mem", "r+b") as memory:
            memory.read(1)
    attempt(f"/proc/{pid}/mem", poke)
    attempt(f"pidfd_getfd {pid}", lambda: libc.syscall(438, os.pidfd_open(pid), 0, 0))
    kcmp = 312 if os.uname().machine == "x86_64" else 272
    attempt(f"kcmp {pid}", lambda: libc.syscall(kcmp, pid, os.getpid(), 0, 0, 0))
""",
    "keyrings": """
add_key = 248 if os.uname().machine == "x86_64" else 217
keyctl = 250 if os.uname().machine == "x86_64" else 219
for keyring in (-4, -5, -3):  # user, user session, session
    attempt(f"add_key {keyring}", lambda: libc.syscall(add_key, b"user", b"memo", b"answer", 6, keyring))
attempt("keyctl get_keyring_id", lambda: libc.syscall(keyctl, 0, -4, 1))
""",
    "uts names": """
attempt("sethostname", lambda: socket.sethostname("evil"))
for name in ("hostname", "domainname"):
    def write():
        with open(f"/proc/sys/kernel/{name}", "w") as handle:
            handle.write("evil")
    attempt(f"/proc/sys/kernel/{name}", write)
""",
    "sysctls": """
# each is written with its own value: an attack that succeeds changes nothing, not even on the host
for path in ("kernel/msgmax", "kernel/shmmax", "fs/mqueue/msg_max", "net/ipv4/ip_forward",
             "net/core/somaxconn", "vm/swappiness", "kernel/sched_child_runs_first"):
    def write():
        with open("/proc/sys/" + path) as handle:
            value = handle.read()
        with open("/proc/sys/" + path, "w") as handle:
            handle.write(value)
    attempt(path, write)
""",
}


def probe(sandbox: Sandbox) -> dict[str, object]:
    result = sandbox.run(PROBE)
    assert result.exit_code == 0 and result.anomaly is None, result
    return json.loads(result.stdout)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_run_cannot_change_what_later_runs_see(one_worker: Sandbox, attack: str) -> None:
    before = probe(one_worker)
    result = one_worker.run(
        PRELUDE + ATTACKS[attack] + "print(json.dumps(accepted))", limits=Limits(wall_s=5)
    )
    assert result.anomaly is None and result.exit_code == 0, result
    assert json.loads(result.stdout) == [], f"the kernel accepted: {result.stdout.decode()}"
    assert probe(one_worker) == before
    assert one_worker.run("print('next')").stdout == b"next\n"


def test_the_candidate_may_still_set_its_own_limits_priority_and_affinity(one_worker: Sandbox) -> None:
    """The filter allows these calls on the caller itself (pid 0), as the C library and Python make them.

    The priority only goes up from the one the worker inherited (the service's under bwrap, the Docker
    engine's under docker): without CAP_SYS_NICE the kernel refuses any lower one (EACCES), so a fixed target
    such as 5 fails where the engine runs niced (`nice make compose-test`)."""
    source = """
import os, resource
start = os.getpriority(os.PRIO_PROCESS, 0)
resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
resource.prlimit(0, resource.RLIMIT_CORE, (0, 0))
os.nice(1)
os.setpriority(os.PRIO_PROCESS, 0, min(start + 5, 19))
os.sched_setaffinity(0, os.sched_getaffinity(0))
child = os.fork()
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
print(start, resource.getrlimit(resource.RLIMIT_NOFILE), os.getpriority(os.PRIO_PROCESS, 0))
"""
    result = one_worker.run(source)
    assert result.exit_code == 0, result
    start, rest = result.stdout.decode().split(" ", 1)
    assert rest == f"(32, 32) {min(int(start) + 5, 19)}\n", result


def test_a_changed_invariant_is_detected() -> None:
    """The check after each run (`worker.residue.Invariants`) names what changed; run in a throwaway
    interpreter."""
    source = """
import os, resource
from corrgrpo_sandbox.worker import residue
invariants = residue.Invariants()
assert invariants.broken() is None
os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + 1)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
print(invariants.broken())
"""
    out = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, check=True).stdout
    assert out == "the run changed the worker's limits, priority\n"
