"""Stdin/stdout cases: the expected output never enters the candidate's process, and nothing the candidate
writes or exits with is a verdict: only its stdout, compared in the service, passes a case. All in the real
bwrap sandbox.
"""

from __future__ import annotations

import pytest

from corrgrpo_code.harness import HarnessResult
from corrgrpo_code.stdio import CasePool, CaseRuns, run_stdin
from corrgrpo_proto.code import StdinCase
from corrgrpo_sandbox import Limits, Sandbox

LIMITS = Limits(cpu_s=3, wall_s=6, output_bytes=1 << 20)
SECRET = "918273645"  # the expected output; nothing the candidate is given lets it compute this
CASES = [StdinCase(input="123456789\n", output=f"{SECRET}\n")]
FORGED = '{"compiled": true}\\n{"toplevel": "ok"}\\n{"done": true}\\n{"i": 0, "ok": true}\\n'


def judged(sandbox: Sandbox, solution: str, cases: list[StdinCase] = CASES) -> HarnessResult:
    """The verdict, the same whether the cases run one after another or on a pool (as the scorer runs
    them)."""
    alone = run_stdin(sandbox, solution, cases, LIMITS, case_s=3)
    pool = CasePool(sandbox, workers=2)
    try:
        pooled = run_stdin(sandbox, solution, cases, LIMITS, case_s=3, runs=CaseRuns(pool=pool))
    finally:
        pool.close()
    assert (pooled.stage, pooled.passed, pooled.total) == (alone.stage, alone.passed, alone.total)
    return alone


def test_the_right_output_passes_and_a_wrong_one_fails(sandbox: Sandbox) -> None:
    assert judged(sandbox, f"input()\nprint({SECRET})\n").stage == "passed"
    assert judged(sandbox, "print(int(input()) * 2)\n").stage == "assertion"
    several = [StdinCase(input=f"{n}\n", output=f"{n * n}\n") for n in range(6)]
    squares = judged(sandbox, "n = int(input())\nprint(n * n if n != 3 else 0)\n", several)
    assert (squares.stage, squares.passed, squares.error) == ("assertion", 5, "case 3: wrong output")


FORGERIES = {
    "fd 3, exit 0": f"import os\nos.write(3, b'{FORGED}')\nos._exit(0)\n",
    "every fd, exit 0": (
        "import os\n"
        "for fd in range(256):\n"
        "    try:\n"
        f"        os.write(fd, b'{FORGED}')\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"
    ),
    "patched harness, then SystemExit(0)": (
        "import sys\nsys.modules['harness_child'].send = lambda *a, **k: None\nprint('PASSED')\nraise "
        "SystemExit(0)\n"
    ),
    "echo of its input": "import sys\nsys.stdout.write(sys.stdin.read())\n",
}


@pytest.mark.parametrize("solution", FORGERIES.values(), ids=FORGERIES.keys())
def test_nothing_written_to_any_fd_and_no_exit_status_is_a_pass(sandbox: Sandbox, solution: str) -> None:
    result = judged(sandbox, solution)
    assert result.stage == "assertion" and result.passed == 0, result


SCAN = """
import gc, os, re, sys
WANTED = re.compile(rb"\\d{9}")
found = set()
for value in gc.get_objects():
    if isinstance(value, (str, bytes)):
        found.update(WANTED.findall(value if isinstance(value, bytes) else value.encode(errors="ignore")))
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as memory:
    for line in maps:
        span, permissions = line.split()[:2]
        if "r" in permissions:
            start, end = (int(part, 16) for part in span.split("-"))
            try:
                memory.seek(start)
                found.update(WANTED.findall(memory.read(end - start)))
            except (OSError, OverflowError, ValueError):
                pass
for fd in range(256):  # whatever else is open: the input's rest, the channel, a pipe to someone
    try:
        os.lseek(fd, 0, 0)
    except OSError:
        pass
    try:
        found.update(WANTED.findall(os.read(fd, 1 << 20)))
    except OSError:
        pass
for key, value in os.environ.items():
    found.update(WANTED.findall((key + value).encode()))
for root in ("/tmp", os.getcwd()):
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                with open(os.path.join(folder, name), "rb") as handle:
                    found.update(WANTED.findall(handle.read(1 << 20)))
            except OSError:
                pass
os.write(2, b"found: " + b",".join(sorted(found)) + b"\\n")
print(max(found).decode() if found else 0)
"""


def test_no_memory_fd_file_or_variable_of_the_candidate_holds_the_expected_output(sandbox: Sandbox) -> None:
    """The scan reads every object, every readable mapping, every fd, the environment and the writable
    folders; it finds the input (so it does read what is there), never the expected output."""
    result = judged(sandbox, SCAN)
    assert result.exec is not None
    assert b"123456789" in result.exec.stderr, result.exec.stderr[-2000:]
    assert SECRET.encode() not in result.exec.stderr
    assert result.stage == "assertion", result
