"""What a run guarantees about CPU and the page cache, in each shape (`SHAPES`; issue 48, items 2-4).

CPU: without the cgroup v1 counter (uid 10001, a cgroup v2 host) the worker counts a run's CPU from the
rusage of the processes it reaps and /proc of the live ones. A process the kernel reaped by itself (its parent
ignoring SIGCHLD, or SA_NOCLDWAIT) took its CPU with it: children doing the work read as ~0 s, and work split
over children passed a CPU limit. The seccomp filter now refuses both, so every process of a run ends as a
zombie that someone in the tree (or the worker) reaps, its CPU added to the reaper's.

Page cache: a run could evict a page of a read-only system file (a 0) or touch it (a 1), and a later run
read the bits without blocking (mincore, cachestat, preadv2 RWF_NOWAIT). The primitives that evict or tell
residency without blocking are refused; what remains is in the sandbox README.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from corrgrpo_testing.shapes import SHAPES

from .shapes import run_in_shape

BURN = """
import os, signal, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
def wait_all():
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
"""
IGNORE_SIGCHLD = """
try:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print("ignored")
except PermissionError:
    print("refused")
"""


def split(rounds: int) -> str:
    """Rounds of four children burning 0.05 s each, waited for (SIGCHLD ignored: until the kernel reaped)."""
    rounds_of_four = f"for _ in range({rounds}):\n    for _ in range(4):\n        if os.fork() == 0:\n"
    child = "            burn(0.05)\n            os._exit(0)\n    wait_all()\n"
    return BURN + IGNORE_SIGCHLD + rounds_of_four + child


# SA_NOCLDWAIT through the raw system call, the signal number's high bits set (the kernel reads its low 32)
NO_CHILD_WAIT = (
    BURN
    + """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
action = (ctypes.c_ulong * 4)(0, 2, 0, 0)  # SIG_DFL, SA_NOCLDWAIT, no restorer, empty mask
answer = libc.syscall(13, ctypes.c_long(signal.SIGCHLD | 1 << 32), action, None, 8)
print(answer, ctypes.get_errno())
for _ in range(4):
    if os.fork() == 0:
        burn(0.3)
        os._exit(0)
wait_all()
"""
)
ORPHANS = (
    BURN
    + """
ready, done = os.pipe()
if os.fork() == 0:
    for _ in range(2):
        if os.fork() == 0:  # orphaned at once: the worker reaps them
            burn(0.3)
            os.write(done, b"x")
            os._exit(0)
    os._exit(0)
os.read(ready, 1)
os.read(ready, 1)
"""
)
ZOMBIES = (  # never waited for: the parent ends, the worker reaps them
    BURN
    + """
ready, done = os.pipe()
for _ in range(4):
    if os.fork() == 0:
        burn(0.25)
        os.write(done, b"x")
        os._exit(0)
for _ in range(4):
    os.read(ready, 1)
"""
)
THREADS = """
import threading, time
def burn():
    end = time.thread_time() + 0.25
    while time.thread_time() < end:
        pass
threads = [threading.Thread(target=burn) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("joined")
"""

# 16 pages of a read-only file of the standard library that nothing imports (its module never runs)
PAGES = """
import ctypes, json, mmap, os, pydoc_data
libc = ctypes.CDLL(None, use_errno=True)
PAGE, FIRST, COUNT = mmap.PAGESIZE, 32, 16
fd = os.open(os.path.join(os.path.dirname(pydoc_data.__file__), "topics.py"), os.O_RDONLY)
view = mmap.mmap(fd, (FIRST + COUNT) * PAGE, access=mmap.ACCESS_COPY)  # private: never written back
view.madvise(mmap.MADV_RANDOM)  # a fault reads its own page only
def outcome(call):
    try:
        call()
        return "done"
    except OSError as error:
        return error.errno
"""
STORE = (
    PAGES
    + """
BITS = {bits}
found = {{
    "fadvise DONTNEED": outcome(lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)),
    "madvise PAGEOUT": outcome(lambda: view.madvise(21, FIRST * PAGE, COUNT * PAGE)),
    "madvise COLD": outcome(lambda: view.madvise(20, FIRST * PAGE, COUNT * PAGE)),
    "madvise REMOVE": outcome(lambda: view.madvise(mmap.MADV_REMOVE, FIRST * PAGE, COUNT * PAGE)),
}}
for index, bit in enumerate(BITS):
    if bit:
        view[(FIRST + index) * PAGE]
