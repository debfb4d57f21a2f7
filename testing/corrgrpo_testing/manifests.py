"""The deployment files read as compose and kustomize read them, and checked against their vendored JSON
Schemas.

Shared by tests/deploy/test_static.py (this repository's files) and the fourth-service test of
tests/service/test_registry.py (a copy written for a toy service); `root` is the repository to read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import yaml
from referencing import Registry, Resource

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "deploy" / "schemas"
K8S_SCHEMAS = SCHEMAS / "kubernetes" / "v1.33.0-local-strict"


def compose(root: Path = REPO) -> dict[str, Any]:
    return yaml.safe_load((root / "docker-compose.yml").read_text())


def compose_validator() -> jsonschema.Draft201909Validator:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    return jsonschema.Draft201909Validator(schema, format_checker=jsonschema.FormatChecker())


def compose_errors(document: dict[str, Any]) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in compose_validator().iter_errors(document)]


def k8s_documents(folder: Path) -> list[dict[str, Any]]:
    """What `kubectl kustomize folder` renders, for the features our kustomizations use (resources, JSON
    patches)."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    documents = []
    for resource in kustomization["resources"]:
        path = folder / resource
        if path.is_dir():
            documents += k8s_documents(path)
        else:
            documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        (document,) = [
            d for d in documents if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        ]
        patched = jsonpatch.apply_patch(document, yaml.safe_load(patch["patch"]))
        documents[documents.index(document)] = patched
    return documents


def k8s_schema_file(document: dict[str, Any]) -> Path:
    group, _, version = document["apiVersion"].rpartition("/")
    group = group.split(".")[0]
    name = "-".join(part for part in (document["kind"].lower(), group, version) if part)
    return K8S_SCHEMAS / f"{name}.json"


def k8s_errors(document: dict[str, Any]) -> list[str]:
    definitions = json.loads((K8S_SCHEMAS / "_definitions.json").read_text())
    registry = Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))
    schema = json.loads(k8s_schema_file(document).read_text())
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [
        f"{document['kind']}/{document['metadata']['name']} {e.json_path}: {e.message}"
        for e in validator.iter_errors(document)
    ]
