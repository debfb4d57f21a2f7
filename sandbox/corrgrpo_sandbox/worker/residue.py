"""What a run could leave for the next one on the same worker, and how the worker clears or detects it: files
on the writable mounts (wiped), the worker's limits, priority, scheduling and UTS names (checked), and the pid
and inode counters (moved to where any run leaves them, or the worker is spent)."""

from __future__ import annotations

import ctypes
import os
import resource
from collections.abc import Iterable

from .kernel import LIBC, KernelFile

DOMAINNAME = "/proc/sys/kernel/domainname"
LAST_PID = "/proc/sys/kernel/ns_last_pid"  # the pid namespace's counter: the last pid it gave out
# processes and threads a run may start besides its child and leave no trace (see PidCounter)
PID_ALLOWANCE = 1
PID_START = 64  # where a new worker puts the counter: above what a launcher spends before the worker begins
# inode numbers of each writable mount a run may take (cwd, files, the worker's check: InodeCounters)
INODE_STRIDE = 4
RLIMITS = tuple(getattr(resource, name) for name in sorted(dir(resource)) if name.startswith("RLIMIT_"))
# in /proc/<pid>: the network namespace's unix sockets, one line each after a header
UNIX_SOCKETS = "net/unix"


def remove_tree(path: str) -> None:
    """Delete `path` whatever modes the run gave it (the owner may always chmod, even without privileges). An
    empty directory (the run's cwd, most runs) goes in one call: rmdir needs no permission on the directory
    itself, and refuses a symlink or a file (ENOTDIR), which is unlinked, never followed."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except NotADirectoryError:
        os.unlink(path)
        return
    except OSError:  # not empty
        pass
    os.chmod(path, 0o700)
    for entry in os.listdir(path):
        remove_tree(os.path.join(path, entry))
    os.rmdir(path)


def wipe(directory: str, mode: int) -> bool:
    """Delete everything below a writable mount and give it back its `mode`; True when it is empty
    afterwards."""
    try:
        os.chmod(directory, mode)  # the run may have locked the mount point itself
    except FileNotFoundError:
        return True
    failed = False
    for entry in os.listdir(directory):
        try:
            remove_tree(os.path.join(directory, entry))
        except (OSError, RecursionError):
            failed = True
    # every process of the run is gone (else the run is an anomaly anyway): nothing can add an entry
    # meanwhile, so only a failed removal needs a second listing
    return not failed or not os.listdir(directory)


class Invariants:
    """What a run must leave as it found it in the worker, checked after every run: the worker's limits,
    priority, CPU affinity and scheduling, and the namespace's UTS names. The seccomp filter should make each
    change impossible. A change seen anyway makes the run an anomaly and the worker is replaced, so no later
    run (nor a timing) is measured in a worker a run reached. Read with system calls, not from /proc/self:
    under bwrap the worker's /proc entry is hidden (`isolation.bwrap_head`), and with it its OOM score."""

    def __init__(self) -> None:
        self.domainname = KernelFile.open(DOMAINNAME) if os.path.exists(DOMAINNAME) else None
        self.expected = self.read()

    def read(self) -> dict[str, object]:
        return {
            "limits": [resource.getrlimit(limit) for limit in RLIMITS],
            "priority": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": os.sched_getaffinity(0),
            "scheduler": (os.sched_getscheduler(0), os.sched_getparam(0)),
            "UTS names": (os.uname().nodename, self.domainname.read_small() if self.domainname else None),
        }

    def broken(self) -> str | None:
        """Why the worker can no longer be trusted, or None."""
        changed = [name for name, value in self.read().items() if value != self.expected[name]]
        return f"the run changed the worker's {', '.join(changed)}" if changed else None


class PidCounter:
    """The pid namespace's counter, which every later run on the worker reads in its own pid: a run that
    started k processes or threads would tell the next one k. After each run the worker spends pids (threads
    that exit at once) until the counter stands where a run that started `PID_ALLOWANCE` of them leaves it.
    After a run that started more the worker is spent, replaced before another run (a fork, a thread: most
    programs that start processes or threads). The pids are spent after the reply (`settle`): a thread waits
    to be scheduled, and so would the caller."""

    def __init__(self) -> None:
        self.last = KernelFile.open(LAST_PID)
        # a thread that starts in pthread_exit(NULL) (the start routine's own signature) ends as it begins
        self.start, self.thread = ctypes.cast(LIBC.pthread_exit, ctypes.c_void_p), ctypes.c_ulong()
        # docker's runtime init spends a varying number of pids (its threads) before it becomes the worker:
        # from PID_START a new worker's first run gets the same pid, so a replaced worker's tells nothing
        # either
        self.owed = max(0, PID_START - int(self.last.read_small()))
        self.settle()

    def check(self, child: int) -> bool:
        """After the run whose child was `child`: True when `settle` can put the counter where it is after
        any run."""
        extra = int(self.last.read_small()) - child
        self.owed = PID_ALLOWANCE - extra
        return 0 <= extra <= PID_ALLOWANCE  # negative: the counter wrapped

    def settle(self) -> None:
        for _ in range(self.owed):
            if LIBC.pthread_create(ctypes.byref(self.thread), None, self.start, None) != 0:
                raise OSError(ctypes.get_errno(), "no thread to spend a pid on")
            LIBC.pthread_join(self.thread, None)


class InodeCounters:
    """The inode numbers of the writable tmpfs mounts: each new file or directory takes the next one, so a
    later run would read in its own files' numbers how many an earlier one made. After each run the worker
    spends numbers (files that vanish when closed, O_TMPFILE) until each counter stands `INODE_STRIDE` past
    where it stood before. A run that made more (its cwd and the request's files included) leaves the worker
    spent, like `PidCounter`. /dev/mqueue numbers its files from the host's one counter (pipes, sockets): out
    of any run's control."""

    def __init__(self, directories: Iterable[str]) -> None:
        self.last = {
            directory: number for directory in directories if (number := self.take(directory)) is not None
        }

    @staticmethod
    def take(directory: str) -> int | None:
        """The next inode number of `directory`'s file system, spent; None where it has no anonymous files."""
        try:
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o600)
        except OSError:
            return None
        try:
            return os.fstat(fd).st_ino
        finally:
            os.close(fd)

    def settle(self) -> bool:
        """After a run: True when every counter is where it always is after a run."""
        for directory, last in self.last.items():
            now = self.take(directory)
            if now is None or not 0 < now - last <= INODE_STRIDE:
                return False
            for _ in range(INODE_STRIDE - (now - last)):
                self.take(directory)
            self.last[directory] = last + INODE_STRIDE
        return True
