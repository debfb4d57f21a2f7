"""Numbers in verdicts: a wrong integer never passes in another shape, and no number a candidate prints or
returns makes its item a service fault (issue 37, items 2 and 3). The end-to-end cases run in the real bwrap
sandbox.

Rules: a stdin token compared with an expected integer must be exactly that integer, written as an integer
(`+5`, `05` and `-0` are integers; `5.0`, `5e0` and `1e18` are not); the 1e-6 tolerance is only for an
expected fraction or exponent. A call case's returned data is compared as Python's `==` compares it in the
candidate's process (the authors' `assert candidate(...) == expected`): `5.0 == 5` and `True == 1`, but an int
and a float are equal only when the float is exactly that int, at any size; an int over 4,300 digits crosses
every channel (it used to make the child's JSON raise: a right answer scored test_error).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from corrgrpo_code.harness import IOTest, encode, run_assert, run_io
from corrgrpo_code.problem_tests import ReturnMatches, call_tests
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_code.stdio import run_stdin, tokens_match
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_proto.code import CallCase, CallProblem, CodeItem, StdinCase, StdinProblem
from corrgrpo_sandbox import Limits, Sandbox

LIMITS = Limits(cpu_s=3, wall_s=6, output_bytes=1 << 20)
SETTINGS = CodeSettings(code_cpu_s=LIMITS.cpu_s, code_wall_s=LIMITS.wall_s, code_workers=2)
A, B = 1_000_000_007, 999_999_937  # their product needs 60 bits: a float keeps 53
PRODUCT = A * B
BIG = "9" * 5000  # over int()'s 4,300 digits
BIG_PLUS_ONE = "1" + "0" * 5000


@pytest.mark.parametrize(
    ("got", "want"),
    [
        ("1e18", str(10**18 + 7)),
        ("1e+18", str(10**18 + 7)),  # what print(float(10**18 + 7)) writes
        (str(float(PRODUCT + 1)), str(PRODUCT)),
        ("1000000000000000000.0", str(10**18)),  # the right value, but not printed as an integer
        ("5.0", "5"),
        ("5.", "5"),
        ("5e0", "5"),
        ("+5.0", "5"),
        ("4.9999999", "5"),
        ("-0.0000001", "0"),
        ("0.0", "-0"),
        ("٥", "5"),  # not an ASCII digit
    ],
)
def test_an_expected_integer_is_not_matched_by_another_shape(got: str, want: str) -> None:
    assert not tokens_match(got, want)


@pytest.mark.parametrize(
    ("got", "want"),
    [
        ("+5", "5"),
        ("05", "5"),
        ("-0", "0"),
        ("+0", "-0"),
        (str(PRODUCT), str(PRODUCT)),
        ("5", "5.0"),  # an expected real takes any number within 1e-6
        ("0.5000001", "0.5"),
        ("1e18", "1000000000000000000.0"),
    ],
)
def test_integers_in_integer_shapes_and_reals_within_tolerance_match(got: str, want: str) -> None:
    assert tokens_match(got, want)


def test_integers_over_int_s_digit_limit_compare_exactly() -> None:
    assert (
        tokens_match(BIG, BIG) and tokens_match("+" + BIG, "0" + BIG) and tokens_match("-" + "0" * 5000, "0")
    )
    assert not tokens_match(BIG, BIG_PLUS_ONE) and not tokens_match(BIG[:-1] + "8", BIG)
    assert not tokens_match("-" + BIG, BIG) and not tokens_match(BIG + ".0", BIG)
    assert not tokens_match(BIG, "0.5")  # a huge integer against a real: float(), no int()


@pytest.mark.parametrize("token", ["1" * 10_000 + "x", "1." + "1" * 10_000 + "x", "1e" + "1" * 10_000 + "x"])
def test_a_long_non_number_is_refused_in_linear_time(token: str) -> None:
    started = time.process_time()
    assert not tokens_match(token, "1.5")
    # the old pattern backtracked: 3.4 s for 10,000 digits, 68 s for 30,000
    assert time.process_time() - started < 1.0


PRODUCT_CASE = [StdinCase(input=f"{A} {B}\n", output=f"{PRODUCT}\n")]
READ = "a, b = map(int, input().split())\n"
WRONG_PROGRAMS = {
    "float of a wrong product": READ + "print(float(a * b + 1))\n",
    "true division": READ + "print(a * b / 1)\n",
    "rounded to 1e18": READ + "print(1e18)\n",
    "fixed-point": READ + "print('%.1f' % (a * b))\n",
    "right digits then .0": READ + "print(str(a * b) + '.0')\n",
}


@pytest.mark.parametrize("program", WRONG_PROGRAMS.values(), ids=WRONG_PROGRAMS.keys())
def test_a_stdin_program_printing_floats_for_an_integer_fails(sandbox: Sandbox, program: str) -> None:
    result = run_stdin(sandbox, program, PRODUCT_CASE, LIMITS, case_s=3)
    assert (result.stage, result.passed) == ("assertion", 0), result.error


def test_the_exact_integer_passes_in_any_integer_shape(sandbox: Sandbox) -> None:
    for program in (READ + "print(a * b)\n", READ + "print('+%d' % (a * b))\n", READ + "print(a // 1 * b)\n"):
        assert run_stdin(sandbox, program, PRODUCT_CASE, LIMITS, case_s=3).stage == "passed", program


@pytest.mark.parametrize(
    ("printed", "stage"), [(BIG, "passed"), (BIG[:-1] + "8", "assertion"), ("-" + BIG, "assertion")]
)
def test_a_huge_printed_number_is_judged_not_a_service_fault(
    sandbox: Sandbox, printed: str, stage: str
) -> None:
    cases = [StdinCase(input="\n", output=BIG + "\n")]
    assert run_stdin(sandbox, f"print({printed!r})\n", cases, LIMITS, case_s=3).stage == stage


def test_a_huge_wrong_number_scores_as_a_wrong_answer_not_an_item_error(sandbox: Sandbox) -> None:
    problem = StdinProblem(task_id="big", stdin_cases=[StdinCase(input="\n", output=BIG + "\n")])
    scorer = CodeScorer(sandbox, MemoryStore(), {}, SETTINGS)
    try:
        items = [
            CodeItem(problem=problem, completion=f"```python\nprint({answer!r})\n```")
            for answer in (BIG_PLUS_ONE, BIG)
        ]
        wrong, right = asyncio.run(scorer.score(items))
    finally:
        scorer.close()
    assert isinstance(wrong, Scored) and wrong.info["stage"] == "assertion", wrong
    assert (wrong.components["runtime"], wrong.components["correct"]) == (1.0, 0.0)
    assert isinstance(right, Scored) and right.components["correct"] == 1.0, right


def test_call_returns_compare_as_python_s_equality_exactly_at_any_size() -> None:
    exact = ReturnMatches.of(10**18 + 7)
    assert exact.holds(10**18 + 7) and not exact.holds(1e18) and not exact.holds(float(10**18 + 7))
    # 5 == 5.0, as in the candidate's process
    assert ReturnMatches.of(5).holds(5.0) and ReturnMatches.of(5.0).holds(5)
    assert ReturnMatches.of(True).holds(1) and ReturnMatches.of([1, 0]).holds([True, False])  # True == 1 too
    assert (
        not ReturnMatches.of(2).holds(True)
        and not ReturnMatches.of(0.5).holds(0)
        and not ReturnMatches.of("1").holds(1)
    )
    assert ReturnMatches.of(0).holds(-0.0)
    assert ReturnMatches.of([PRODUCT]).holds(encode((PRODUCT,))) and not ReturnMatches.of([PRODUCT]).holds(
        [PRODUCT / 1]
    )


CALL_PROGRAMS = {
    "true division": ("def f(a, b):\n    return a * b / 1\n", "assertion"),
    "float of a wrong product": ("def f(a, b):\n    return float(a * b + 1)\n", "assertion"),
    "bool for an int": ("def f(a, b):\n    return True\n", "assertion"),
    "floor division": ("def f(a, b):\n    return a // 1 * b\n", "passed"),
}


@pytest.mark.parametrize(("solution", "stage"), CALL_PROGRAMS.values(), ids=CALL_PROGRAMS.keys())
def test_a_call_case_returning_a_float_for_an_integer_is_judged_by_value(
    sandbox: Sandbox, solution: str, stage: str
) -> None:
    tests = call_tests([CallCase(args=[A, B], expected=PRODUCT)])
    assert run_io(sandbox, "", solution, "f", tests, LIMITS, independent=True).stage == stage


def test_a_call_problem_is_scored_the_same_way(sandbox: Sandbox) -> None:
    problem = CallProblem(
        task_id="product", fn_name="f", call_cases=[CallCase(args=[A, B], expected=PRODUCT)]
    )
    scorer = CodeScorer(sandbox, MemoryStore(), {}, SETTINGS)
    try:
        items = [
            CodeItem(problem=problem, completion=f"```python\n{code}```")
            for code, _ in CALL_PROGRAMS.values()
        ]
        results = asyncio.run(scorer.score(items))
    finally:
        scorer.close()
    assert [r.info["stage"] for r in results if isinstance(r, Scored)] == [
        stage for _, stage in CALL_PROGRAMS.values()
    ]


# assert mode
HUGE_CHECK = "def check(candidate):\n    for n in (5000, 3):\n        assert candidate(n) == 10 ** n\n"


def huge_returned(sandbox: Sandbox, solution: str) -> list[str]:
    """The stage of `f(5000) == 10**5000` (over int()'s 4,300 digits) in each path a returned value takes."""
    call = call_tests([CallCase(args=[5000], expected=10**5000)])  # decided by the service on data
    judged = [IOTest("candidate(5000)", "_out == 10 ** 5000")]  # decided by the sandboxed judge
    return [
        run_io(sandbox, "", solution, "f", call, LIMITS, independent=True).stage,
        run_io(sandbox, "", solution, "f", judged, LIMITS).stage,
        run_assert(sandbox, "", solution, "f", HUGE_CHECK, LIMITS).stage,
    ]


def test_a_huge_returned_int_is_compared_not_a_crash(sandbox: Sandbox) -> None:
    assert huge_returned(sandbox, "def f(n):\n    return 10 ** n\n") == ["passed"] * 3
    assert huge_returned(sandbox, "def f(n):\n    return 10 ** n + 1\n") == ["assertion"] * 3
    assert huge_returned(sandbox, "def f(n):\n    return -(10 ** n)\n") == ["assertion"] * 3
    assert huge_returned(sandbox, "def f(n):\n    return float(10 ** min(n, 300))\n") == ["assertion"] * 3
