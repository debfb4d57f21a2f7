"""The test harness: honest stages, and abuse that must never turn a wrong program into a pass."""

from __future__ import annotations

import ast
import gc
import sys
import threading
from collections.abc import Iterator

import pytest

from corrgrpo_code.extract import parse_solution
from corrgrpo_code.harness import (
    CHILD_FILE,
    Expect,
    HarnessResult,
    IOTest,
    Near,
    canonical,
    encode,
    run_assert,
    run_io,
)
from corrgrpo_code.harness_child import (
    UNCHANGED,
    NotData,
    PackError,
    changes,
    collector_paused,
    decoded,
    encoded,
    held,
    pack,
    unpack,
)
from corrgrpo_code.split import split_check
from corrgrpo_sandbox import Limits, Sandbox

LIMITS = Limits(cpu_s=2, wall_s=4, output_bytes=1 << 20)
SECRET = 918273645  # the expected answer; never computable from the input
IO_TESTS = [
    IOTest("candidate(3)", "_out == 9", Expect.equals(9)),
    IOTest("candidate(4)", f"_out == {SECRET}", Expect.equals(SECRET)),
]
# by the judge
JUDGED = [IOTest("candidate(3)", "abs(_out - 9) < 1e-9"), IOTest("candidate(4)", f"_out in ({SECRET}, -1)")]
ASSERT_TEST = f"def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(4) == {SECRET}\n"
RIGHT = f"def f(x):\n    return {SECRET} if x == 4 else x * x\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(workers=2, limits=LIMITS, preload=[CHILD_FILE]) as box:
        yield box


def both_modes(sandbox: Sandbox, solution: str) -> list[HarnessResult]:
    return [
        run_io(sandbox, "", solution, "f", IO_TESTS, LIMITS),
        run_assert(sandbox, "", solution, "f", ASSERT_TEST, LIMITS),
    ]


def test_a_right_program_passes_in_both_modes(sandbox: Sandbox) -> None:
    io, asserted = both_modes(sandbox, RIGHT)
    assert (io.stage, io.passed, io.total, io.mode) == ("passed", 2, 2, "io")
    assert (asserted.stage, asserted.mode) == ("passed", "assert")
    assert io.exec is not None and io.exec.cpu_s > 0


@pytest.mark.parametrize(
    ("solution", "stage"),
    [
        ("def f(x) return x", "syntax"),
        ("", "syntax"),
        ("raise ImportError('no such module')\ndef f(x): return x * x", "toplevel"),
        ("def f(x):\n    return 1 / 0", "test_error"),
        ("def f(x):\n    return x * x", "assertion"),
        ("def f(x):\n    while True: pass", "timeout"),
    ],
)
def test_each_failure_reports_its_stage(sandbox: Sandbox, solution: str, stage: str) -> None:
    for result in both_modes(sandbox, solution):
        assert result.stage == stage, (result.mode, result.error)


def test_io_counts_tests_and_reports_the_first_failure(sandbox: Sandbox) -> None:
    result = run_io(sandbox, "", "def f(x):\n    return x * x", "f", IO_TESTS, LIMITS)
    assert (result.stage, result.passed, result.total) == ("assertion", 1, 2)
    assert result.error is not None and "test 1" in result.error


def test_an_assertion_before_an_error_is_an_assertion_like_in_check(sandbox: Sandbox) -> None:
    solution = "def f(x):\n    if x == 4:\n        raise ValueError\n    return 0"
    result = run_io(sandbox, "", solution, "f", IO_TESTS, LIMITS)
    assert result.stage == "assertion"


ALWAYS_EQUAL = """
class Anything(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
def f(x):
    return Anything(0)
"""

PATCHED_BUILTINS = """
import builtins, json, sys
builtins.AssertionError = type("Swallowed", (Exception,), {})
builtins.isinstance = lambda *a: True
builtins.type = lambda *a: int
json.dumps = lambda *a, **k: '{"i": 1, "out": 0}'
main = sys.modules["__main__"]
main._encode = lambda x: 0
def f(x):
    return 0
"""

EXIT_BEFORE_TESTS = [
    "import sys\nsys.exit(0)\ndef f(x): return 0",
    "import os\nos._exit(0)\ndef f(x): return 0",
]
EXIT_IN_CALL = ["def f(x):\n    import sys\n    sys.exit(0)", "def f(x):\n    import os\n    os._exit(0)"]

