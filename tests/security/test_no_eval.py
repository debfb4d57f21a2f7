"""No service process evaluates text: no eval/exec, no compile() of non-constant source (issue 14.1).

Every field of a request is untrusted; code runs only in the sandbox. This walks the AST of every module of
the services, the wire models and the trainer, and names each offending call. The code service's child half
(`harness.CHILD_FILE`) evaluates tests by design, inside the sandbox only: it is exempt, and no module imports
it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from corrgrpo_code.harness import CHILD_FILE

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("services", "proto", "trainer")
EVALUATING = {"eval", "exec"}
COMPILE_MODES = {"exec", "eval", "single"}


def _is_builtin(func: ast.expr, names: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in names
    return (
        isinstance(func, ast.Attribute)
        and func.attr in names
        and isinstance(func.value, ast.Name)
        and func.value.id in ("builtins", "__builtins__")
    )


def _compile_mode(call: ast.Call) -> object:
    mode = (
        call.args[2]
        if len(call.args) > 2
        else next((k.value for k in call.keywords if k.arg == "mode"), None)
    )
    return mode.value if isinstance(mode, ast.Constant) else mode


def offences(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.Call):
            continue
        where = f"{name}:{node.lineno}"
        if _is_builtin(node.func, EVALUATING):
            found.append(f"{where}: {ast.unparse(node.func)}()")
        elif _is_builtin(node.func, {"compile"}):
            mode = _compile_mode(node)
            constant_source = bool(node.args) and isinstance(node.args[0], ast.Constant)
            if (mode in COMPILE_MODES or not isinstance(mode, str)) and not constant_source:
                found.append(f"{where}: compile() of non-constant source")
    return found


def modules() -> list[Path]:
    paths = (p for root in ROOTS for p in (REPO / root).rglob("*.py") if ".venv" not in p.parts)
    return sorted(p for p in paths if p.resolve() != CHILD_FILE)


def imported_modules(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_the_sandbox_only_module_runs_nowhere_else() -> None:
    """It is exempt from the walk because it runs only in the sandbox: nothing of ours imports it."""
    assert CHILD_FILE.exists() and CHILD_FILE.stem == "harness_child"
    importers = [
        p
        for p in modules()
        if {"harness_child", "corrgrpo_code.harness_child"} & imported_modules(p.read_text())
    ]
    assert not importers


def test_the_walk_sees_the_services() -> None:
    names = {p.name for p in modules()}
    assert {"split.py", "scoring.py", "app.py"} <= names


@pytest.mark.parametrize(
    ("source", "count"),
    [
        ("eval(text)", 1),
        ("exec(code, {})", 1),
        ("import builtins\nbuiltins.eval(x)", 1),
        ("compile(text, '<t>', 'eval')", 1),
        ("compile(text, '<t>', mode='exec')", 1),
        ("compile('1 + 1', '<t>', 'eval')", 0),
        ("re.compile(pattern)", 0),
        ("ast.parse(text)\nast.literal_eval(node)", 0),
    ],
)
def test_the_detector(source: str, count: int) -> None:
    assert len(offences(source, "<case>")) == count


def test_no_service_module_evaluates_text() -> None:
    found = [hit for path in modules() for hit in offences(path.read_text(), str(path.relative_to(REPO)))]
    assert not found, "text evaluated in a service process:\n" + "\n".join(found)
