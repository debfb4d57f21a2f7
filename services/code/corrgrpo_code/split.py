"""Split `check(candidate)` into I/O tests, so expected values never enter the candidate's process.

A check qualifies when its body is only `assert <expr>[, msg]` statements (plus docstrings, `pass`, `assert
True`, a builtin's bare name and imports of modules the judge provides), each `<expr>` containing exactly one
call of the candidate, and the rest of `<expr>` using only names the judge provides (`SAFE_NAMES`). The call
is sent to the child. The rest of the assertion becomes the check with the call replaced by the output, e.g.
`assert abs(candidate(2.5) - 0.5) < 1e-6` → child: `candidate(2.5)`, check: `abs(_out - 0.5) < 1e-6`. Nothing
here evaluates test text: checks are parsed with `ast`, and `_out == <literal>` (the literal read by
`ast.literal_eval`, data only), `_out is True/False/None`, `_out` and `not _out` become an `Expect` the
service process decides on data. Every other check is evaluated by the harness's sandboxed judge. A `for
<name> in range(<int literals>):` loop of such assertions is unrolled (at most `UNROLLED` tests): each value
is written into the assertions' text in place of the name, so `for x in range(2, 4): assert candidate(x) ==
str(x)` is `candidate((2)) == str((2))` and `candidate((3)) == str((3))`. Anything else (other loops, locals,
helpers such as `is_same_tree`) is left to assert mode (`None`).

LeetCode checks hold arguments and expected values of up to 10⁵ elements, so the splitter works on source
segments and only descends into the AST where the parameter's name occurs in the text. Any doubt (the name
inside a string, say) sends the problem to assert mode, never to a wrong I/O test.
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from corrgrpo_code.extract import parse_python
from corrgrpo_code.harness import Expect, IOTest, Items, Near, canonical, encode

_OUTPUT = "_out"
_BUILTINS = (
    "abs",
    "all",
    "any",
    "bool",
    "dict",
    "float",
    "frozenset",
    "int",
    "isinstance",
    "len",
    "list",
    "max",
)
_BUILTINS += ("min", "range", "round", "set", "sorted", "str", "sum", "tuple", "type", "zip")
SAFE_NAMES = frozenset(_BUILTINS) | {"math", "inf", "nan"}  # what the judge's checks may name
_SAFE_MODULES = frozenset({"math"})
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
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id == parameter
            ):
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


class _Constants(ast.NodeTransformer):
    """`inf`/`nan` as constants, `+ - * /` of two numbers folded (`2.0/3.0`, `3 * 5 * 7`): the operation the
    judge's compiler would fold, on numbers read from the AST. Operands of any other kind, or ints over
    `_FOLDED_INT`, stay. And `str(<int>)` as its digits (an unrolled loop's `str(x)`): what the judge's
    builtin `str` returns."""

    def visit_Name(self, name: ast.Name) -> ast.AST:
        return ast.Constant(_CONSTANTS[name.id]) if name.id in _CONSTANTS else name

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        operation, left, right = _ARITHMETIC.get(type(node.op)), _number(node.left), _number(node.right)
        if operation is None or left is None or right is None:
            return node
        try:
            value = operation(left, right)
        except ZeroDivisionError:
            return node
        return ast.Constant(value) if _number(ast.Constant(value)) is not None else node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        argument = _call_of(node, ("str",))
        number = None if argument is None else _number(argument)
        return ast.Constant(str(number)) if type(number) is int else node


def _number(node: ast.expr) -> int | float | None:
    """An int (at most `_FOLDED_INT` in size) or float constant, signed or not; None for anything else (bool
    too)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _number(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if not isinstance(node, ast.Constant) or type(node.value) not in (int, float):
        return None
    return node.value if type(node.value) is float or abs(node.value) <= _FOLDED_INT else None


_ARITHMETIC = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_FOLDED_INT = 1 << 64


def _literal(node: ast.expr) -> Any:
    """The value of a literal (`inf`/`nan` and `_Constants`' arithmetic allowed) read as data, or `_NOT_DATA`.
    Never evaluates an expression."""
    try:
        return ast.literal_eval(_Constants().visit(node))
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return _NOT_DATA


def _call_of(node: ast.expr, names: tuple[str, ...]) -> ast.expr | None:
    """The only argument of `name(argument)` for a name in `names` (no keywords), else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
        return node.args[0] if len(node.args) == 1 and not node.keywords else None
    return None


def _near(check: ast.expr) -> Expect | None:
    """`abs(_out - x) < t` (or `abs(x - _out)`, `<=`), `math.isclose(_out, x[, rel_tol=r][, abs_tol=t])`,
    numbers."""
    if isinstance(check, ast.Call) and ast.unparse(check.func) == "math.isclose" and len(check.args) == 2:
        tolerances = {"rel_tol": 1e-09, "abs_tol": 0.0}
        for keyword in check.keywords:
            if keyword.arg not in tolerances or (number := _literal(keyword.value)) is _NOT_DATA:
                return None
            tolerances[keyword.arg] = number
        value = _literal(check.args[1]) if _is_output(check.args[0]) else _NOT_DATA
        numbers = (value, *tolerances.values())
        if not all(type(x) in (int, float) for x in numbers):
            return None
        return Near("close", value, tolerances["abs_tol"], tolerances["rel_tol"])
    if not (
        isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], ast.Lt | ast.LtE)
    ):
        return None
    gap, tolerance = _call_of(check.left, ("abs",)), _literal(check.comparators[0])
    if (
        not isinstance(gap, ast.BinOp)
        or not isinstance(gap.op, ast.Sub)
        or type(tolerance) not in (int, float)
    ):
        return None
    if _is_output(gap.left) == _is_output(gap.right):
        return None
    value = _literal(gap.right if _is_output(gap.left) else gap.left)
    if type(value) not in (int, float):
        return None
    return Near("close", value, tolerance, strict=isinstance(check.ops[0], ast.Lt))


def _items(check: ast.Compare) -> Expect | None:
    """`tuple(_out) == tuple(<list or tuple>)` or `== <tuple>`, and the same with `list`."""
    output, other = check.left, check.comparators[0]
    if not isinstance(output, ast.Call) or not isinstance(output.func, ast.Name):
        return None
    kind = {"tuple": tuple, "list": list}.get(output.func.id)
    argument = _call_of(output, ("tuple", "list"))
    if kind is None or argument is None or not _is_output(argument):
        return None
    inner = _call_of(other, (output.func.id,))
    value = _literal(other if inner is None else inner)
    if type(value) not in (list, tuple) or (inner is None and type(value) is not kind):
        return None  # a tuple is never equal to a list: such a check is the judge's
    try:
        return Items("equals", tuple(canonical(encode(item)) for item in value))
    except (TypeError, RecursionError):
        return None


def _expect(check: ast.expr) -> Expect | None:
    """The data-only form of the check, when it has one (see the module docstring)."""
    if _is_output(check):
        return Expect("truthy")
    if isinstance(check, ast.UnaryOp) and isinstance(check.op, ast.Not) and _is_output(check.operand):
        return Expect("falsy")
    if (
        not isinstance(check, ast.Compare)
        or len(check.ops) != 1
        or isinstance(check.ops[0], ast.Lt | ast.LtE)
    ):
        return _near(check)
    (comparison,), left, right = check.ops, check.left, check.comparators[0]
    if isinstance(comparison, ast.Is) and _is_output(left) and isinstance(right, ast.Constant):
        return Expect("is", right.value) if type(right.value) in (bool, type(None)) else None
    if not isinstance(comparison, ast.Eq):
        return None
    if _is_output(left) == _is_output(right):
        return _items(check)
    value = _literal(right if _is_output(left) else left)
    try:
        return None if value is _NOT_DATA else Expect.equals(value)
    except (TypeError, RecursionError):  # complex, Ellipsis: left to the judge
        return None


def _io_test(tested: ast.expr, parameter: str, module: _TestModule, source: _Source) -> IOTest | None:
    """The I/O test of `assert <tested>`."""
    calls = _candidate_calls(ast.Expression(tested), parameter, source)
    if len(calls) != 1:
        return None
    (test_start, test_end), (call_start, call_end) = source.span(tested), source.span(calls[0])
    arguments = source.data[call_start:call_end].decode()[len(parameter) :]
    rest = source.data[test_start:call_start].decode() + _OUTPUT + source.data[call_end:test_end].decode()
    mention = _word(parameter)
    if mention.search(arguments) or mention.search(rest) or (module.names and module.names.search(arguments)):
        # the candidate used twice, or an argument the child cannot evaluate (it never gets the test module)
        return None
    rest = f"({rest}\n)"  # a multi-line assertion is one expression
    try:
        check = parse_python(rest, mode="eval").body  # type: ignore[attr-defined]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if _free_names(check) - module.safe - {_OUTPUT}:
        return None  # a name the judge lacks, or one the module rebinds
    return IOTest(call=f"candidate{arguments}", check=rest, expect=_expect(check))


def _skippable(statement: ast.stmt) -> bool:
    """A statement with no effect on the tests: `pass`, a docstring, `assert True`, a safe import, or a
    builtin's bare name (HumanEval/129's stray `print`: reading a name runs nothing)."""
    if isinstance(statement, ast.Pass) or (
        isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
    ):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Name):
        return hasattr(builtins, statement.value.id)
    if isinstance(statement, ast.Import):
        return all(alias.name in _SAFE_MODULES and alias.asname is None for alias in statement.names)
    return (
        isinstance(statement, ast.Assert)
        and isinstance(statement.test, ast.Constant)
        and bool(statement.test.value)
    )


@dataclass(frozen=True)
class _TestModule:
    """What the module around `check` means for its assertions: the names it uses or binds (`names`: an
    argument naming one cannot be evaluated in the child, which never gets the module), and the judge's names
    it leaves as they are (`safe`: a check naming one it rebinds, `def str(x): ...` or `abs = ...`, means the
    module's, which neither the service's data checks nor the judge have)."""

    names: re.Pattern[str] | None
    safe: frozenset[str]


def _imported(nodes: list[ast.AST], keep: frozenset[str] = frozenset()) -> set[str]:
    """The names the imports among `nodes` bind ("*" for a star import), but those of a plain `import <m>` of
    a module in `keep` (which binds the very module the judge has; `import json as math` or `from os import
    math` do not)."""
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in nodes
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if not (isinstance(node, ast.Import) and alias.asname is None and alias.name in keep)
    }


def _test_module(module: ast.Module, check: ast.FunctionDef) -> _TestModule:
    others = [s for s in module.body if s is not check]
    nodes = [n for s in others for n in ast.walk(s)]
    names = {n.id for n in nodes if isinstance(n, ast.Name)}
    names |= _imported(nodes) | {s.name for s in others if isinstance(s, ast.FunctionDef | ast.ClassDef)}
    pattern = re.compile("|".join(rf"(?<![\w.]){re.escape(n)}\b" for n in sorted(names))) if names else None
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {n.name for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    bound |= {n.arg for n in nodes if isinstance(n, ast.arg)} | _imported(nodes, _SAFE_MODULES)
    if bound & {"*", "builtins", "__builtins__"} or "__builtins__" in names:
        return _TestModule(pattern, frozenset())  # anything may be rebound
    return _TestModule(pattern, SAFE_NAMES - bound)


UNROLLED = 100  # the most tests a check's loops are unrolled into. Longer ones are left to assert mode
UNROLLED_BYTES = 1 << 16  # and the most text: LeetCode's assertions hold literals of 10^5 elements
_SCOPES = (
    ast.Lambda,
    ast.GeneratorExp,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.JoinedStr,
    ast.NamedExpr,
)


def _range_values(loop: ast.For) -> range | None:
    """The values of `for <name> in range(<int literals>):` without `else`, at most `UNROLLED` of them; else
    None."""
    call = loop.iter
    if (
        not isinstance(loop.target, ast.Name)
        or loop.orelse
        or not isinstance(call, ast.Call)
        or call.keywords
    ):
        return None
    if not isinstance(call.func, ast.Name) or call.func.id != "range" or not 1 <= len(call.args) <= 3:
        return None
    bounds = [_number(argument) for argument in call.args]
    if not all(type(bound) is int for bound in bounds) or (len(bounds) == 3 and bounds[2] == 0):
        return None  # a step of 0 raises: assert mode says so
    values = range(*bounds)  # type: ignore[arg-type]
    try:
        return values if len(values) <= UNROLLED else None
    except OverflowError:  # more values than an index holds
        return None


class _Unroller:
    """Unrolls a check's loops (`unrolled`): what that needs from the whole check is gathered in one walk, and
    all its loops together make at most `UNROLLED` tests and `UNROLLED_BYTES` of their text."""

    def __init__(self, check: ast.FunctionDef, module: _TestModule, source: _Source) -> None:
        self.check, self.module, self.source = check, module, source
        self.tests, self.bytes = UNROLLED, UNROLLED_BYTES
        nodes = list(ast.walk(check))
        names = [n for n in nodes if isinstance(n, ast.Name)]
        self.uses = Counter(n.id for n in names)
        # bound other than by a plain name: arguments (the check's, a lambda's) and imports
        self.binders = {n.arg for n in nodes if isinstance(n, ast.arg)} | _imported(nodes)
        stores = {n.id for n in names if not isinstance(n.ctx, ast.Load)}
        self.range_bound = "range" in self.binders | stores or "range" not in module.safe
        self.loop_uses: Counter[str] = Counter()  # a name's uses as a top-level loop's target and in its body
        for loop in check.body:
            if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name):
                inside = sum(len(_names(statement, loop.target.id)) for statement in loop.body)
                self.loop_uses[loop.target.id] += 1 + inside

    def unrolled(self, loop: ast.For) -> list[IOTest] | None:
        """The I/O tests of a loop over literal ints whose body is assertions `_io_test` splits once the
        loop's name is replaced by each value; None when that would not be the same test: `range` bound
        anywhere in the test, or the loop's name bound in the check other than as such a loop's target, or
        read outside their bodies (it outlives the loop)."""
        values = _range_values(loop)
        if values is None or self.range_bound or not isinstance(loop.target, ast.Name):
            return None
        name = loop.target.id
        if name in self.binders or self.uses[name] != self.loop_uses[name]:
            return None
        body = [s for s in loop.body if not _skippable(s)]
        asserts = [s for s in body if isinstance(s, ast.Assert)]
        if len(asserts) != len(body) or len(values) * len(asserts) > self.tests:
            return None
        templates = []
        for assertion in asserts:
            template = _template(assertion.test, name, self.source)
            if template is None:
                return None
            templates.append(template)
        size = len(values) * sum(len(text) for text, _ in templates)
        if size > self.bytes:
            return None
        self.tests, self.bytes = self.tests - len(values) * len(asserts), self.bytes - size
        tests = []
        for value in values:
            for text, spans in templates:
                written = _Source(_written(text, spans, f"({value})"))
                try:
                    tested = parse_python(written.data.decode(), mode="eval").body  # type: ignore[attr-defined]
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    return None
                test = _io_test(tested, self.check.args.args[0].arg, self.module, written)
                if test is None:
                    return None
                tests.append(test)
        return tests


def _names(node: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name]


def _template(tested: ast.expr, name: str, source: _Source) -> tuple[bytes, list[tuple[int, int]]] | None:
    """`tested`'s text as `(\\n<text>\\n)` and the spans of `name` in it; None when one sits in a nested
    scope, a walrus or an f-string (whose inner positions Python 3.11 does not always give)."""
    outside, stack = [], [tested]
    while stack:  # the nodes outside nested scopes: one walk, however deep they nest
        node = stack.pop()
        if not isinstance(node, _SCOPES):
            outside.append(node)
            stack.extend(ast.iter_child_nodes(node))
    found = [n for n in outside if isinstance(n, ast.Name) and n.id == name]
    if len(found) != len(_names(tested, name)):
        return None
    start, end = source.span(tested)
    spans = sorted(source.span(node) for node in found)
    if any(source.data[at:to] != name.encode() for at, to in spans):
        return None
    return b"(\n" + source.data[start:end] + b"\n)", [(at - start + 2, to - start + 2) for at, to in spans]


def _written(text: bytes, spans: list[tuple[int, int]], value: str) -> str:
    """`text` with each span replaced by `value`."""
    parts, at = [], 0
    for start, end in spans:
        parts += [text[at:start], value.encode()]
        at = end
    return b"".join([*parts, text[at:]]).decode()


def split_check(test_source: str) -> list[IOTest] | None:
    """The I/O tests of `check(candidate)` in `test_source`, or None when it needs assert mode."""
    try:
        module = parse_python(test_source)
    except (SyntaxError, ValueError):
        return None
    checks = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1 or checks[0].decorator_list:
        return None
    parameter, source, around = (
        checks[0].args.args[0].arg,
        _Source(test_source),
        _test_module(module, checks[0]),
    )
    tests: list[IOTest] = []
    unroller: _Unroller | None = None  # made at the first loop: most checks have none
    for statement in checks[0].body:
        if _skippable(statement):
            continue
        if isinstance(statement, ast.For):
            unroller = unroller or _Unroller(checks[0], around, source)
            unrolled = unroller.unrolled(statement)
            if unrolled is None:
                return None
            tests += unrolled
            continue
        test = (
            _io_test(statement.test, parameter, around, source) if isinstance(statement, ast.Assert) else None
        )
        if test is None:
            return None
        tests.append(test)
    return tests or None
