"""The trainer's modules import without cycles, and its command line without TRL (the `advantages` core is
torch only)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "trainer" / "corrgrpo_trainer"


def module_name(path: Path) -> str:
    parts = ["corrgrpo_trainer", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the package's modules it imports}, function-level imports included (they run, too)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level else ""
                target = ".".join(part for part in (base, node.module) if part)
                # `from .agentdojo import tools` imports the submodule; `from .config import InputError` the
                # module
                edges |= {
                    f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules
                }
                edges |= {target} & modules.keys()
            elif isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names} & modules.keys()
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for child in sorted(graph[node]):
            if state.get(child) == "open":
                return [*path[path.index(child) :], node, child] if child in path else [node, child]
            if child not in state and (cycle := visit(child, [*path, node])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [])):
            return cycle
    return None


def test_the_graph_sees_relative_and_function_level_imports() -> None:
    graph = import_graph()
    # from .tools import
    assert "corrgrpo_trainer.agentdojo.tools" in graph["corrgrpo_trainer.agentdojo.trl_inputs"]
    # from ..policy import
    assert "corrgrpo_trainer.policy" in graph["corrgrpo_trainer.agentdojo.episode_metrics"]
    assert "corrgrpo_trainer.trl_trainer" in graph["corrgrpo_trainer.train"]  # inside train()
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_trainer_module_imports_itself_back() -> None:
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()) or [])


def test_the_command_line_imports_without_trl_or_transformers() -> None:
    """`python -m corrgrpo_trainer advantages` is the torch-only core: TRL loads only when a command
    trains."""
    heavy = "{'trl', 'transformers', 'datasets'}"
    code = f"import sys, corrgrpo_trainer.cli; print(sorted({heavy} & set(sys.modules)))"
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert run.stdout.strip() == "[]"
