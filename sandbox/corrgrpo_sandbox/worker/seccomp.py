"""The seccomp filter the worker installs on itself before its first run, so every run's child inherits it
(stdlib only; installed by `server.WorkerServer.serve`).

The program shares its uid with the worker (one uid is mapped in bwrap's user namespace; the docker backend
gives the worker's container one uid), and for the kernel the same uid is enough to change another process's
limits, priority, CPU affinity or scheduling, or, unless it is non-dumpable, to trace it. So the syscalls that
reach another process or leave state behind the run are refused with EPERM:

* aimed at another process: `prlimit64`, `setpriority`, `sched_set{affinity,param,scheduler,attr}`,
  `ioprio_set`, `migrate_pages` and `move_pages` are allowed on the caller only (pid 0: how the C library
  calls them on itself); `ptrace`, `process_vm_{readv,writev}`, `kcmp` and `pidfd_getfd` are refused outright;
* state that would outlive the run and be visible to later runs: the kernel keyrings (`add_key`,
  `request_key`, `keyctl`), the UTS names (`sethostname`, `setdomainname`) and every socket but `AF_UNIX`
  (`socket` and `socketpair` of another family): the network namespace is the worker's for its whole life, and
  a closed TCP connection stays in `/proc/net/tcp` (TIME_WAIT) for a minute with addresses and ports the
  program chose, as do the namespace's packet counters. Unix sockets (multiprocessing and asyncio need them)
  end with their processes, but for a cycle of them in flight, which the worker treats as a leftover. No SysV
  IPC objects (`shmget`, `semget`, `msgget`): the namespace numbers each one after all it made before. Files
  are removed by the worker after each run. Namespaced sysctls are behind the read-only `/proc` (see
  `isolation.bwrap_head`);
* ways around the filter or the mounts: `io_uring_*` (its operations bypass seccomp), `bpf`,
  `perf_event_open`, `userfaultfd`, the mount API, `unshare` and `setns`, and on x86-64 the x32 ABI;
* CPU outside the count: any new action for SIGCHLD (`rt_sigaction(SIGCHLD, act)`; querying stays). With
  SIGCHLD ignored or SA_NOCLDWAIT the kernel reaps a run's children itself and their CPU is lost to every
  counter but a cgroup's. Without them each process waits as a zombie until its parent or the worker reaps it,
  its CPU then added to the reaper's (`process_tree`);
* the host's page cache, shared by every run: a run could evict a page of a read-only file (a 0) or touch
  it (a 1) and a later run read it without blocking. Refused: `mincore`, `cachestat` and `preadv2`/`pwritev2`
  with RWF_NOWAIT (residency), `fadvise64`, `readahead`, `remap_file_pages`, `process_madvise` and `madvise`
  with any advice but `ADVICE` (eviction: PAGEOUT, COLD, REMOVE; KSM merging, a cross-process side channel).
  Touching a cold page and reading residency back by fault-around or timing: under bwrap no page a run sees
  is cold (`rootfs.py`). Under docker that remains (the sandbox README).

Why a filter and not a second uid: bwrap maps exactly one uid and cannot run the program as another one
without a setuid helper. The filter holds the same under bwrap, docker and for a root service, costs about a
microsecond per filtered syscall, and is checked after every run anyway (`residue.Invariants`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JUMP_SET = 0x45  # BPF_JMP | BPF_JSET | BPF_K: any of k's bits
RETURN = 0x06  # BPF_RET | BPF_K
NR_OFFSET, ARCH_OFFSET, ARGS_OFFSET = 0, 4, 16  # struct seccomp_data
X32_SYSCALL_BIT = 0x40000000

# name: (x86-64 number, aarch64 number). The same names on both
SYSCALLS = {
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    "perf_event_open": (298, 241),
    "bpf": (321, 280),
    "userfaultfd": (323, 282),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "sethostname": (170, 161),
    "setdomainname": (171, 162),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "unshare": (272, 97),
    "setns": (308, 268),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "prlimit64": (302, 261),
    "setpriority": (141, 140),
    "sched_setaffinity": (203, 122),
    "sched_setparam": (142, 118),
    "sched_setscheduler": (144, 119),
    "sched_setattr": (314, 274),
    "ioprio_set": (251, 30),
    "migrate_pages": (256, 238),
    "move_pages": (279, 239),
    "shmget": (29, 194),
    "semget": (64, 190),
    "msgget": (68, 186),
    "socket": (41, 198),
    "socketpair": (53, 199),
    "mincore": (27, 232),
    "fadvise64": (221, 223),
    "readahead": (187, 213),
    "remap_file_pages": (216, 234),
    "cachestat": (451, 451),
    "process_madvise": (440, 440),
    "madvise": (28, 233),
    "preadv2": (327, 286),
    "pwritev2": (328, 287),
    "rt_sigaction": (13, 134),
}
PRIO_PROCESS, IOPRIO_WHO_PROCESS, AF_UNIX = 0, 1, 1
SIGCHLD, RWF_NOWAIT = 17, 0x8  # the same on both architectures
# madvise advice that acts on the caller's own mappings only (what allocators and the C library use: DONTNEED
# and FREE drop anonymous pages, and only unmap file pages; guard regions); COLD, PAGEOUT, REMOVE, COLLAPSE,
# KSM and test advice get EINVAL, the kernel's answer to unknown advice, which libraries fall back from
ADVICE = (0, 1, 2, 3, 4, 8, 10, 11, 14, 15, 16, 17, 18, 19, 22, 23, 24, 102, 103)
# allowed only with these (argument index, value) pairs: the caller itself, a unix socket
CONDITIONAL = {
    "prlimit64": ((0, 0),),
    "sched_setaffinity": ((0, 0),),
    "sched_setparam": ((0, 0),),
    "sched_setscheduler": ((0, 0),),
    "sched_setattr": ((0, 0),),
    "migrate_pages": ((0, 0),),
    "move_pages": ((0, 0),),
    "setpriority": ((0, PRIO_PROCESS), (1, 0)),
    "ioprio_set": ((0, IOPRIO_WHO_PROCESS), (1, 0)),
    "socket": ((0, AF_UNIX),),
    "socketpair": ((0, AF_UNIX),),
}
# refused only when every condition holds, each (argument index, test, value) on the argument's low 32 bits
# (the kernel reads an int argument's, whatever the high ones); "set": a pointer not NULL (either half)
REFUSED_WHEN = {
    "rt_sigaction": ((0, "equal", SIGCHLD), (1, "set", 0)),
    "preadv2": ((5, "bits", RWF_NOWAIT),),
    "pwritev2": ((5, "bits", RWF_NOWAIT),),
}
# allowed only with one of these values of the argument, else this errno
ONE_OF = {"madvise": (2, ADVICE, errno.EINVAL)}
REFUSED = tuple(name for name in SYSCALLS if name not in {**CONDITIONAL, **REFUSED_WHEN, **ONE_OF})
ARCHITECTURES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}  # AUDIT_ARCH_*, column in SYSCALLS


class _Program:
    """Classic BPF with forward jumps to labels, resolved when assembled."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def add(self, code: int, k: int, if_true: str | int = 0, if_false: str | int = 0) -> None:
        self.code.append((code, if_true, if_false, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        def offset(target: str | int, at: int) -> int:
            if isinstance(target, int):
                return target
            distance = self.labels[target] - at - 1
            assert 0 <= distance < 256, "BPF jumps are forward and short"
            return distance

        return b"".join(
            struct.pack("=HBBI", code, offset(jt, i), offset(jf, i), k)
            for i, (code, jt, jf, k) in enumerate(self.code)
        )


def build_filter(machine: str | None = None) -> bytes:
    """The filter for this machine's architecture as `struct sock_filter[]` bytes; ValueError for another
    one."""
    machine = machine or os.uname().machine
    if machine not in ARCHITECTURES:
        raise ValueError(f"no seccomp filter for architecture {machine}")
    audit_arch, column = ARCHITECTURES[machine]
    program = _Program()
    program.add(LOAD_WORD, ARCH_OFFSET)
    program.add(JUMP_EQUAL, audit_arch, 1, 0)
    program.add(RETURN, RET_KILL_PROCESS)  # a syscall of another ABI (int 0x80 on x86-64)
    program.add(LOAD_WORD, NR_OFFSET)
    if machine == "x86_64":
        program.add(JUMP_AT_LEAST, X32_SYSCALL_BIT, "refuse", 0)
    for name in REFUSED:
        program.add(JUMP_EQUAL, SYSCALLS[name][column], "refuse", 0)
    for name in (*CONDITIONAL, *REFUSED_WHEN, *ONE_OF):
        program.add(JUMP_EQUAL, SYSCALLS[name][column], f"check {name}", 0)
    program.add(RETURN, RET_ALLOW)
    for name, pairs in CONDITIONAL.items():
        program.label(f"check {name}")
        for index, value in pairs:  # both 32-bit halves of the 64-bit argument (little-endian)
            program.add(LOAD_WORD, ARGS_OFFSET + 8 * index)
            program.add(JUMP_EQUAL, value, 0, "refuse")
            program.add(LOAD_WORD, ARGS_OFFSET + 8 * index + 4)
            program.add(JUMP_EQUAL, 0, 0, "refuse")
        program.add(RETURN, RET_ALLOW)
    for name, conditions in REFUSED_WHEN.items():
        program.label(f"check {name}")
        for index, test, value in conditions:
            program.add(LOAD_WORD, ARGS_OFFSET + 8 * index)
            if test == "set":
                program.add(JUMP_EQUAL, 0, 0, f"{name} {index} set")
                program.add(LOAD_WORD, ARGS_OFFSET + 8 * index + 4)
                program.add(JUMP_EQUAL, 0, f"allow {name}", 0)
                program.label(f"{name} {index} set")
            else:
                program.add(JUMP_EQUAL if test == "equal" else JUMP_SET, value, 0, f"allow {name}")
        program.add(RETURN, RET_ERRNO | errno.EPERM)
        program.label(f"allow {name}")
        program.add(RETURN, RET_ALLOW)
    for name, (index, values, error) in ONE_OF.items():
        program.label(f"check {name}")
        program.add(LOAD_WORD, ARGS_OFFSET + 8 * index)
        for value in values:
            program.add(JUMP_EQUAL, value, f"allow {name}", 0)
        program.add(RETURN, RET_ERRNO | error)
        program.label(f"allow {name}")
        program.add(RETURN, RET_ALLOW)
    program.label("refuse")
    program.add(RETURN, RET_ERRNO | errno.EPERM)
    return program.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(filter_bytes: bytes) -> None:
    """Install the filter on the calling process (irreversible; every child it forks inherits it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(filter_bytes, len(filter_bytes))
    program = _SockFprog(len(filter_bytes) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
