"""Pure pieces of the code service: AST similarity, the I/O-mode splitter, datasets (extraction: parity)."""

from __future__ import annotations

import ast
import math
import random
import time

import pytest

from corrgrpo_code import similarity
from corrgrpo_code.harness import encode
from corrgrpo_code.problems import humaneval_problems, load_problems
from corrgrpo_code.similarity import Reference, TooManyPairs, ast_similarity, reachable_pairs, search
from corrgrpo_code.split import split_check


def test_ast_similarity_abstracts_names_and_literals() -> None:
    reference = "def add(a, b):\n    total = a + b\n    return total * 2\n"
    renamed = "def plus(x, y):\n    s = x + y\n    return s * 7\n"
    different = "def add(a, b):\n    for i in range(a):\n        b -= 1\n    return b\n"
    assert ast_similarity(renamed, reference) == 1.0
    assert 0.0 < ast_similarity(different, reference) < 1.0
    assert ast_similarity(different, reference) == ast_similarity(different, reference)
    assert ast_similarity("def broken(:", reference) == 0.0


def test_ast_similarity_is_cheap_per_item() -> None:
    problems = list(humaneval_problems())
    start = time.perf_counter()
    for problem in problems:
        assert ast_similarity(problem.reference, problem.reference) == 1.0
    assert (time.perf_counter() - start) / len(
        problems
    ) < 0.05  # generous: ~2 ms measured; only catches a blow-up


def test_the_bound_is_never_below_what_the_search_examines() -> None:
    """Repetitive sequences (small alphabets) are the search's worst case: at a budget of exactly the bound it
    ends."""
    rng = random.Random(5)
    for _ in range(300):
        alphabet = rng.choice((1, 2, 3, 8))
        a, b = ([str(rng.randrange(alphabet)) for _ in range(rng.randrange(1, 60))] for _ in range(2))
        where: dict[str, list[int]] = {}
        for j, token in enumerate(b):
            where.setdefault(token, []).append(j)
        search(a, b, where, reachable_pairs(a, b, where))  # raises TooManyPairs if the bound were too low


def test_a_reference_compares_each_distinct_structure_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first_source, other_source = [problem.reference for problem in list(humaneval_problems())[:2]]
    reference = Reference.of(first_source, "")
    calls: list[int] = []
    real = similarity.matched
    monkeypatch.setattr(similarity, "matched", lambda *args: calls.append(1) or real(*args))
    renamed = ast.parse(first_source.replace("numbers", "values"))  # the same structure
    other = ast.parse(other_source)
    first = reference.similarity(ast.parse(first_source))
    assert first == reference.similarity(renamed) == 1.0 and len(calls) == 1
    ratio = reference.similarity(other)
    assert reference.similarity(other) == ratio and len(calls) == 2
    with pytest.raises(TooManyPairs):
        reference.similarity(other, budget=10)  # a budget is part of the key: compared again, and over it
    with pytest.raises(TooManyPairs):
        reference.similarity(other, budget=10)  # remembered as over, raised again
    assert len(calls) == 3


def test_split_check_extracts_calls_and_keeps_expected_values_in_the_parent() -> None:
    tests = split_check(
        "def check(candidate):\n"
        '    """doc"""\n'
        "    import math\n"
        "    assert candidate(n = 7, q = [[0, 5]]) == [2, 2], 'message'\n"
        "    assert abs(candidate(2.5) - 0.5) < 1e-6\n"
        "    assert True\n"
        "    assert not candidate('')\n"
        "    assert candidate(1) == -inf\n"
    )
    assert tests is not None
    assert [t.call for t in tests] == [
        "candidate(n = 7, q = [[0, 5]])",
        "candidate(2.5)",
        "candidate('')",
        "candidate(1)",
    ]
    assert "[2, 2]" not in tests[0].call
    equals, near, falsy, infinite = (test.expect for test in tests)
    assert equals and equals.holds(encode([2, 2])) and equals.holds(encode([2.0, 2]))
    assert not equals.holds(encode((2, 2))) and not equals.holds(encode([2, 3]))
    # a str: the judge's
    assert near and near.holds(0.5000001) and not near.holds(0.6) and near.holds("0.5") is None
    # the judge's text, for what the parent leaves
    assert tests[1].check.strip("(\n)") == "abs(_out - 0.5) < 1e-6"
    assert falsy and falsy.holds(encode([])) and not falsy.holds(encode("x"))
    assert infinite and infinite.holds(encode(float("-inf"))) and not infinite.holds(encode(float("inf")))