READ_THE_TESTS = """
import gc, os, sys, re
def find():
    found = set()
    for path in os.listdir("."):
        found.update(re.findall(r"\\d{9}", open(path, errors="ignore").read()))
    main = sys.modules["__main__"]
    for value in list(vars(main).values()) + gc.get_objects():
        if isinstance(value, str):
            found.update(re.findall(r"\\d{9}", value))
        elif isinstance(value, int) and value > 10**8:
            found.add(str(int(value)))
    for path in ("/proc/self/cmdline", "/proc/self/environ", "/proc/1/cmdline", "/proc/1/environ"):
        try:
            found.update(re.findall(r"\\d{9}", open(path, errors="ignore").read()))
        except OSError:
            pass
    return found
def f(x):
    return x * x if x != 4 else int(max(find() - {"123456789"}, default="0"))
"""


@pytest.mark.parametrize(
    "solution",
    [ALWAYS_EQUAL, PATCHED_BUILTINS, *EXIT_BEFORE_TESTS, *EXIT_IN_CALL],
    ids=["always-equal", "patched-builtins", "sys-exit", "os-exit", "sys-exit-in-call", "os-exit-in-call"],
)
def test_abuse_never_passes_in_either_mode(sandbox: Sandbox, solution: str) -> None:
    for result in both_modes(sandbox, solution):
        assert result.stage != "passed", result.mode
        assert result.passed < result.total


def test_reading_the_tests_finds_no_answer_in_either_mode(sandbox: Sandbox) -> None:
    """The expected value never enters the candidate's process: I/O mode sends only the calls, assert mode
    runs the test in the judge (tests/security/test_assert_mode_forgery.py scans the raw memory too)."""
    io, asserted = both_modes(sandbox, READ_THE_TESTS)
    assert (io.stage, io.passed) == ("assertion", 1), io.error
    assert asserted.stage == "assertion", asserted.error


def test_forged_channel_messages_do_not_pass_in_io_mode(sandbox: Sandbox) -> None:
    forger = (
        "import os\n"
        'os.write(3, b\'{"toplevel": "ok"}\\n{"i": 0, "out": 9}\\n{"i": 1, "out": 0}\\n{"done": true}\\n\')\n'
        "os._exit(0)\n"
    )
    assert run_io(sandbox, "", forger, "f", IO_TESTS, LIMITS).stage == "assertion"
    for payload in ("b'not json\\n'", "b'[' * 100000 + b'\\n'", 'b\'{"i": [1], "out": 9}\\n\''):
        garbage = f"import os\nos.write(3, {payload})\ndef f(x): return 0"
        assert run_io(sandbox, "", garbage, "f", IO_TESTS, LIMITS).stage == "test_error", payload
        assert run_assert(sandbox, "", garbage, "f", ASSERT_TEST, LIMITS).stage != "passed", payload


def test_patched_time_does_not_hide_cpu_time(sandbox: Sandbox) -> None:
    burner = (
        "import time\n"
        "start = time.process_time()\n"
        "while time.process_time() - start < 0.3: pass\n"
        "for name in ('time', 'perf_counter', 'process_time', 'monotonic', 'thread_time'):\n"
        "    setattr(time, name, lambda: 0.0)\n"
        "def f(x):\n    return 0\n"
    )
    result = run_io(sandbox, "", burner, "f", IO_TESTS, LIMITS)
    assert result.exec is not None and result.exec.cpu_s >= 0.25
    assert result.stage == "assertion"


def test_outputs_are_type_strict_data_compared_like_python() -> None:
    tagged = {"__t": "tuple", "v": [1, {"__t": "set", "v": [2, "b", 1.5]}, {"__t": "dict", "v": [[1, "a"]]}]}
    # 1 == 1.0 == True, like ==
    assert canonical(tagged) == canonical(encode((1.0, {"b", 1.5, 2}, {True: "a"})))
    assert canonical([1, 2]) != canonical(encode((1, 2)))
    assert canonical(encode({0.5: [None]})) != canonical(encode({0.5: [0]}))
    unencodable = {"__t": "unencodable", "v": "Anything"}
    assert canonical(unencodable) != canonical(unencodable)
    assert not Expect("truthy").holds(unencodable) and not Expect("falsy").holds(unencodable)
    assert Expect("is", True).holds(True) and not Expect("is", True).holds(1)
    with pytest.raises(ValueError):
        canonical({"__t": "object", "v": {}})
    huge = 10**5000  # over 4,300 digits: crosses as hex (`harness_child.INT_BITS`)
    assert (
        canonical({"__t": "int", "v": hex(huge)})
        == canonical(huge)
        != canonical({"__t": "int", "v": hex(huge + 1)})
    )
    assert canonical({"__t": "int", "v": hex(-huge)}) == canonical(-huge)
    with pytest.raises(ValueError):
        canonical({"__t": "int", "v": "0xz"})


