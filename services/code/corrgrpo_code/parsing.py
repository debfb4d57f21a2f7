"""Parsing a candidate's code in the service process: one thread at a time, and never a crash on absurd input."""

from __future__ import annotations

import ast
import threading
from typing import Literal

_PARSING = threading.RLock()  # re-entrant: a finalizer run by a collection inside a parse may parse too


def parse_python(source: str, mode: Literal["exec", "eval"] = "exec") -> ast.AST:
    """`ast.parse`, one thread at a time. CPython before 3.11.8 (Debian 12 ships 3.11.2) keeps the AST constructor's
    recursion depth per interpreter, so a collection during one thread's parse that lets another thread parse fails
    with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905). Parsing holds the GIL
    anyway: the lock costs no parallelism. Every parse in the code service goes through here."""
    with _PARSING:
        return ast.parse(source, mode=mode)


def parse_solution(solution: str) -> ast.Module | str:
    """The solution's syntax tree, or why it cannot be compiled. Absurd nesting is the solution's failure, never a crash."""
    if not solution.strip():
        return "no code"
    try:
        return parse_python(solution)  # type: ignore[return-value]
    except (SyntaxError, ValueError) as error:  # ValueError: null bytes
        return f"{type(error).__name__}: {error}"
    except (RecursionError, MemoryError) as error:  # the parser's own stack: deeply nested expressions
        return f"{type(error).__name__}: nested too deeply to compile"


def syntax_error(solution: str) -> str | None:
    """Why `solution` cannot be compiled, or None."""
    tree = parse_solution(solution)
    return tree if isinstance(tree, str) else None
