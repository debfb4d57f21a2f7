"""Split `check(candidate)` into I/O tests, so expected values never enter the candidate's process.

A check qualifies when its body is only `assert <expr>[, msg]` statements (plus docstrings, `pass`,
`assert True` and imports of modules the judge provides), each `<expr>` containing exactly one
call of the candidate, and the rest of `<expr>` using only names the judge provides (`SAFE_NAMES`).
The call is sent to the child; the rest of the assertion becomes the check with the call replaced
by the output, e.g. `assert abs(candidate(2.5) - 0.5) < 1e-6` → child: `candidate(2.5)`, check:
`abs(_out - 0.5) < 1e-6`. Nothing here evaluates test text: checks are parsed with `ast`, and
`_out == <literal>` (the literal read by `ast.literal_eval`, data only), `_out is True/False/None`,
`_out` and `not _out` become an `Expect` the service process decides on data; every other check is
evaluated by the harness's sandboxed judge. Anything else (loops, locals, helpers such as
`is_same_tree`) is left to assert mode (`None`).

LeetCode checks hold arguments and expected values of up to 10⁵ elements, so the splitter works on
source segments and only descends into the AST where the parameter's name occurs in the text; any
doubt (the name inside a string, say) sends the problem to assert mode, never to a wrong I/O test.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from corrgrpo_code.harness import IOTest
from corrgrpo_code.harness_data import Expect
from corrgrpo_code.parsing import parse_python

_OUTPUT = "_out"
_BUILTINS = ("abs", "all", "any", "bool", "dict", "float", "frozenset", "int", "isinstance", "len", "list", "max")
_BUILTINS += ("min", "range", "round", "set", "sorted", "str", "sum", "tuple", "type", "zip")
SAFE_NAMES = frozenset(_BUILTINS) | {"math", "inf", "nan"}  # what the judge's checks may name
_SAFE_MODULES = {"math"}
_CONSTANTS = {"inf": math.inf, "nan": math.nan}
_NOT_DATA = object()


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


def _free_names(check: ast.expr) -> set[str]:
    """Names the check reads that it does not bind itself (comprehension variables, lambda arguments)."""
    nodes = list(ast.walk(check))
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {n.arg for n in nodes if isinstance(n, ast.arg)}
    return {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def _is_output(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == _OUTPUT


def _literal(node: ast.expr) -> Any:
    """The value of a literal (`inf`/`nan` allowed) read as data, or `_NOT_DATA`; never evaluates an expression."""

    class Constants(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.AST:
            return ast.Constant(_CONSTANTS[name.id]) if name.id in _CONSTANTS else name

    try:
        return ast.literal_eval(Constants().visit(node))
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return _NOT_DATA


def _expect(check: ast.expr) -> Expect | None:
    """The data-only form of the check, when it has one (see the module docstring)."""
    if _is_output(check):
        return Expect("truthy")
    if isinstance(check, ast.UnaryOp) and isinstance(check.op, ast.Not) and _is_output(check.operand):
        return Expect("falsy")
    if not isinstance(check, ast.Compare) or len(check.ops) != 1:
        return None
    (operator,), left, right = check.ops, check.left, check.comparators[0]
    if isinstance(operator, ast.Is) and _is_output(left) and isinstance(right, ast.Constant):
        return Expect("is", right.value) if type(right.value) in (bool, type(None)) else None
    if not isinstance(operator, ast.Eq) or _is_output(left) == _is_output(right):
        return None
    value = _literal(right if _is_output(left) else left)
    try:
        return None if value is _NOT_DATA else Expect.equals(value)
    except (TypeError, RecursionError):  # complex, Ellipsis: left to the judge
        return None


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
    rest = f"({rest}\n)"  # a multi-line assertion is one expression
    try:
        check = parse_python(rest, mode="eval").body  # type: ignore[attr-defined]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if _free_names(check) - SAFE_NAMES - {_OUTPUT}:
        return None  # a name the judge lacks
    return IOTest(call=f"candidate{arguments}", check=rest, expect=_expect(check))


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
        module = parse_python(test_source)
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