def test_judged_checks_run_outside_the_candidate(sandbox: Sandbox) -> None:
    right = run_io(sandbox, "", RIGHT, "f", JUDGED, LIMITS)
    assert (right.stage, right.passed) == ("passed", 2) and right.judge is not None
    wrong = run_io(sandbox, "", "def f(x):\n    return x * x", "f", JUDGED, LIMITS)
    assert (wrong.stage, wrong.passed) == ("assertion", 1)
    raising = run_io(sandbox, "", "def f(x):\n    return 'nine'", "f", JUDGED, LIMITS)
    assert raising.stage == "test_error" and "TypeError" in str(raising.error)
    # the judge's text never enters
    assert run_io(sandbox, "", READ_THE_TESTS, "f", JUDGED, LIMITS).stage == "assertion"


def test_a_data_check_leaves_what_it_cannot_decide_to_the_judge(sandbox: Sandbox) -> None:
    """`Near` decides a number without a judge run; a string output goes to the judge: its TypeError."""
    near = [IOTest("candidate(3)", "abs(_out - 9) < 1e-9", Near("close", 9, 1e-9))]
    right = run_io(sandbox, "", RIGHT, "f", near, LIMITS)
    assert (right.stage, right.passed, right.judge) == ("passed", 1, None)
    wrong = run_io(sandbox, "", "def f(x):\n    return 9.5", "f", near, LIMITS)
    assert (wrong.stage, wrong.judge) == ("assertion", None)
    text = run_io(sandbox, "", "def f(x):\n    return 'nine'", "f", near, LIMITS)
    assert text.stage == "test_error" and "TypeError" in str(text.error) and text.judge is not None


FORGED_COLLIDING_SET = """
import json, os
M = (1 << 61) - 1  # every multiple of the Mersenne prime hashes to 0
out = {"__t": "set", "v": [i * M for i in range(1, 35000)]}  # under the 1 MB channel cap
for message in ({"toplevel": "ok"}, {"i": 0, "out": out}, {"i": 1, "out": 0}, {"done": True}):
    os.write(3, (json.dumps(message) + "\\n").encode())
os._exit(0)
"""


def test_a_hash_colliding_output_costs_the_parent_nothing(sandbox: Sandbox) -> None:
    import time

    started = time.process_time()
    result = run_io(sandbox, "", FORGED_COLLIDING_SET, "f", IO_TESTS, LIMITS)
    assert result.stage == "assertion", result.error
    assert time.process_time() - started < 2  # decoding it into a set took the old parent 6.5 s of CPU
    for payload in ('[{"i": 7, "out": 9}]', '[{"i": True, "out": 9}]'):  # an index the harness never wrote
        messages = f"[{{'toplevel': 'ok'}}] + {payload}"
        forged = (
            f"import json, os\nfor m in {messages}:\n"
            "    os.write(3, (json.dumps(m) + '\\n').encode())\nos._exit(0)"
        )
        assert run_io(sandbox, "", forged, "f", IO_TESTS, LIMITS).stage == "test_error"


def test_the_test_sees_the_preludes_helpers_not_the_solutions(sandbox: Sandbox) -> None:
    prelude = "import math\ndef encode(s):\n    return s[::-1] + str(math.pi)[:3]\n"
    test = "def check(candidate):\n    assert candidate(encode('abc')) == 'abc'\n"
    honest = "def decode(s):\n    return s[:-3][::-1]\n"
    assert run_assert(sandbox, prelude, honest, "decode", test, LIMITS).stage == "passed"
    redefined = "def encode(s):\n    return s\ndef decode(s):\n    return s\n"
    class_math = (
        "class math:\n    pi = ''\ndef encode(s):\n    return s\ndef decode(s):\n    return s[::-1]\n"
    )
    for hack in (redefined, class_math):
        assert run_assert(sandbox, prelude, hack, "decode", test, LIMITS).stage == "assertion"


