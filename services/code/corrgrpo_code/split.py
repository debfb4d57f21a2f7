"""Split `check(candidate)` into I/O tests, so expected values never enter the candidate's process.

A check qualifies when its body is only `assert <expr>[, msg]` statements (plus docstrings, `pass`,
`assert True` and imports of modules the parent provides), each `<expr>` containing exactly one
call of the candidate, and the rest of `<expr>` using only names the parent provides (`SAFE_NAMES`).
The call is sent to the child; the rest of the assertion becomes the parent-side predicate with the
call replaced by the decoded output, e.g. `assert abs(candidate(2.5) - 0.5) < 1e-6` → child:
`candidate(2.5)`, parent: `abs(_out - 0.5) < 1e-6`. Anything else (loops, locals, helpers such as
`is_same_tree`) is left to assert mode (`None`).

LeetCode checks hold arguments and expected values of up to 10⁵ elements, so the splitter works on
source segments and only descends into the AST where the parameter's name occurs in the text; any
doubt (the name inside a string, say) sends the problem to assert mode, never to a wrong I/O test.
"""

from __future__ import annotations

import ast
import math
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

from corrgrpo_sandbox.harness import IOTest

_OUTPUT = "_out"
_BUILTINS = (abs, all, any, bool, dict, float, frozenset, int, isinstance, len, list, max, min, range, round, set, sorted, str)
_BUILTINS += (sum, tuple, type, zip)
SAFE_NAMES: dict[str, Any] = {f.__name__: f for f in _BUILTINS} | {"math": math, "inf": math.inf, "nan": math.nan}
_SAFE_GLOBALS = {"__builtins__": {}, **SAFE_NAMES}
_SAFE_MODULES = {"math"}


class _Source:
    """Byte-exact source segments of AST nodes (col offsets are UTF-8 byte offsets)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode()
        self.line_starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.line_starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        return start, self.line_starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode()


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){re.escape(name)}\b")


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_names(constant)


def _candidate_calls(node: ast.AST, parameter: str, source: _Source) -> list[ast.Call]:
    """Calls of `parameter`, descending only into subtrees whose text mentions it."""
    found, stack = [], [node]
    while stack:
        for child in ast.iter_child_nodes(stack.pop()):
            if not hasattr(child, "lineno") or parameter not in source.text(child):
                continue
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == parameter:
                found.append(child)
            else:
                stack.append(child)
    return found


def _predicate(text: str) -> Callable[[Any], bool] | None:
    try:
        code = compile(f"({text}\n)", "<check>", "eval")
    except SyntaxError:
        return None
    unknown = set(_code_names(code)) - set(SAFE_NAMES) - {_OUTPUT}
    if any(_word(name).search(text) for name in unknown):  # a free name the parent lacks (not just an attribute)
        return None

    def accept(output: Any) -> bool:
        return bool(eval(code, _SAFE_GLOBALS, {_OUTPUT: output}))  # trusted test expression on decoded plain data

    return accept


def _io_test(assertion: ast.Assert, parameter: str, module_names: re.Pattern[str] | None, source: _Source) -> IOTest | None:
    test = ast.Expression(assertion.test)
    calls = _candidate_calls(test, parameter, source)
    if len(calls) != 1:
        return None
    (test_start, test_end), (call_start, call_end) = source.span(assertion.test), source.span(calls[0])
    arguments = source.data[call_start:call_end].decode()[len(parameter) :]
    rest = source.data[test_start:call_start].decode() + _OUTPUT + source.data[call_end:test_end].decode()
    mention = _word(parameter)
    if mention.search(arguments) or mention.search(rest) or (module_names and module_names.search(arguments)):
        return None  # the candidate used twice, or an argument the child cannot evaluate (it never gets the test module)
    accept = _predicate(rest)
    return IOTest(call=f"candidate{arguments}", accept=accept) if accept else None


def _skippable(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
        return True
    if isinstance(statement, ast.Import):
        return all(alias.name in _SAFE_MODULES and alias.asname is None for alias in statement.names)
    return isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Constant) and bool(statement.test.value)


def _module_names(module: ast.Module, check: ast.FunctionDef) -> re.Pattern[str] | None:
    names = {n.id for s in module.body if s is not check for n in ast.walk(s) if isinstance(n, ast.Name)}
    imports = [a for s in module.body if isinstance(s, ast.Import | ast.ImportFrom) for a in s.names]
    names |= {(a.asname or a.name).split(".")[0] for a in imports}
    names |= {s.name for s in module.body if isinstance(s, ast.FunctionDef | ast.ClassDef) and s is not check}
    return re.compile("|".join(rf"(?<![\w.]){re.escape(n)}\b" for n in sorted(names))) if names else None


def split_check(test_source: str) -> list[IOTest] | None:
    """The I/O tests of `check(candidate)` in `test_source`, or None when it needs assert mode."""
    try:
        module = ast.parse(test_source)
    except (SyntaxError, ValueError):
        return None
    checks = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1 or checks[0].decorator_list:
        return None
    parameter, source, module_names = checks[0].args.args[0].arg, _Source(test_source), _module_names(module, checks[0])
    tests: list[IOTest] = []
    for statement in checks[0].body:
        if _skippable(statement):
            continue
        test = _io_test(statement, parameter, module_names, source) if isinstance(statement, ast.Assert) else None
        if test is None:
            return None
        tests.append(test)
    return tests or None
