"""Pure scoring of one code item: its components and `info` from the extracted code, its parse and its run's
verdict. Efficiency is added later, for correct items only, from times measured per batch (`batch_efficiency.py`)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from corrgrpo_common import Scored

from .extract import Extracted
from .harness import HarnessResult
from .prepared import PreparedProblem
from .similarity import OverBudget

_ASSERTION = re.compile(r"(?:test \d+: )?AssertionError\b")  # the harness's error text for a raised AssertionError


@dataclass
class Outcome:
    """An item's scores before efficiency, and what efficiency needs of it."""

    scored: Scored
    timed: PreparedProblem | None = None  # set when correct: efficiency needs this problem's t_ref
    cpu_s: float = 0.0
    code: str = ""  # the program run (calibrated efficiency times it again)


def _raised_assertion(result: HarnessResult) -> bool:
    """An AssertionError that ended the run outside a test's check (the code's own `assert`, at its top level or in the
    function under test): for `runtime`, the authors count every AssertionError as a failed test, not a crash."""
    return result.stage in ("toplevel", "test_error") and bool(_ASSERTION.match(result.error or ""))


def components(fmt: float, syntax: bool, similarity: float, result: HarnessResult) -> dict[str, float]:
    """The dependency chain: syntax (the code parses, here) → compile (prelude + code compiled in the sandbox's child,
    `HarnessResult.compiled`) → runtime (no error but a failed assertion) → correct (every test passed). An anomaly
    the solution caused counts as not compiling: nothing of an untrustworthy run is trusted. Efficiency is 0 here."""
    compiled = syntax and result.compiled is True and result.stage != "anomaly"
    runtime = compiled and (result.stage in ("assertion", "passed") or _raised_assertion(result))
    correct = compiled and result.stage == "passed"
    return {
        "format": fmt,
        "syntax": float(syntax),
        "compile": float(compiled),
        "runtime": float(runtime),
        "correct": float(correct),
        "ast_similarity": similarity,
        "efficiency": 0.0,
        "pass_rate": result.passed / result.total if compiled and result.total else 0.0,
    }


def too_long(extracted: Extracted, max_chars: int) -> Outcome:
    """Code over `max_chars` is neither parsed nor run: all but `format` 0."""
    error = f"code of {len(extracted.code)} characters is over the limit of {max_chars}; not run"
    zeros = dict.fromkeys(("syntax", "compile", "runtime", "correct", "ast_similarity", "efficiency", "pass_rate"), 0.0)
    return Outcome(Scored({"format": extracted.format, **zeros}, {"stage": "too_long", "error": error}))


def conclude(
    prepared: PreparedProblem,
    extracted: Extracted,
    tree: ast.Module | None,
    result: HarnessResult,
    source: str,
    isolation: str,
    timed: bool,
) -> Outcome:
    """The item's components and info from its run (`source`: `run`, `batch`: another item's, `store`; `isolation`:
    the sandbox's, for a run without timing). `timed`: a correct run is to be timed for efficiency."""
    info: dict[str, Any] = {
        "kind": prepared.kind,
        "run": source,
        "stage": result.stage,
        "error": result.error,
        "tests_passed": result.passed,
        "tests_total": result.total,
        "mode": result.mode,
        "isolation": result.exec.isolation if result.exec else isolation,
        "t": result.exec.cpu_s if result.exec else None,
        "t_wall": result.exec.wall_s if result.exec else None,
        "fenced": extracted.fenced,
        "ast_reference": prepared.reference.available,  # False: no reference to compare with, similarity 0
    }
    try:
        similarity = prepared.reference.similarity(tree)
    except OverBudget as error:  # too repetitive or too large to compare within the budget: scores 0
        similarity, info["ast_error"] = 0.0, str(error)
    scored = Scored(components(extracted.format, tree is not None, similarity, result), info)
    if timed and result.ok and result.exec is not None:
        if not prepared.reference.code:
            info["t_ref_error"] = "no reference solution"
            return Outcome(scored)
        return Outcome(scored, prepared, result.exec.cpu_s, extracted.code)
    return Outcome(scored)
