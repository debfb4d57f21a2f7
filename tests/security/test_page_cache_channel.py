"""A memo through the host's page cache earns no efficiency, in both modes (issue 48, item 3).

The program is exactly as slow as the reference, but keeps its answers across runs: each answer's bits are
pages of a read-only file of the standard library (evicted: 0, touched: 1, after a marker), read back without
blocking (mincore, else preadv2 RWF_NOWAIT). Its first run computes and stores; every later run, timing runs
included, returns the stored answers at once. It earned efficiency 0.92 in both modes here (0.95 in the
issue); the sandbox now refuses those primitives, so it finds no memo and computes every time, like a copy of
the reference. Scored in-process through the code scorer, in the real bwrap sandbox.

The memos that need no refused call: a page made resident by reading it is a 1, read back by a later run by
fault-around (one fault maps the resident pages around it: the run's own RSS grows by them) or by the time a
read takes (each page readable once: runs consume slots). They earned efficiency 0.43 to 0.87 before every
file a run sees was a copy on tmpfs, always resident (`corrgrpo_sandbox/rootfs.py`); now they read all ones
and find no memo.
"""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest

from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_proto.code import CodeItem, CodeProblem
from corrgrpo_sandbox import Limits, Sandbox

LIMITS = Limits()  # the sandbox fixture's (conftest)
BUSY = """import time
def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
"""
WORK = """
def work(n):
    answer = recall(n)
    if answer is None:
        busy(0.03)
        answer = n * 2
        store(n, answer)
    return answer
"""
REFERENCE = BUSY + "def work(n):\n    busy(0.03)\n    return n * 2\n"
MEMO = (
    BUSY
    + """
import ctypes, mmap, os, pydoc_data
PAGE, MARKER, BITS = mmap.PAGESIZE, (1, 0, 1, 1), 8
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(os.path.join(os.path.dirname(pydoc_data.__file__), "topics.py"), os.O_RDONLY)
view = mmap.mmap(fd, 128 * PAGE, access=mmap.ACCESS_COPY)
view.madvise(mmap.MADV_RANDOM)
base = ctypes.addressof(ctypes.c_char.from_buffer(view))

def first_page(n):
    return 64 + (len(MARKER) + BITS) * (n % 5)

def resident(page, count):
    vector = (ctypes.c_ubyte * count)()
    if libc.syscall(27, ctypes.c_void_p(base + page * PAGE), count * PAGE, vector) == 0:
        return [value & 1 for value in vector]
    try:
        return [len(os.preadv(fd, [bytearray(1)], (page + i) * PAGE, os.RWF_NOWAIT)) for i in range(count)]
    except BlockingIOError:
        return None  # a page not resident: NOWAIT reads stop here, which is no memo
    except OSError:
        return None

def recall(n):
    bits = resident(first_page(n), len(MARKER) + BITS)
    if bits is None or tuple(bits[: len(MARKER)]) != MARKER:
        return None
    return sum(bit << index for index, bit in enumerate(bits[len(MARKER):]))

def store(n, answer):
    page = first_page(n)
    try:
        os.posix_fadvise(fd, page * PAGE, (len(MARKER) + BITS) * PAGE, os.POSIX_FADV_DONTNEED)
    except OSError:
        return
    bits = MARKER + tuple(answer >> index & 1 for index in range(BITS))
    for index, bit in enumerate(bits):
        if bit:
            view[(page + index) * PAGE]
"""
    + WORK
)
# The largest shared library the run can see (cold pages, where host files are shown), a region of it per
# test. Each answer is kept with its complement: pages made resident by anything else read as no memo, not a
# wrong one.
LIBRARY = """
import contextlib, mmap, os
PAGE = mmap.PAGESIZE
MARKER, BITS = (1, 0, 1), 7
LENGTH = len(MARKER) + 2 * BITS

def largest_library():
    found = []
    interpreter_lib = os.path.dirname(os.__file__) + "/.."
    for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", interpreter_lib):
        with contextlib.suppress(OSError):
            for entry in os.scandir(directory):
                if ".so" in entry.name and entry.is_file(follow_symlinks=False):
                    found.append((entry.stat().st_size, entry.path))
    return max(found)[1]

fd = os.open(largest_library(), os.O_RDONLY)
view = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
view.madvise(mmap.MADV_RANDOM)  # a fault reads its page alone
PAGES = len(view) // PAGE
FIRST = int(PAGES * FRACTION) // 16 * 16

def encode(answer):
    bits = tuple(answer >> k & 1 for k in range(BITS))
    return MARKER + bits + tuple(1 - bit for bit in bits)

def decode(bits):
    data, check = bits[len(MARKER) : len(MARKER) + BITS], bits[len(MARKER) + BITS :]
    if tuple(bits[: len(MARKER)]) != MARKER or any(a == b for a, b in zip(data, check)):
        return None
    return sum(bit << k for k, bit in enumerate(data))
"""
# One bit per 64 KiB window (page 5 touched for a 1), read back without changing it: a fault on page 4 maps
# the window's resident pages, so the run's resident set grows by one more page for a 1.
FAULT_AROUND_MEMO = (
    BUSY
    + LIBRARY
    + """
statm = open("/proc/self/statm")

def resident():
    statm.seek(0)
    return int(statm.read().split()[1])

def window(n, index):
    return (FIRST + 16 * (LENGTH * (n % 5 // 2) + index)) % PAGES // 16 * 16

def recall(n):
    bits = []
    for index in range(LENGTH):
        before = resident()
        view[(window(n, index) + 4) * PAGE]
        bits.append(1 if resident() - before > 1 else 0)
    return decode(bits)

def store(n, answer):
    for index, bit in enumerate(encode(answer)):
        if bit:
            view[(window(n, index) + 5) * PAGE]
"""
)
# A page read back by the time its first read takes (from disk: 40 us or more; resident: a few us), which
# makes it resident: each run consumes the first slot whose flag page was cold, the answer in the pages after.
TIMED_MEMO = (
    BUSY
    + LIBRARY
    + """
import time
SLOTS, STRIDE = 24, 4

def page(n, slot, index):
    return (FIRST + STRIDE * ((1 + LENGTH) * (SLOTS * (n % 5 // 2) + slot) + index)) % PAGES

def fast(number):
    start = time.perf_counter_ns()
    view[number * PAGE]
    return time.perf_counter_ns() - start < 20_000

def recall(n):
    for slot in range(SLOTS):
        if not fast(page(n, slot, 0)):  # a slot no earlier run read
            return decode([int(fast(page(n, slot, 1 + index))) for index in range(LENGTH)])
    return None

def store(n, answer):
    for slot in range(SLOTS):
        for index, bit in enumerate(encode(answer)):
            if bit:
                view[page(n, slot, 1 + index) * PAGE]
"""
)
TEST = "def check(candidate):\n    assert candidate(3) == 6\n    assert candidate(51) == 102\n"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def touching_memo(program: str) -> str:
    """`program` on a region of the library no other test used (a page once resident stays so a long time)."""
    return program.replace("FRACTION", f"{random.uniform(0.1, 0.5):.6f}") + WORK


