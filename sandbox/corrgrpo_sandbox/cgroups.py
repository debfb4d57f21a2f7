"""Cgroup v1 directories of each worker: an exact CPU counter over every process a run starts, and a pids
limit."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import signal
import subprocess
import time

log = logging.getLogger("corrgrpo_sandbox")

CGROUP_CONTROLLERS = ("cpuacct", "cpu", "pids")  # pids is optional
CGROUP_REMOVE_ROUNDS = 2000  # x 1 ms: killed processes leave a cgroup asynchronously (usually within ~10 ms)


@functools.cache
def cgroup_parents() -> dict[str, str]:
    """Writable cgroup v1 directories of this process per controller (`cpuacct`, `cpu`, and `pids` where
    mounted), or {} without `cpuacct` and `cpu`.

    A worker in its own cgroup of each gets an exact CPU counter over every process it starts (even ones
    nobody waited for), under contention one fair share of the CPU however many processes it runs, and a
    process limit that holds for uid 0 too (RLIMIT_NPROC does not)."""
    mounts: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/mounts") as table:
        for line in table:
            _, point, kind, options, *_ = line.split()
            if kind == "cgroup":
                for controller in CGROUP_CONTROLLERS:
                    if controller in options.split(","):
                        mounts.setdefault(controller, point)
    own: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as table:
        for line in table:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(","):
                own[controller] = path
    if not {"cpuacct", "cpu"} <= set(mounts) <= set(own):
        return {}
    parents = {
        controller: os.path.join(mounts[controller], own[controller].lstrip("/")) for controller in mounts
    }
    remove_stale_cgroups(parents)
    try:  # a process must be able to enter them too (nested containers may allow mkdir only)
        probe = WorkerCgroup(parents)
    except OSError:
        return {}
    try:
        subprocess.run(["/bin/true"], preexec_fn=probe.enter, check=True, env={})
    except (OSError, subprocess.SubprocessError):
        return {}
    finally:
        probe.remove()
    return parents


def remove_stale_cgroups(parents: dict[str, str]) -> None:
    """Empty worker cgroups left by processes that are gone (killed before they could remove them)."""
    for parent in set(parents.values()):
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                owner = name.split("-")[1] if name.startswith("corrgrpo-") and name.count("-") == 2 else ""
                if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                    with contextlib.suppress(OSError):
                        # fails, harmlessly, while processes remain in it
                        os.rmdir(os.path.join(parent, name))


_cgroup_numbers = itertools.count()


class WorkerCgroup:
    """One worker's cgroups (cpuacct, cpu, pids), created before it starts and removed after it is gone."""

    def __init__(self, parents: dict[str, str]) -> None:
        name = f"corrgrpo-{os.getpid()}-{next(_cgroup_numbers)}"
        self.paths: list[str] = []
        try:
            for parent in dict.fromkeys(parents.values()):  # controllers mounted together share one directory
                os.mkdir(os.path.join(parent, name))
                self.paths.append(os.path.join(parent, name))
        except OSError:
            self.remove()
            raise
        self.cpu_counter = os.path.join(parents["cpuacct"], name, "cpuacct.usage")
        self.pids_max = os.path.join(parents["pids"], name, "pids.max") if "pids" in parents else None
        self.tasks_limit: int | None = None

    def limit_tasks(self, count: int) -> None:
        """At most `count` processes and threads in the cgroup at once (fork fails with EAGAIN beyond)."""
        if self.pids_max is not None and count != self.tasks_limit:
            with open(self.pids_max, "w") as limit:
                limit.write(str(count))
            self.tasks_limit = count

    def enter(self) -> None:
        """Move the calling process (run between fork and exec) into the cgroups."""
        for path in self.paths:
            fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def remove(self) -> None:
        """Remove the cgroups once their processes are gone. The worker's sandboxed processes die after it,
        each asynchronously (bwrap --die-with-parent, then its PID namespace). Any still there are killed
        here."""
        for path in self.paths:
            for _ in range(CGROUP_REMOVE_ROUNDS):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    kill_members(path)
                    time.sleep(0.001)
            else:
                log.warning("cgroup %s still holds processes after the worker was closed: left behind", path)


def members(cgroup: str) -> set[int]:
    with contextlib.suppress(OSError), open(os.path.join(cgroup, "cgroup.procs")) as procs:
        return {int(line) for line in procs}
    return set()


def kill_members(cgroup: str) -> None:
    """SIGKILL every process in `cgroup`, each through a pidfd taken while it was listed (never a reused
    pid)."""
    listed = members(cgroup)
    handles = {}
    for pid in listed:
        with contextlib.suppress(OSError):
            handles[pid] = os.pidfd_open(pid)
    still = members(cgroup)
    for pid, handle in handles.items():
        with contextlib.suppress(OSError):
            if pid in still:
                signal.pidfd_send_signal(handle, signal.SIGKILL)
        os.close(handle)
