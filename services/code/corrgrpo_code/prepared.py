"""A problem of any kind prepared once for its runs: its tests split, its reference parsed, its identity hashed."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from corrgrpo_proto.code import AnyProblem, CallProblem, MbppProblem, StdinCase, StdinProblem, problem_kind

from .config import CASE_S
from .extract import marker_of
from .harness import IOTest
from .identity import content_hash, problem_content
from .kinds import call_tests, mbpp_check
from .similarity import Reference
from .split import split_check


@dataclass
class PreparedProblem:
    """Stdin cases, or a prelude and entry point with I/O tests (call cases, split checks and MBPP asserts) or a `check`
    source for assert mode."""

    problem: AnyProblem
    key: str  # `identity.content_hash`: the problem's name in the store
    io_tests: list[IOTest] | None  # None: assert mode (or stdin cases)
    marker: str  # what extraction looks for and `format` requires (`extract.marker_of`; "" for stdin programs)
    reference: Reference
    prelude: str = ""
    entry: str = ""
    test: str = ""
    stdin: list[StdinCase] | None = None
    time_limit_s: float | None = None  # CPU seconds per stdin case, or of a call problem's run; None: the config's
    t_ref: dict[str, Any] | None = None  # a successful t_ref, kept until `t_ref_until` (`ReferenceTimes.get`)
    t_ref_until: float = 0.0

    @functools.cached_property
    def kind(self) -> str | None:  # once: read for every item's `info`
        return problem_kind(self.problem)

    @property
    def judged_key(self) -> str:
        """The key and the time limit the problem is judged under (a stdin problem's depends on the config's)."""
        return f"{self.key}:{self.time_limit_s}"

    def remembered_t_ref(self) -> dict[str, Any] | None:
        """The t_ref kept in memory while it is fresh; asking needs no task of the event loop."""
        return self.t_ref if time.monotonic() < self.t_ref_until else None

    @classmethod
    def of(cls, problem: AnyProblem, key: str | None = None, case_s: float = CASE_S) -> PreparedProblem:
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
            return cls(problem, key, tests, marker, reference, problem.prompt, problem.fn_name, time_limit_s=problem.time_limit_s)
        check = mbpp_check(problem) if isinstance(problem, MbppProblem) else problem
        marker = marker_of(check.entry_point)
        reference = Reference.of(check.reference, marker)
        return cls(problem, key, split_check(check.test), marker, reference, check.prompt, check.entry_point, check.test)
