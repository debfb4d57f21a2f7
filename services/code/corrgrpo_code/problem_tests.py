"""A problem of any kind made runnable once (its tests, its reference parsed, its content hashed). Its run.

* check functions: split into I/O tests (`split.py`), else run whole in assert mode;
* call cases: one I/O test per case whose expectation the service decides on data (`ReturnMatches`): the
  expected value never enters the candidate's process. The cases are independent: every one runs, and one that
  raised makes runtime 0 even after an earlier wrong answer;
* MBPP asserts: rewritten into a `check(candidate)` (`mbpp_check`), so each assert is an I/O test;
* stdin cases: one run per case (`stdio.py`).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from corrgrpo_proto.code import (
    AnyProblem,
    CallCase,
    CallProblem,
    CodeProblem,
    MbppProblem,
    StdinCase,
    StdinProblem,
    problem_kind,
)
from corrgrpo_sandbox import Limits, Sandbox

from .budget import BudgetedSandbox
from .cache import BoundedMemo
from .extract import marker_of, parse_python, syntax_error
from .harness import Expect, HarnessResult, IOTest, canonical, encode, run_assert, run_io
from .settings import CASE_S
from .similarity import Reference
from .split import split_check
from .stdio import ONE_BY_ONE, CaseRuns, case_limits, run_stdin

log = logging.getLogger("corrgrpo.code")
PROBE = "def f():\n    return 1\n"  # a run the sandbox must pass when it is healthy
PREPARED = 256  # distinct problems kept prepared (split tests, reference tree)


class ProblemError(ValueError):
    """A problem that cannot be judged as sent (an MBPP assert that does not parse, say): the item's error."""


class SandboxFault(RuntimeError):
    """The sandbox failed twice and also failed a trivial probe run: infrastructure, not the candidate."""


def _as_lists(tagged: Any) -> Any:
    """Tagged JSON with tuples as lists: a function may return `(1, 2)` where JSON can only hold `[1, 2]`."""
    if type(tagged) is list:
        return [_as_lists(value) for value in tagged]
    if type(tagged) is dict and type(tagged.get("v")) is list and tagged.get("__t") in ("tuple", "dict"):
        items = [_as_lists(value) for value in tagged["v"]]
        return items if tagged["__t"] == "tuple" else {"__t": "dict", "v": items}
    return tagged


@dataclass(frozen=True)
class ReturnMatches(Expect):
    """A call case's expectation, decided by the service on the returned data: equal to the expected value
    (tuples as lists), or to its only element when it is a one-element list (TACO/APPS wrap return values so).
    """

    accepted: tuple[Any, ...] = field(default=())

    @classmethod
    def of(cls, expected: Any) -> ReturnMatches:
        accepted = [expected, expected[0]] if type(expected) is list and len(expected) == 1 else [expected]
        return cls("equals", None, tuple(canonical(encode(value)) for value in accepted))

    def holds(self, tagged: Any) -> bool:
        got = canonical(_as_lists(tagged))
        return any(got == value for value in self.accepted)


def call_tests(cases: list[CallCase]) -> list[IOTest]:
    """One I/O test per case: the child evaluates `candidate(*args)` (the arguments as a literal), nothing
    more."""
    return [
        IOTest(f"candidate(*{case.args!r})", "_out == expected", ReturnMatches.of(case.expected))
        for case in cases
    ]


class _Rename(ast.NodeTransformer):
    def __init__(self, name: str) -> None:
        self.name = name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name("candidate", node.ctx) if node.id == self.name else node


def _first_call(trees: list[ast.Module]) -> str | None:
    """The first function the asserts call by name that is not a builtin (MBPP's `assert f(...) == ...`)."""
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and not hasattr(builtins, node.func.id)
            ):
                return node.func.id
    return None


def mbpp_check(problem: MbppProblem) -> CodeProblem:
    """The equivalent check-function problem: the asserts become `check(candidate)`'s body with the function's
    name renamed to `candidate`; `test_setup_code` is the prelude."""
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


Content = tuple[str, ...]


def problem_content(problem: AnyProblem) -> Content:
    """Every field but `task_id`. The first string names the kind (a check problem's four fields need none).
    An absent optional string and an empty one judge alike, so they are one content."""
    if isinstance(problem, CodeProblem):
        return problem.prompt, problem.entry_point, problem.test, problem.reference
    if isinstance(problem, StdinProblem):
        cases = (text for case in problem.stdin_cases for text in (case.input, case.output))
        return "stdin", str(problem.time_limit_s), problem.reference or "", *cases
    if isinstance(problem, MbppProblem):
        return (
            "mbpp",
            problem.test_setup_code,
            problem.entry_point or "",
            problem.reference or "",
            *problem.test_list,
        )
    # data, not hashable as it is
    calls = json.dumps([[case.args, case.expected] for case in problem.call_cases])
    return "call", problem.prompt, problem.fn_name, str(problem.time_limit_s), problem.reference or "", calls


