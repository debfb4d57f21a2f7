"""Split `check(candidate)` into I/O tests, so expected values never enter the candidate's process.

A check qualifies when its body is only `assert <expr>[, msg]` statements (plus docstrings, `pass`,
`assert True` and imports of modules the parent provides), each `<expr>` containing exactly one
call of the candidate, and the rest of `<expr>` using only names the parent provides (`SAFE_NAMES`).
The call is sent to the child; the rest of the assertion becomes the parent-side predicate with the
call replaced by the decoded output, e.g. `assert abs(candidate(2.5) - 0.5) < 1e-6` → child:
`candidate(2.5)`, parent: `abs(_out - 0.5) < 1e-6`. Anything else (loops, locals, helpers such as
`is_same_tree`) is left to assert mode (`None`).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from corrgrpo_sandbox.harness import IOTest

_OUTPUT = "_out"
_BUILTINS = (abs, all, any, bool, dict, float, frozenset, int, isinstance, len, list, max, min, range, round, set, sorted, str)
_BUILTINS += (sum, tuple, type, zip)
SAFE_NAMES: dict[str, Any] = {f.__name__: f for f in _BUILTINS} | {"math": math, "inf": math.inf, "nan": math.nan}
_SAFE_GLOBALS = {"__builtins__": {}, **SAFE_NAMES}
_SAFE_MODULES = {"math"}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _predicate(expression: ast.expr) -> Callable[[Any], bool]:
    code = compile(ast.Expression(expression), "<check>", "eval")

    def accept(output: Any) -> bool:
        return bool(eval(code, _SAFE_GLOBALS, {_OUTPUT: output}))  # trusted test expression on decoded plain data

    return accept


class _CallToOutput(ast.NodeTransformer):
    def __init__(self, call: ast.Call) -> None:
        self.call = call

    def visit_Call(self, node: ast.Call) -> ast.AST:
        return ast.Name(_OUTPUT, ast.Load()) if node is self.call else self.generic_visit(node)


def _io_test(assertion: ast.Assert, parameter: str, module_names: set[str]) -> IOTest | None:
    calls = [
        n for n in ast.walk(assertion.test) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == parameter
    ]
    mentions = [n for n in ast.walk(assertion.test) if isinstance(n, ast.Name) and n.id == parameter]
    if len(calls) != 1 or len(mentions) != 1:
        return None
    call = calls[0]
    arguments = ast.Tuple([*call.args, *(k.value for k in call.keywords)], ast.Load())
    if _names(arguments) & module_names:  # the child does not get the test module
        return None
    sent = ast.unparse(ast.Call(ast.Name("candidate", ast.Load()), call.args, call.keywords))
    predicate = ast.fix_missing_locations(_CallToOutput(call).visit(assertion.test))  # the tree is ours to rewrite
    if not _names(predicate) <= set(SAFE_NAMES) | {_OUTPUT}:
        return None
    return IOTest(call=sent, accept=_predicate(predicate))


def _skippable(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
        return True
    if isinstance(statement, ast.Import):
        return all(alias.name in _SAFE_MODULES and alias.asname is None for alias in statement.names)
    return isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Constant) and bool(statement.test.value)


def split_check(test_source: str) -> list[IOTest] | None:
    """The I/O tests of `check(candidate)` in `test_source`, or None when it needs assert mode."""
    try:
        module = ast.parse(test_source)
    except SyntaxError:
        return None
    checks = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1 or checks[0].decorator_list:
        return None
    parameter = checks[0].args.args[0].arg
    module_names = {n.id for s in module.body if s is not checks[0] for n in ast.walk(s) if isinstance(n, ast.Name)}
    module_names |= {a.asname or a.name for s in module.body if isinstance(s, ast.Import | ast.ImportFrom) for a in s.names}
    tests: list[IOTest] = []
    for statement in checks[0].body:
        if _skippable(statement):
            continue
        test = _io_test(statement, parameter, module_names) if isinstance(statement, ast.Assert) else None
        if test is None:
            return None
        tests.append(test)
    return tests or None
