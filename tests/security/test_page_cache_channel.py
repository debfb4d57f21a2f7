"""A memo through the host's page cache earns no efficiency, in both modes (issue 48, item 3).

The program is exactly as slow as the reference, but keeps its answers across runs: each answer's bits are
pages of a read-only file of the standard library (evicted: 0, touched: 1, after a marker), read back without
blocking (mincore, else preadv2 RWF_NOWAIT). Its first run computes and stores; every later run, timing runs
included, returns the stored answers at once. It earned efficiency 0.92 in both modes here (0.95 in the
issue); the sandbox now refuses those primitives, so it finds no memo and computes every time, like a copy of
the reference. Scored in-process through the code scorer, in the real bwrap sandbox. A memo that only touches
pages and reads them back by fault-around or timing is not refused: the sandbox README lists it.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest

from corrgrpo_code.config import ScoringConfig
from corrgrpo_code.scorer import CodeScorer
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

def work(n):
    answer = recall(n)
    if answer is None:
        busy(0.03)
        answer = n * 2
        store(n, answer)
    return answer
"""
)
TEST = "def check(candidate):\n    assert candidate(3) == 6\n    assert candidate(51) == 102\n"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.mark.parametrize("mode", ["calibrated", "paper"])
def test_a_page_cache_memo_earns_no_more_than_a_copy_of_the_reference(sandbox: Sandbox, mode: str) -> None:
    task_id = f"memo-{uuid.uuid4().hex}"  # no reference time shared with an earlier test
    problem = CodeProblem(task_id=task_id, entry_point="work", test=TEST, reference=REFERENCE)
    items = [CodeItem(problem=problem, completion=fenced(code)) for code in (f"# a copy\n{REFERENCE}", MEMO)]
    config = replace(ScoringConfig(), efficiency_mode=mode, run_ttl_s=0)
    scorer = CodeScorer(sandbox, MemoryStore(), {}, config, workers=2)
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
        assert memo.info["t_ratio"] > 0.5, memo.info  # its median time was 0.04 of the reference's
