"""The processes of one run and their CPU time: the worker is a child subreaper, so every process a run starts
stays its descendant until reaped."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time

from .kernel import KernelFile

CLOCK_TICK = os.sysconf("SC_CLK_TCK")
STRAGGLER_ROUNDS = 2000  # x 1 ms: how long killed processes may take to disappear before the worker gives up


class ProcessTree:
    """The processes of one run: every descendant of the worker (a subreaper, so orphans stay descendants).

    No process of a run is reaped by the kernel alone (`seccomp` refuses ignoring SIGCHLD, SA_NOCLDWAIT):
    each is waited for by its parent, which adds its CPU to its children's time, or by the worker. So the
    rusage of what the worker reaps and /proc of what lives (zombies too) is all of a run's CPU."""

    def __init__(self, namespaced: bool, usage: KernelFile | None) -> None:
        # alone in a PID namespace: every process but init and the worker is the run's
        self.namespaced = namespaced
        # the worker's cgroup CPU counter (ns), counting even processes nobody waited for
        self.usage = usage
        self.me = os.getpid()
        self.reaped_cpu = 0.0
        self.peak_rss_kb = 0
        self.child_status: int | None = None
        self.child_cpu = 0.0
        self.child = 0

    def start(self, child: int) -> None:
        self.child = child
        self.reaped_cpu = 0.0
        self.peak_rss_kb = 0
        self.child_status = None
        self.child_cpu = 0.0
        self.counter_start = self.counter()

    def counter(self) -> float:
        """Cgroup CPU of everything in the worker's cgroup minus the worker's own, in seconds."""
        if self.usage is None:
            return 0.0
        total = int(self.usage.read_small()) / 1e9
        own = resource.getrusage(resource.RUSAGE_SELF)
        return total - own.ru_utime - own.ru_stime

    def record(self, pid: int, status: int, usage: resource.struct_rusage) -> None:
        cpu = usage.ru_utime + usage.ru_stime  # the process's own and that of every descendant it waited for
        self.reaped_cpu += cpu
        self.peak_rss_kb = max(self.peak_rss_kb, usage.ru_maxrss)
        if pid == self.child:
            self.child_status, self.child_cpu = status, cpu

    def reap_orphans(self) -> None:
        """Reap exited descendants other than the child (whose exit the pidfd reports) and count their CPU."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == self.child:
                return
            self.record(*os.wait4(info.si_pid, 0))

    def descendants(self) -> list[int]:
        """Live (and zombie) processes of the run, from /proc."""
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
        if self.namespaced:
            return [pid for pid in pids if pid not in (1, self.me)]
        parents = {pid: stat_fields(pid)[1:2] for pid in pids}
        found, frontier = [], {self.me}
        while frontier:
            frontier = {pid for pid, parent in parents.items() if parent and int(parent[0]) in frontier}
            found += frontier
        return found

    def cpu(self) -> float:
        """CPU time of every process of the run so far."""
        if self.usage is not None:
            return max(0.0, self.counter() - self.counter_start)
        live = 0.0
        for pid in self.descendants():
            fields = stat_fields(pid)
            if len(fields) > 14:  # utime, stime and what it has waited for
                live += sum(int(value) for value in fields[11:15]) / CLOCK_TICK
        return self.reaped_cpu + live

    def kill(self) -> None:
        if self.namespaced:  # every process the worker may signal, except the namespace's init and the worker
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
            return
        for pid in self.descendants():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def end(self) -> bool:
        """Kill and reap every process of the run; True when none is left."""
        for _ in range(STRAGGLER_ROUNDS):
            while True:
                try:
                    reaped = os.wait4(-1, os.WNOHANG)
                except ChildProcessError:  # no child at all: no descendant either
                    return True
                if reaped[0] == 0:
                    break
                self.record(*reaped)
            self.kill()
            time.sleep(0.001)
        return False


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (state, ppid, ...), or [] when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return []
