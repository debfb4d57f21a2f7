"""The sandbox's public names are `corrgrpo_sandbox.__all__`: no module of ours outside the sandbox's own
tests and benchmark imports anything else of it (a module, or a name the package does not export).

Exempt: `tests/sandbox` (these tests check the internals: the worker's protocol, cgroups, residue checks) and
`bench/bench_sandbox.py` (its unsandboxed fork floor runs in a worker cgroup, as the pool's workers do)."""

from __future__ import annotations

import ast
from pathlib import Path

import corrgrpo_sandbox

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("services", "trainer", "bench", "adapters", "tests", "testing", "devtools", "proto")
EXEMPT = (REPO / "tests" / "sandbox", REPO / "bench" / "bench_sandbox.py")


def offences(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("corrgrpo_sandbox.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("corrgrpo_sandbox."):
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and node.module == "corrgrpo_sandbox":
            found += [alias.name for alias in node.names if alias.name not in corrgrpo_sandbox.__all__]
    return [f"{name}:{hit}" for hit in found]


def modules() -> list[Path]:
    paths = (path for root in ROOTS for path in (REPO / root).rglob("*.py") if ".venv" not in path.parts)
    return sorted(path for path in paths if not any(path.is_relative_to(exempt) for exempt in EXEMPT))


def test_the_detector() -> None:
    source = (
        "from corrgrpo_sandbox import Sandbox, Limits\n"
        "from corrgrpo_sandbox import worker\n"
        "from corrgrpo_sandbox.isolation import IsolationUnavailable\n"
        "import corrgrpo_sandbox.cgroups\n"
        "import corrgrpo_sandbox\n"
    )
    assert offences(source, "m.py") == [
        "m.py:worker",
        "m.py:from corrgrpo_sandbox.isolation import ...",
        "m.py:corrgrpo_sandbox.cgroups",
    ]


def test_the_exported_names_are_the_executor_s() -> None:
    assert sorted(corrgrpo_sandbox.__all__) == [
        "ExecResult",
        "IsolationUnavailable",
        "Limits",
        "RunCancelled",
        "Sandbox",
    ]


def test_no_module_imports_past_the_public_names() -> None:
    assert any(path.name == "scoring.py" for path in modules())  # the walk sees the services
    found = [hit for path in modules() for hit in offences(path.read_text(), str(path.relative_to(REPO)))]
    assert not found, "imports past corrgrpo_sandbox.__all__:\n" + "\n".join(found)