def test_prelude_classes_may_be_returned_in_assert_mode(sandbox: Sandbox) -> None:
    prelude = "class Node:\n    def __init__(self, v): self.v = v\n"
    test = "def check(candidate):\n    assert candidate(2).v == 2\n"
    assert run_assert(sandbox, prelude, "def f(x): return Node(x)", "f", test, LIMITS).stage == "passed"
    own_class = "class Mine:\n    v = 2\ndef f(x): return Mine()"
    assert run_assert(sandbox, prelude, own_class, "f", test, LIMITS).stage == "test_error"


def test_calls_of_scalars_cross_as_plain_values(sandbox: Sandbox) -> None:
    """Positional scalars go as a plain list and a scalar answer comes back as one (no object graph); exact
    types only: an int subclass (its own `__eq__`) is still not data, a list answer still crosses as a graph.
    """
    test = (
        "def check(candidate):\n"
        "    for value in (None, True, 7, 2**80, -0.5, 'x\\u00e9', ''):\n"
        "        out = candidate(value)\n"
        "        assert out == value and type(out) is type(value)\n"
        "    assert candidate(1, 2) == [1, 2]\n"
    )
    echo = "def f(*values):\n    return values[0] if len(values) == 1 else list(values)\n"
    assert run_assert(sandbox, "", echo, "f", test, LIMITS).stage == "passed"
    lying = "class Int(int):\n    def __eq__(self, other): return True\ndef f(*values):\n    return Int(0)\n"
    result = run_assert(sandbox, "", lying, "f", test, LIMITS)
    assert result.stage == "test_error" and "Int is not data" in str(result.error), result


COMPILE_ONLY_ERRORS = ["return 1\ndef f(x): return x", "nonlocal y\ndef f(x): return x"]


@pytest.mark.parametrize("solution", COMPILE_ONLY_ERRORS, ids=["return", "nonlocal"])
def test_what_parses_but_does_not_compile_is_syntax_decided_in_the_sandbox(
    sandbox: Sandbox, solution: str
) -> None:
    assert not isinstance(parse_solution(solution), str)  # the parent's parse accepts it
    for result in both_modes(sandbox, solution):
        assert (result.stage, result.compiled) == ("syntax", False), result
        assert result.error is not None and "SyntaxError" in result.error


def test_compiled_says_how_far_the_run_got(sandbox: Sandbox) -> None:
    for result in both_modes(sandbox, "def f(x) return x"):  # the parent's parse decides: nothing ran
        assert (result.stage, result.compiled) == ("syntax", None)
    for result in both_modes(sandbox, "undefined_name\ndef f(x): return x"):
        assert (result.stage, result.compiled) == ("toplevel", True), result
        assert "NameError" in str(result.error)
    assert [r.compiled for r in both_modes(sandbox, RIGHT)] == [True, True]
    prelude_then_future = run_assert(
        sandbox, "import math", "from __future__ import annotations\n" + RIGHT, "f", ASSERT_TEST, LIMITS
    )
    # the assembled program
    assert (prelude_then_future.stage, prelude_then_future.compiled) == ("syntax", False)


LINKED = """
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next

def list_node(values):
    head = None
    for value in reversed(values):
        head = ListNode(value, head)
    return head

def values_of(head):
    seen, out = set(), []
    while head is not None and id(head) not in seen:
        seen.add(id(head))
        out.append(head.val)
        head = head.next
    return out
"""
LINKED_TEST = """
def check(candidate):
    assert values_of(candidate(list_node([1, 2, 3]))) == [3, 2, 1]
    assert candidate(None) is None
    long = list_node(list(range(5000)))
    assert values_of(candidate(long)) == list(range(4999, -1, -1))
    assert long.next is None  # the argument's first node is now the last: mutated in place, seen by the test
"""
REVERSE = """
class Solution:
    def reverseList(self, head):
        previous = None
        while head:
            head.next, previous, head = previous, head, head.next
        return previous
"""


