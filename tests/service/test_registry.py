"""Each service is declared once; every list of services is derived from the declarations.

The proof of "a new service is its folder plus one line": a fourth toy service, written into a temp
folder and installed from its own pyproject.toml (whose entry point is that line), shows up in the
registry, starts with `python -m`, is a part for the Makefile, first-party for ruff and gets its
configuration table.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import distribution
from pathlib import Path

import httpx
import pytest

from corrgrpo_service import docs
from corrgrpo_service.registry import ENTRY_POINT_GROUP, ServiceDeclaration, declared, default_ports
from corrgrpo_testing.servers import start_service

REPO = Path(__file__).resolve().parents[2]
SERVICE_FOLDERS = sorted(p.parent for p in (REPO / "services").glob("*/pyproject.toml") if p.parent.name != "common")


def makefile_parts(root: Path) -> list[str]:
    """`$(PARTS)` as GNU make evaluates the Makefile in `root`."""
    printer = "print-parts: ; @echo $(PARTS)"
    result = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(root), "--eval", printer, "print-parts"],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


def entry_points_of(folder: Path) -> dict[str, str]:
    """The service entry points the folder's installed distribution (`corrgrpo-<folder>`) declares."""
    entries = distribution(f"corrgrpo-{folder.name}").entry_points
    return {entry.name: entry.value for entry in entries if entry.group == ENTRY_POINT_GROUP}


def test_every_service_folder_declares_exactly_its_service() -> None:
    services = declared()
    assert list(services) == ["code", "toolcall", "agentdojo"]  # port order: 8101, 8102, 8103
    assert {folder.name for folder in SERVICE_FOLDERS} == set(services)
    for folder in SERVICE_FOLDERS:
        assert entry_points_of(folder) == {folder.name: f"corrgrpo_{folder.name}.declaration:SERVICE"}
        service = services[folder.name]
        assert service.module == f"corrgrpo_{folder.name}"
        assert (folder / service.module / "declaration.py").is_file()
    assert default_ports() == {"code": 8101, "toolcall": 8102, "agentdojo": 8103}


@pytest.mark.parametrize("name", list(declared()))
def test_every_service_folder_has_the_same_files(name: str) -> None:
    package = REPO / "services" / name / f"corrgrpo_{name}"
    for module in ("__init__.py", "__main__.py", "declaration.py", "settings.py", "app.py"):
        assert (package / module).is_file(), f"{package.relative_to(REPO)} has no {module}"


def test_makefile_parts_are_the_declared_services_plus_the_rest() -> None:
    services = [part.removeprefix("services/") for part in makefile_parts(REPO) if part.startswith("services/")]
    assert sorted(services) == sorted(["common", *declared()])


def test_declarations_are_cheap_to_import() -> None:
    """Listing services must not import a service's app (AgentDojo's takes seconds)."""
    probe = "import sys; from corrgrpo_service.registry import declared; declared(); print('agentdojo' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_a_declaration_must_match_its_entry_point_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from corrgrpo_service import registry

    code = declared()["code"]

    class Entry:
        name, value = "kode", "corrgrpo_code.declaration:SERVICE"

        def load(self) -> ServiceDeclaration:
            return code

    monkeypatch.setattr(registry, "entry_points", lambda group: [Entry()])
    with pytest.raises(TypeError, match="kode"):
        registry.declared()


# ---------------------------------------------------------------- a fourth service

TOY = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "corrgrpo-toy"
        version = "0.3.0"
        dependencies = []

        [project.entry-points."corrgrpo.services"]
        toy = "corrgrpo_toy.declaration:SERVICE"

        [tool.setuptools]
        packages = ["corrgrpo_toy"]
    """,
    "README.md": "# toy\n\n<!-- settings:begin -->\n<!-- settings:end -->\n",
    "corrgrpo_toy/__init__.py": '"""A toy service."""\n',
    "corrgrpo_toy/__main__.py": """
        from corrgrpo_service.cli import serve

        from .declaration import SERVICE

        serve(SERVICE)
    """,
    "corrgrpo_toy/settings.py": """
        from pydantic import Field

        from corrgrpo_service import ServiceSettings


        class ToySettings(ServiceSettings):
            toy_scale: float = Field(1.0, description="Multiplies the length")
    """,
    "corrgrpo_toy/declaration.py": """
        from importlib.metadata import version

        from corrgrpo_proto import ComponentSpec
        from corrgrpo_service.registry import ServiceDeclaration

        from .settings import ToySettings

        SERVICE = ServiceDeclaration(
            name="toy",
            version=version("corrgrpo-toy"),
            port=8104,
            components=(ComponentSpec(name="length", min=0, max=None),),
            settings=ToySettings,
            app="corrgrpo_toy.app:build",
        )
    """,
    "corrgrpo_toy/app.py": """
        from corrgrpo_proto import ScoreRequest
        from corrgrpo_proto.common import WireModel
        from corrgrpo_service import Scored, add_score_route

        from .declaration import SERVICE


        class Item(WireModel):
            id: str | None = None
            completion: str


        class Request(ScoreRequest[Item]):
            pass


        def build(settings):
            app = SERVICE.create_app(settings)

            async def scorer(items):
                return [Scored({"length": settings.toy_scale * len(item.completion)}) for item in items]

            add_score_route(app, Request, scorer)
            return app
    """,
}


@pytest.fixture(scope="module")
def toy_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repo's Makefile and ruff.toml with a fourth service folder, installed into `site/`."""
    root = tmp_path_factory.mktemp("repo")
    for name in ("Makefile", "ruff.toml"):
        (root / name).write_text((REPO / name).read_text())
    for folder in ("proto", "sandbox", "services/common", "trainer"):
        (root / folder).mkdir(parents=True)
    for relative, text in TOY.items():
        path = root / "services" / "toy" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
    subprocess.run([*install, str(root / "site"), str(root / "services" / "toy")], check=True, capture_output=True)
    return root


def test_a_fourth_service_is_its_folder_plus_one_line(toy_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site, folder = toy_repo / "site", toy_repo / "services" / "toy"
    monkeypatch.syspath_prepend(str(site))  # its metadata (the entry point)
    monkeypatch.syspath_prepend(str(folder))  # its code, imported from the folder as an editable install would
    services = declared()
    assert list(services) == ["code", "toolcall", "agentdojo", "toy"]
    toy = services["toy"]
    assert (toy.version, toy.port, toy.module, toy.settings.__name__) == ("0.3.0", 8104, "corrgrpo_toy", "ToySettings")
    assert "services/toy" in makefile_parts(toy_repo)
    assert "| `CORRGRPO_TOY_SCALE` | `1` | Multiplies the length |" in docs.tables()[folder / "README.md"]

    with start_service("toy", env={"PYTHONPATH": str(site), "CORRGRPO_TOY_SCALE": "2"}) as process:
        assert httpx.get(f"{process.url}/healthz").json() == {"status": "ok", "service": "toy", "version": "0.3.0"}
        body = httpx.post(f"{process.url}/v1/score", json={"items": [{"completion": "abc"}]}).json()
        assert body["results"][0]["components"] == {"length": 6.0}


def test_ruff_finds_a_new_service_first_party_without_a_line(toy_repo: Path) -> None:
    """Third-party then first-party, in two blocks: only correct when ruff knows corrgrpo_toy as ours."""
    sample = toy_repo / "services" / "toy" / "corrgrpo_toy" / "sample.py"
    sample.write_text("import httpx\n\nimport corrgrpo_toy\n\nprint(httpx, corrgrpo_toy)\n")
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "--select", "I", str(sample)], cwd=toy_repo, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