@pytest.mark.parametrize(
    "test_source",
    [
        "def check(candidate):\n    for i in [1, 2]:\n        assert candidate(i) == i\n",
        "def check(candidate):\n    x = candidate(1)\n    assert x == 1\n",
        "def check(candidate):\n    assert is_same_tree(candidate(1), tree_node([1]))\n",
        "def check(candidate):\n    assert candidate(candidate(1)) == 1\n",
        "K = 3\ndef check(candidate):\n    assert candidate(K) == 3\n",
        "def helper(c):\n    assert c(1) == 1\n",
    ],
)
def test_other_test_shapes_go_to_assert_mode(test_source: str) -> None:
    assert split_check(test_source) is None


def test_a_loop_over_literal_ints_is_unrolled_into_io_tests() -> None:
    """HumanEval/44's shape: the loop's name becomes each value in the assertion's text; `str(x)` is then a
    literal."""
    tests = split_check(
        "def check(candidate):\n"
        "    assert candidate(8, 3) == '22'\n"
        "    for x in range(3, -3, -2):\n"
        "        'each base'\n"
        "        assert candidate(x, x + 1) == str(x), x\n"
        "        assert candidate(x=x, y=[x]) == x.real\n"
        "    for x in range(2):\n"
        "        assert candidate(x) == x\n"
    )
    assert tests is not None
    calls = [
        call
        for v in (3, 1, -1)
        for call in (f"candidate(({v}), ({v}) + 1)", f"candidate(x=({v}), y=[({v})])")
    ]
    assert [t.call for t in tests] == ["candidate(8, 3)", *calls, "candidate((0))", "candidate((1))"]
    for test, value in zip(tests[1:7:2], (3, 1, -1), strict=True):
        assert (
            test.expect is not None
            and test.expect.holds(encode(str(value)))
            and not test.expect.holds(encode(value))
        )
    assert tests[2].check.strip("(\n)") == "_out == (3).real" and tests[2].expect is None  # the judge's


@pytest.mark.parametrize(
    "loop",
    [
        "for x in range(101):\n        assert candidate(x) == x",  # over the cap
        # 120 tests
        "for x in range(60):\n        assert candidate(x) == x\n        assert candidate(x) != -1",
        "for x in range(-18446744073709551616, 18446744073709551616):\n        assert candidate(x) == x",
        "for x in range(n):\n        assert candidate(x) == x",
        "for x in range(len([1])):\n        assert candidate(x) == x",
        "for x in range(2.0):\n        assert candidate(x) == x",
        "for x in range(True):\n        assert candidate(x) == x",
        "for x in range(1, 5, 0):\n        assert candidate(x) == x",
        "for x in range(stop=3):\n        assert candidate(x) == x",
        "for x in range(3):\n        assert candidate(x) == x\n    else:\n        pass",
        "for x, y in range(3):\n        assert candidate(x) == y",
        "for x in range(3):\n        y = x\n        assert candidate(y) == x",
        "for x in range(3):\n        for y in range(3):\n            assert candidate(x, y) == x",
        # it outlives the loop
        "for x in range(3):\n        assert candidate(x) == x\n    assert candidate(x) == 2",
        "assert candidate(1) == 1\n    for x in range(3):\n        assert candidate([x for x in 'ab']) == x",
        "for x in range(3):\n        assert candidate([x for _ in 'ab']) == [x, x]",
        "for x in range(3):\n        assert candidate(lambda: x) == x",
        "for x in range(3):\n        assert candidate((y := x)) == y",
        "for x in range(3):\n        assert candidate(f'{x}') == str(x)",
        "for math in range(3):\n        import math\n        assert candidate(math) == 1",
        "for candidate in range(3):\n        assert candidate(1) == 1",
        "assert (range := candidate(0)) == 0\n    for x in range(3):\n        assert candidate(x) == x",
    ],
)
def test_loops_unrolling_would_change_stay_in_assert_mode(loop: str) -> None:
    assert split_check(f"def check(candidate):\n    {loop}\n") is None, loop


def test_a_checks_loops_together_unroll_into_at_most_100_tests() -> None:
    loop = "    for x in range({}):\n        assert candidate(x) == x\n"
    assert len(split_check("def check(candidate):\n" + loop.format(50) * 2) or []) == 100
    assert split_check("def check(candidate):\n" + loop.format(40) * 3) is None
    started = time.process_time()
    assert split_check("def check(candidate):\n" + loop.format(1) * 5000) is None
    assert time.process_time() - started < 2  # one walk of the check, not one a loop (~0.25 s here)