def test_prelude_instances_cross_with_their_links_and_mutations(sandbox: Sandbox) -> None:
    """LeetCode's shape: `Solution().method` as the entry point, linked lists of the prelude's class both
    ways."""
    assert (
        run_assert(sandbox, LINKED, REVERSE, "Solution().reverseList", LINKED_TEST, LIMITS).stage == "passed"
    )
    copying = REVERSE.replace(
        "head.next, previous, head = previous, head, head.next",
        "previous, head = ListNode(head.val, previous), head.next",
    )
    result = run_assert(sandbox, LINKED, copying, "Solution().reverseList", LINKED_TEST, LIMITS)
    assert result.stage == "assertion", result  # right values, but the test sees its argument unchanged


MUTATION_TEST = """
def check(candidate):
    xs = [3, 1, 2]
    assert candidate(xs) is None
    assert xs == [1, 2, 3]
    grid = [[0] * 2 for _ in range(2)]
    row = grid[1]
    candidate(grid)
    assert grid[1] is row and row == [1, 2], grid
    shared = [5]
    pair = candidate([shared, shared])
    assert pair[0] is pair[1]
    try:
        candidate("boom")
    except ValueError as error:
        assert "boom" in str(error)
    else:
        raise AssertionError("no ValueError")
"""
MUTATE = """
def f(x):
    if x == "boom":
        raise ValueError("boom")
    if isinstance(x[0], list) and x[0] is x[-1]:
        return x
    if isinstance(x[0], list):
        for row in x:
            row.sort()
        x[1][:] = [1, 2]
        return None
    x.sort()
"""


def test_arguments_mutated_in_place_shared_references_and_exceptions_cross(sandbox: Sandbox) -> None:
    assert run_assert(sandbox, "", MUTATE, "f", MUTATION_TEST, LIMITS).stage == "passed"
    not_sorting = MUTATE.replace("    x.sort()\n", "    return None\n")
    assert run_assert(sandbox, "", not_sorting, "f", MUTATION_TEST, LIMITS).stage == "assertion"


def test_what_is_not_data_fails_the_test_not_the_harness(sandbox: Sandbox) -> None:
    passes_a_function = "def check(candidate):\n    assert candidate(len) == 3\n"
    result = run_assert(sandbox, "", "def f(x):\n    return 3", "f", passes_a_function, LIMITS)
    assert result.stage == "test_error" and "not data" in str(result.error), result
    returns_a_generator = "def f(x):\n    return (i for i in range(x))"
    result = run_assert(sandbox, "", returns_a_generator, "f", ASSERT_TEST, LIMITS)
    assert result.stage == "test_error" and "generator is not data" in str(result.error), result


def test_the_graph_codec_keeps_identity_cycles_and_mutations() -> None:
    class Node:
        def __init__(self, value: int) -> None:
            self.value, self.next = value, self

    classes: dict[str, type] = {"Node": Node}
    node, shared = Node(1), [1]
    message, sent = pack([(node, [shared, shared], {(1, 2): b"x"}, {frozenset({3})})], classes)
    (decoded,), _ = unpack(message, classes)
    assert decoded[0].next is decoded[0] and type(decoded[0]) is Node and decoded[0].value == 1
    assert (
        decoded[1][0] is decoded[1][1] == [1]
        and decoded[2] == {(1, 2): b"x"}
        and decoded[3] == {frozenset({3})}
    )
    (copy,), received = unpack(message, classes)  # the candidate's side: mutate, answer with the same indices
    before = list(map(held, received))
    copy[1][0].append(2)
    reply, _ = pack([copy[1][0]], classes, received, changes(received, before))
    assert reply["objects"][sent.index(node)] == UNCHANGED  # untouched objects are not sent back
    (returned,), _ = unpack(reply, classes, sent)
    assert returned is shared and shared == [1, 2]  # the caller's own list, updated in place
    with pytest.raises(NotData):
        pack([len], classes, strict=True)
    not_data, _ = pack([object()], classes)
    with pytest.raises(NotData):
        unpack(not_data, classes)
    with pytest.raises(NotData):
        unpack({"roots": [{"@": 0}], "objects": [["obj", "Other", []]]}, classes)
    for forged in (
        {"roots": [{"@": 5}], "objects": []},
        {"roots": [{"@": 0}], "objects": [["tuple", [{"@": 0}]]]},
    ):
        with pytest.raises(PackError):
            unpack(forged, classes)