MEMOS = {
    "evicting": lambda: MEMO,
    "fault-around": lambda: touching_memo(FAULT_AROUND_MEMO),
    "timed-read": lambda: touching_memo(TIMED_MEMO),
}


@pytest.mark.parametrize("memo_kind", list(MEMOS))
@pytest.mark.parametrize("mode", ["calibrated", "paper"])
def test_a_page_cache_memo_earns_no_more_than_a_copy_of_the_reference(
    sandbox: Sandbox,
    mode: str,
    memo_kind: str,
) -> None:
    task_id = f"memo-{uuid.uuid4().hex}"  # no reference time shared with an earlier test
    problem = CodeProblem(task_id=task_id, entry_point="work", test=TEST, reference=REFERENCE)
    memo_code = MEMOS[memo_kind]()
    # an earlier run of the memo (as in an earlier batch) stores its answers: in paper mode one run is both
    # the checked and the timed one
    earlier = sandbox.run(f"{memo_code}\nassert work(3) == 6 and work(51) == 102\n", limits=LIMITS)
    assert earlier.exit_code == 0, earlier.stderr
    codes = (f"# a copy\n{REFERENCE}", memo_code)
    items = [CodeItem(problem=problem, completion=fenced(code)) for code in codes]
    settings = CodeSettings(code_efficiency_mode=mode, code_run_ttl_s=0, code_workers=2)
    scorer = CodeScorer(sandbox, MemoryStore(), {}, settings)
    try:
        copy, memo = asyncio.run(scorer.score(items))
    finally:
        scorer.close()
    assert isinstance(copy, Scored) and isinstance(memo, Scored), (copy, memo)
    assert copy.components["correct"] == memo.components["correct"] == 1, (copy.info, memo.info)
    # the memo earned 0.92; a copy earns the timer's noise (paper mode: ~0.1 on average, more under load)
    noise = max(copy.components["efficiency"], 0.05) + 0.3
    assert memo.components["efficiency"] <= noise, (copy.info, memo.info)
    if mode == "calibrated":
        assert memo.info.get("t_ratio", 0.0) > 0.5, memo.info  # its median time was 0.04 of the reference's