def test_a_shadowed_range_is_never_unrolled() -> None:
    loop = "    for x in range(3):\n        assert candidate(x) == x\n"
    assert split_check(f"def check(candidate):\n{loop}") is not None
    for shadow in ("def range(n):\n    return [5]\n", "range = lambda n: [5]\n", "from os import range\n"):
        assert split_check(f"{shadow}def check(candidate):\n{loop}") is None, shadow
    assert split_check(f"def check(range):\n{loop.replace('candidate', 'range')}") is None


@pytest.mark.parametrize(
    "module",
    [
        "def str(x):\n    return 'z'\n",
        "abs = lambda x: 0\n",
        "import json as math\n",
        "from os import math\n",
        "from os import *\n",
        "import builtins\nbuiltins.abs = lambda x: 0\n",
        "for abs in [len]:\n    pass\n",
    ],
)
def test_a_check_naming_what_its_module_rebinds_goes_to_assert_mode(module: str) -> None:
    """The service's data checks and the judge know the builtins and `math`, never the module: a check whose
    names the module rebinds means what the module says, which only assert mode runs."""
    check = (
        "def check(candidate):\n    assert candidate(1) == str(1)\n"
        "    assert math.isclose(abs(candidate(2)), 2.0)\n"
    )
    assert len(split_check("import math\nMETADATA = {}\n\n" + check) or []) == 2  # untouched names: split
    assert split_check(module + check) is None


# each decided by the parent on a number or a list/tuple (see `test_data_checks_agree_with_python`)
DATA_CHECKS = [
    "abs(_out - 2.0/3.0) < 1e-6",
    "abs(0.33 - _out) <= 1e-6",
    "math.isclose(_out, 0.3)",
    "math.isclose(_out, -3 * 0.1, rel_tol=1e-3, abs_tol=1e-12)",
    "tuple(_out) == tuple([1, 2, 3])",
    "list(_out) == [1, 2, 3]",
    "tuple(_out) == ((1, 2), 3)",
    "_out == (3 + 5 + 7, 3 * 5 * 7)",
    "_out == str(-22)",  # an unrolled loop's `str(x)`
]
OUTPUTS = [
    0.6666667,
    2 / 3,
    0.33,
    0.3300011,
    0.1 + 0.2,
    -0.3,
    1,
    True,
    float("nan"),
    float("inf"),
    10**400,
    "0.3",
    None,
]
OUTPUTS += [
    [1, 2, 3],
    (1, 2, 3),
    [1, 2],
    [1.0, True, 3],
    ((1, 2), 3),
    [[1, 2], 3],
    {1, 2, 3},
    "123",
    {1: 2},
    (15, 105),
]
OUTPUTS += ["-22", -22]


@pytest.mark.parametrize("check", DATA_CHECKS)
def test_data_checks_agree_with_python(check: str) -> None:
    """The parent's verdict on data is Python's own (the judge's), or left to the judge (None): no other."""
    (test,) = (
        split_check(f"def check(candidate):\n    assert {check.replace('_out', 'candidate(1)')}\n") or []
    )
    assert test.expect is not None, f"{check} should be decided on data"
    decided = 0
    for output in OUTPUTS:
        verdict = test.expect.holds(encode(output))
        if verdict is not None:
            decided += 1
            # the test text, in the test
            assert verdict is bool(eval(check, {"math": math, "_out": output})), (check, output)
    assert decided >= 3


def test_checks_not_decidable_on_data_stay_with_the_judge() -> None:
    checks = [
        "abs(_out - len([1])) < 1e-6",
        "abs(_out) < 1e-6",
        "math.isclose(_out, 1, tol=2)",
        "tuple(_out) == [1]",
    ]
    checks += ["_out == 2 ** 3", "abs(_out - 1) > 1e-6", "sorted(_out) == [1]"]  # no `**` folded
    for check in checks:
        (test,) = split_check(
            f"def check(candidate):\n    assert {check.replace('_out', 'candidate(1)')}\n"
        ) or [None]
        assert test is not None and test.expect is None, check


def test_a_stray_builtin_name_is_not_a_test() -> None:
    tests = split_check("def check(candidate):\n    print\n    assert candidate(1) == [1]\n")
    assert tests is not None and [t.call for t in tests] == ["candidate(1)"]
    assert split_check("def check(candidate):\n    undefined_name\n    assert candidate(1) == [1]\n") is None


def test_no_humaneval_io_problem_needs_a_judge() -> None:
    tests = [split_check(p.test) for p in humaneval_problems()]
    assert [t.check for split in tests if split for t in split if t.expect is None] == []


def test_mode_share_of_humaneval() -> None:
    humaneval = list(humaneval_problems())
    # of 164; 6 use locals/helpers → assert mode
    assert sum(split_check(p.test) is not None for p in humaneval) == 158


def test_unknown_dataset_source_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown dataset source"):
        load_problems("mbpp")