def test_a_crossing_switches_the_int_limit_only_for_a_message_that_needs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Assert mode's per-call codec: a short message never switches Python's int/str limit (a switch cost ~1
    us, two on each side of every call), one with an int over it still crosses, and the limit is back after.
    """
    limit, switches, setter = sys.get_int_max_str_digits(), [], sys.set_int_max_str_digits
    monkeypatch.setattr(sys, "set_int_max_str_digits", lambda n: (switches.append(n), setter(n)))
    for message in (
        [3, "x", None, 2.5, True],
        {"value": 10**80},
        {"raised": "ValueError", "message": "\u00e9"},
    ):
        assert decoded(encoded(message)) == message
    assert switches == []
    huge = {"value": -(10**5000)}
    assert decoded(encoded(huge)) == huge and switches == [0, limit, 0, limit]  # encoded, then decoded
    assert sys.get_int_max_str_digits() == limit
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # an inner pause does not end the outer one
    assert gc.isenabled()


LOOP_CHECK = """
def check(candidate):
    assert candidate(8, 3) == '22'
    for x in range(2, 8):
        assert candidate(x, x + 1) == str(x)
"""
CHANGE_BASE = """
def f(x, base):
    digits = ''
    while x:
        x, d = divmod(x, base)
        digits = str(d) + digits
    return digits
"""


def test_an_unrolled_loop_judges_as_the_loop_does(sandbox: Sandbox) -> None:
    """HumanEval/44's loop as I/O tests (`split_check` unrolls it): assert mode's verdicts, test by test."""
    tests = split_check(LOOP_CHECK)
    assert tests is not None and len(tests) == 7 and all(t.expect is not None for t in tests)
    wrong_at_5 = CHANGE_BASE.replace("    digits = ''\n", "    digits = '6' if x == 5 else ''\n")
    as_int = CHANGE_BASE.replace("return digits", "return int(digits)")
    for solution, stage, passed in (
        (CHANGE_BASE, "passed", 7),
        (wrong_at_5, "assertion", 6),
        (as_int, "assertion", 0),
    ):
        io = run_io(sandbox, "", solution, "f", tests, LIMITS)
        assert (io.stage, io.passed, io.judge) == (stage, passed, None), io
        assert run_assert(sandbox, "", solution, "f", LOOP_CHECK, LIMITS).stage == stage
    assert "test 4" in str(run_io(sandbox, "", wrong_at_5, "f", tests, LIMITS).error)  # the loop's x == 5


def test_each_run_gets_the_preloaded_child_half_as_the_worker_loaded_it() -> None:
    """Every worker imports harness_child once; a candidate that patches it (same process) changes its own run
    only."""
    silenced = f"import harness_child\nharness_child.send = lambda message: None\n{RIGHT}"
    with Sandbox(workers=1, limits=LIMITS, preload=[CHILD_FILE]) as one_worker:
        assert one_worker.run("import sys\nprint('harness_child' in sys.modules)").stdout == b"True\n"
        # not even a top level
        assert run_io(one_worker, "", silenced, "f", IO_TESTS, LIMITS).stage == "toplevel"
        assert run_io(one_worker, "", RIGHT, "f", IO_TESTS + JUDGED, LIMITS).stage == "passed"
        assert run_assert(one_worker, "", RIGHT, "f", ASSERT_TEST, LIMITS).stage == "passed"


class _Litter:
    """Cyclic garbage with a Python finalizer: a collection during a parse runs Python code, so another thread
    may run."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))


def test_threads_parse_at_once_without_a_recursion_depth_mismatch() -> None:
    """CPython 3.11 before 3.11.8 shares the AST constructor's depth counter between threads
    (python/cpython#106905): the code service's lanes parsing at different stack depths failed items with
    SystemError, about once a second here."""
    source = "\n".join(f"def f{i}(x):\n    return [x + {i} for _ in range(3)]" for i in range(200))
    failures: list[str] = []
    interval = sys.getswitchinterval()

    def parse_at(depth: int) -> None:
        if depth:
            return parse_at(depth - 1)
        try:
            for _ in range(30):
                garbage = [_Litter() for _ in range(300)]
                del garbage
                tree = parse_solution(source)
                if not isinstance(tree, ast.Module):
                    failures.append(str(tree))
        except SystemError as error:
            failures.append(repr(error))

    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=parse_at, args=(depth,)) for depth in (0, 7, 15)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