print(json.dumps(found))
"""
)
LOAD = (
    PAGES
    + """
def mincore():
    vector = (ctypes.c_ubyte * COUNT)()
    base = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(view)) + FIRST * PAGE)
    if libc.syscall(27, base, COUNT * PAGE, vector) != 0:
        return ctypes.get_errno()
    return [value & 1 for value in vector]
def cachestat():
    bits = []
    for index in range(COUNT):
        span = (ctypes.c_uint64 * 2)((FIRST + index) * PAGE, PAGE)
        stat = (ctypes.c_uint64 * 5)()
        if libc.syscall(451, fd, span, stat, 0) != 0:
            return ctypes.get_errno()
        bits.append(int(stat[0]))
    return bits
def nowait():
    bits = []
    for index in range(COUNT):
        try:
            os.preadv(fd, [bytearray(1)], (FIRST + index) * PAGE, os.RWF_NOWAIT)
            bits.append(1)
        except BlockingIOError:
            bits.append(0)
        except OSError as error:
            return error.errno
    return bits
print(json.dumps({"mincore": mincore(), "cachestat": cachestat(), "preadv2 RWF_NOWAIT": nowait()}))
"""
)
ALLOWED = (
    PAGES
    + """
import signal
old_action = (ctypes.c_ulong * 4)()
anonymous = mmap.mmap(-1, 64 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
anonymous[:] = b"x" * len(anonymous)
print(json.dumps({
    "anonymous DONTNEED": outcome(lambda: anonymous.madvise(mmap.MADV_DONTNEED)),
    "anonymous FREE": outcome(lambda: anonymous.madvise(mmap.MADV_FREE)),
    "file DONTNEED": outcome(lambda: view.madvise(mmap.MADV_DONTNEED)),
    "file WILLNEED": outcome(lambda: view.madvise(mmap.MADV_WILLNEED)),
    "preadv2 without flags": outcome(lambda: os.preadv(fd, [bytearray(1)], 0, 0)),
    "SIGCHLD's action": ctypes.get_errno() if libc.syscall(13, 17, None, old_action, 8) else "done",
    "handle SIGUSR1": outcome(lambda: signal.signal(signal.SIGUSR1, lambda *_: None)),
    "readahead": ctypes.get_errno() if libc.syscall(187, fd, 0, PAGE) else "done",
    "remap_file_pages": ctypes.get_errno() if libc.syscall(216, ctypes.c_void_p(0), 0, 0, 0, 0) else "done",
    "process_madvise": ctypes.get_errno() if libc.syscall(440, 0, None, 0, 21, 0) else "done",
}))
"""
)
ONES, ALTERNATE = [1] * 16, [index % 2 for index in range(16)]

PROGRAMS: dict[str, tuple[str, dict[str, float]]] = {  # name: (source, limits)
    "split, SIGCHLD ignored": (split(8), {"cpu_s": 5, "wall_s": 60}),
    "split past the CPU limit": (split(16), {"cpu_s": 1, "wall_s": 60}),
    "SA_NOCLDWAIT": (NO_CHILD_WAIT, {"cpu_s": 5, "wall_s": 60}),
    "orphans": (ORPHANS, {"cpu_s": 5, "wall_s": 60}),
    "zombies": (ZOMBIES, {"cpu_s": 5, "wall_s": 60}),
    "threads": (THREADS, {"cpu_s": 5, "wall_s": 60}),
    "store ones": (STORE.format(bits=ONES), {"wall_s": 30}),
    "load after ones": (LOAD, {"wall_s": 30}),
    "store alternate": (STORE.format(bits=ALTERNATE), {"wall_s": 30}),
    "load after alternate": (LOAD, {"wall_s": 30}),
    "allowed": (ALLOWED, {"wall_s": 30}),
}


@pytest.fixture(scope="module", params=SHAPES)
def report(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every program of `PROGRAMS`, in order, in one sandbox of the shape; with the shape's facts."""
    runs = [{"source": source, "limits": limits} for source, limits in PROGRAMS.values()]
    found = run_in_shape(request.param, runs)
    if request.param == "bwrap-uid10001":
        assert (found["uid"], found["cgroup_counter"]) == (10001, False), "not the image's shape"
    if request.param == "bwrap-cgroup2":
        assert not found["cgroup_counter"], "a cgroup v1 counter was found"
    return {"shape": request.param, **dict(zip(PROGRAMS, found["results"], strict=True))}


def ran(result: dict[str, Any]) -> None:
    assert result["anomaly"] is None and result["exit_code"] == 0, result


def test_children_the_kernel_would_reap_are_counted(report: dict[str, Any]) -> None:
    result = report["split, SIGCHLD ignored"]
    ran(result)
    assert result["stdout"] == "refused\n"
    assert result["cpu_s"] >= 1.5, result  # 32 children x 0.05 s; it read ~0.003 s without a cgroup counter


def test_work_split_over_children_is_held_to_the_cpu_limit(report: dict[str, Any]) -> None:
    result = report["split past the CPU limit"]  # 3.2 s of work against the tree's 2 s cap
    assert result["timed_out"] and result["exit_code"] is None and result["anomaly"] is None, result
    assert result["cpu_s"] >= 1.9 and result["wall_s"] < 50, result  # the CPU cap ended it, not the wall


def test_no_child_wait_is_refused_and_counted(report: dict[str, Any]) -> None:
    result = report["SA_NOCLDWAIT"]
    ran(result)
    assert result["stdout"] == "-1 1\n", result  # EPERM
    assert result["cpu_s"] >= 1.1, result


@pytest.mark.parametrize("name", ["orphans", "zombies", "threads"])
def test_orphans_zombies_and_threads_are_counted(report: dict[str, Any], name: str) -> None:
    result = report[name]
    ran(result)
    assert result["cpu_s"] >= {"orphans": 0.55, "zombies": 0.95, "threads": 0.95}[name], result


def test_no_page_can_be_evicted(report: dict[str, Any]) -> None:
    # EPERM; madvise's refused advice gets EINVAL, as advice the kernel does not know (PAGEOUT was "done")
    refused = {"fadvise DONTNEED": 1, "madvise PAGEOUT": 22, "madvise COLD": 22, "madvise REMOVE": 22}
    for name in ("store ones", "store alternate"):
        ran(report[name])
        assert json.loads(report[name]["stdout"]) == refused, report[name]


def test_a_later_run_reads_nothing_of_the_page_cache(report: dict[str, Any]) -> None:
    after_ones, after_alternate = report["load after ones"], report["load after alternate"]
    ran(after_ones)
    ran(after_alternate)
    # before: each method read the bits the run before had stored
    assert after_ones["stdout"] == after_alternate["stdout"], (after_ones, after_alternate)
    assert set(json.loads(after_ones["stdout"]).values()) == {1}, after_ones  # refused: EPERM


def test_what_allocators_and_the_c_library_use_still_works(report: dict[str, Any]) -> None:
    result = report["allowed"]
    ran(result)
    found = json.loads(result["stdout"])
    refused = {"readahead": 1, "remap_file_pages": 1, "process_madvise": 1}
    assert found == {**dict.fromkeys(set(found) - set(refused), "done"), **refused}, found