def content_hash(content: Content) -> str:
    """The content's sha256, as a JSON list: the problem's name in the caches."""
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ProblemTests:
    """Stdin cases, or a prelude and entry point with I/O tests (call cases, split checks and MBPP asserts) or
    a `check` source for assert mode."""

    problem: AnyProblem
    key: str  # `content_hash`: the problem's name in the store
    io_tests: list[IOTest] | None  # None: assert mode (or stdin cases)
    marker: str  # what extraction looks for and `format` requires ("" for stdin programs)
    reference: Reference
    prelude: str = ""
    entry: str = ""
    test: str = ""
    stdin: list[StdinCase] | None = None
    time_limit_s: float | None = None  # CPU s per stdin case or of a call problem's run; None: the settings'
    kind: str | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", problem_kind(self.problem))  # once: read for every item's `info`

    @property
    def judged_key(self) -> str:
        """The key and the time limit the problem is judged under (a stdin problem's depends on settings)."""
        return f"{self.key}:{self.time_limit_s}"

    @classmethod
    def of(cls, problem: AnyProblem, key: str | None = None, case_s: float = CASE_S) -> ProblemTests:
        """Raises ProblemError for a problem that cannot be judged as sent."""
        key = key or content_hash(problem_content(problem))
        if isinstance(problem, StdinProblem):
            limit = min(problem.time_limit_s or case_s, case_s)
            reference = Reference.of(problem.reference or "", "")
            return cls(problem, key, None, "", reference, stdin=problem.stdin_cases, time_limit_s=limit)
        if isinstance(problem, CallProblem):
            marker = marker_of(problem.fn_name)
            reference = Reference.of(problem.reference or "", marker)
            tests = call_tests(problem.call_cases)
            limit = problem.time_limit_s
            return cls(
                problem, key, tests, marker, reference, problem.prompt, problem.fn_name, time_limit_s=limit
            )
        check = mbpp_check(problem) if isinstance(problem, MbppProblem) else problem
        marker = marker_of(check.entry_point)
        reference = Reference.of(check.reference, marker)
        tests = split_check(check.test)
        return cls(problem, key, tests, marker, reference, check.prompt, check.entry_point, check.test)

    def run(
        self,
        sandbox: Sandbox | BudgetedSandbox,
        solution: str,
        limits: Limits,
        parsed: bool = False,
        cases: CaseRuns = ONE_BY_ONE,
    ) -> HarnessResult:
        """The harness run for `solution`, retried once on a sandbox anomaly. An anomaly that repeats while a
        trivial probe passes is the solution's doing (it killed its worker, say): stage `anomaly`, a failure.
        Raises SandboxFault when the probe fails too (the sandbox itself is broken)."""
        for _ in range(2):
            result = self._run_once(sandbox, solution, limits, parsed, cases)
            if result.stage != "anomaly":
                return result
            task_id = self.problem.task_id
            log.warning("sandbox anomaly, retrying once", extra={"task_id": task_id, "anomaly": result.error})
        probe = run_io(sandbox, "", PROBE, "f", [], limits)  # type: ignore[arg-type]
        if probe.stage == "anomaly":
            raise SandboxFault(f"{result.error}; a trivial probe run failed too: {probe.error}")
        return result

    def _run_once(
        self, sandbox: Sandbox | BudgetedSandbox, solution: str, limits: Limits, parsed: bool, cases: CaseRuns
    ) -> HarnessResult:
        if self.stdin is not None:
            if not parsed and (error := syntax_error(solution)):
                return HarnessResult("syntax", "stdin", 0, len(self.stdin), error)  # type: ignore[arg-type]
            return run_stdin(sandbox, solution, self.stdin, limits, self.time_limit_s or CASE_S, cases)  # type: ignore[arg-type]
        if self.time_limit_s is not None:
            limits = case_limits(limits, min(limits.cpu_s, self.time_limit_s))
        if self.io_tests is not None:
            independent = isinstance(self.problem, CallProblem)  # cases, not one check function's lines
            return run_io(
                sandbox,  # type: ignore[arg-type]
                self.prelude,
                solution,
                self.entry,
                self.io_tests,
                limits,
                parsed=parsed,
                independent=independent,
            )
        return run_assert(sandbox, self.prelude, solution, self.entry, self.test, limits, parsed=parsed)  # type: ignore[arg-type]


class PreparedProblems:
    """Each distinct problem prepared once (LRU by content): splitting a big check and parsing the reference
    cost seconds. A stdin problem's time limit depends on `case_s`."""

    def __init__(self, case_s: float) -> None:
        self.case_s = case_s
        self.memo: BoundedMemo[Content, ProblemTests] = BoundedMemo(PREPARED)

    def get(self, problem: AnyProblem) -> ProblemTests:
        content = problem_content(problem)
        return self.memo.get(content, lambda: ProblemTests.of(problem, content_hash(content), self.case_s))

    def peek(self, problem: AnyProblem) -> ProblemTests | None:
        return self.memo.peek(problem_content(problem))
