"""What each problem kind needs besides the check-function path: pure logic, no sandbox, no HTTP.

* stdin cases: `outputs_match`, LiveCodeBench's comparison by tokens: integers exact, reals within `TOLERANCE`.
* call cases: `call_tests`, one I/O-mode test per case whose expectation the service decides on data
  (`ReturnMatches`): the expected value never enters the candidate's process. The cases are independent (the
  harness's `independent`): every one runs, and one that raised makes runtime 0 even after an earlier wrong answer.
* MBPP asserts: `mbpp_check`, the asserts rewritten into a `check(candidate)` (the function's name → `candidate`), so
  the splitter can turn each assert into an I/O test and `tests_total` counts asserts.
"""

from __future__ import annotations

import ast
import builtins
import math
import re
from dataclasses import dataclass, field
from typing import Any

from corrgrpo_code.harness import IOTest
from corrgrpo_code.harness_data import Expect, canonical, encode
from corrgrpo_code.parsing import parse_python
from corrgrpo_proto.code import CallCase, CodeProblem, MbppProblem

INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: `\d` and int() take "٥" for 5 too
# one way to read each shape, so a long non-number fails in linear time (an ambiguous `\d+\.?\d*` backtracks
# cubically: a 30,000-digit token took the service 68 s)
REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
TOLERANCE = 1e-6  # absolute or relative, as contest checkers of real-valued answers usually allow


def _lines(text: str) -> list[list[str]]:
    """The tokens of each line; leading and trailing blank lines and all trailing whitespace (\\r too) ignored."""
    return [line.split() for line in text.strip().splitlines()]


def _integer(token: str) -> tuple[bool, str]:
    """An integer token's value as (negative, digits without leading zeros): exact at any size, and no int(), which
    refuses over 4,300 digits and is quadratic below; `-0`, `+0` and `0` are one value."""
    digits = token.lstrip("+-").lstrip("0")
    return token.startswith("-") and bool(digits), digits


def tokens_match(got: str, want: str) -> bool:
    """Equal text; else, when `want` is an integer, `got` is exactly that integer (an integer token: `5.0`, `5e0`
    and `1e18` for 10**18 + 7 are wrong, as a contest's checker says); else, when `want` is a real (a fraction or an
    exponent), `got` is a number within `TOLERANCE` of it (absolute or relative)."""
    if got == want:
        return True
    if INTEGER.fullmatch(want):
        return INTEGER.fullmatch(got) is not None and _integer(got) == _integer(want)
    if REAL.fullmatch(want) and REAL.fullmatch(got):
        expected = float(want)  # an overflow is inf, equal to any other: such an answer must be equal text
        return math.isfinite(expected) and math.isclose(float(got), expected, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return False


def outputs_match(got: str, want: str) -> bool:
    """LiveCodeBench's rule (the outputs stripped, compared line by line, each line stripped, numbers as numbers),
    with tokens compared one by one (`tokens_match`) so `1 2` matches `1  2`."""
    if got.strip() == want.strip():
        return True
    got_lines, want_lines = _lines(got), _lines(want)
    if len(got_lines) != len(want_lines):
        return False
    for got_tokens, want_tokens in zip(got_lines, want_lines, strict=True):
        if len(got_tokens) != len(want_tokens) or not all(map(tokens_match, got_tokens, want_tokens)):
            return False
    return True


def _as_lists(tagged: Any) -> Any:
    """Tagged JSON with tuples as lists: a function may return `(1, 2)` where JSON can only expect `[1, 2]`."""
    if type(tagged) is list:
        return [_as_lists(value) for value in tagged]
    if type(tagged) is dict and type(tagged.get("v")) is list and tagged.get("__t") in ("tuple", "dict"):
        items = [_as_lists(value) for value in tagged["v"]]
        return items if tagged["__t"] == "tuple" else {"__t": "dict", "v": items}
    return tagged


@dataclass(frozen=True)
class ReturnMatches(Expect):
    """A call case's expectation, decided by the service on the returned data: equal to the expected value (tuples
    as lists), or to its only element when it is a one-element list (TACO/APPS wrap return values so)."""

    accepted: tuple[Any, ...] = field(default=())

    @classmethod
    def of(cls, expected: Any) -> ReturnMatches:
        accepted = [expected, expected[0]] if type(expected) is list and len(expected) == 1 else [expected]
        return cls("equals", None, tuple(canonical(encode(value)) for value in accepted))

    def holds(self, tagged: Any) -> bool:
        got = canonical(_as_lists(tagged))
        return any(got == value for value in self.accepted)


def call_tests(cases: list[CallCase]) -> list[IOTest]:
    """One I/O test per case: the child evaluates `candidate(*args)` (the arguments as a literal), nothing more."""
    return [IOTest(f"candidate(*{case.args!r})", "_out == expected", ReturnMatches.of(case.expected)) for case in cases]


class ProblemError(ValueError):
    """A problem that cannot be judged as sent (an MBPP assert that does not parse, say): the item's error."""


class _Rename(ast.NodeTransformer):
    def __init__(self, name: str) -> None:
        self.name = name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name("candidate", node.ctx) if node.id == self.name else node


def _first_call(trees: list[ast.Module]) -> str | None:
    """The first function called by name in the asserts that is not a builtin (MBPP's `assert f(...) == ...`)."""
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not hasattr(builtins, node.func.id):
                return node.func.id
    return None


def mbpp_check(problem: MbppProblem) -> CodeProblem:
    """The equivalent check-function problem: the asserts become `check(candidate)`'s body with the function's name
    renamed to `candidate`; `test_setup_code` is the prelude."""
    try:
        trees = [parse_python(statement) for statement in problem.test_list]
    except (SyntaxError, ValueError, RecursionError) as error:
        raise ProblemError(f"an MBPP assert does not parse: {error}") from None
    entry = problem.entry_point or _first_call(trees)
    if not entry or not entry.isidentifier():
        raise ProblemError("no function name: give `entry_point`, or asserts that call the function")
    body = "\n".join(ast.unparse(_Rename(entry).visit(tree)) for tree in trees)
    test = "def check(candidate):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    return CodeProblem(
        task_id=problem.task_id,
        prompt=problem.test_setup_code,
        entry_point=entry,
        test=test,
        reference=problem.reference or "",
    )
