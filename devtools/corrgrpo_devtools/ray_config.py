"""`python -m corrgrpo_devtools.ray_config [--check]`: the Ray Serve config written from the declarations.

One Serve application per declared service, at `/<name>` on Serve's HTTP port, each a deployment of
`corrgrpo_common.ray_serve:application` (the app `python -m corrgrpo_<name>` serves). From the declaration:
the replicas (autoscaled on ongoing requests between its `autoscale` bounds, else a fixed `replicas`), each
replica's CPUs and memory (its Kubernetes requests) and its environment (compose's, less the worker count: a
replica sizes that from its `num_cpus`). The store's URL and secret are not in the file: they come from the
environment `ray start` runs in on every node, as secrets should. Plain Serve config (`serve deploy` takes it
as it is). A drift test (tests/deploy/test_ray_config.py) fails when it differs from the declarations, `make
manifests` rewrites it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from corrgrpo_common.registry import ServiceDeclaration, declared
from corrgrpo_common.settings import env_name

REPO = Path(__file__).resolve().parents[2]
COMMAND = "python -m corrgrpo_devtools.ray_config"
SERVE_CONFIG = "deploy/ray/serve.yaml"
IMPORT_PATH = "corrgrpo_common.ray_serve:application"
HTTP_PORT = 8000  # Serve's default
# A request is a chunk of up to 256 items (the clients' default): two at a time keep a replica's workers busy
# while it parses the next. More per replica asks for another.
TARGET_ONGOING_REQUESTS = 2
# Scoring comes in bursts (one batch per training step): scale up at once, down slowly (as the Kubernetes HPA
# does).
UPSCALE_DELAY_S = 0
DOWNSCALE_DELAY_S = 300


def _flow(value: dict[str, Any]) -> str:
    """A one-line YAML mapping (JSON's scalars, unquoted keys)."""
    return "{" + ", ".join(f"{key}: {json.dumps(item)}" for key, item in value.items()) + "}"


def replicas(service: ServiceDeclaration) -> dict[str, Any]:
    """The deployment's replica options: `autoscaling_config` within the declared bounds, else
    `num_replicas`."""
    if service.deploy.autoscale is None:
        return {"num_replicas": service.deploy.replicas}
    low, high = service.deploy.autoscale
    autoscaling = {
        "min_replicas": low,
        "max_replicas": high,
        "target_ongoing_requests": TARGET_ONGOING_REQUESTS,
        "upscale_delay_s": UPSCALE_DELAY_S,
        "downscale_delay_s": DOWNSCALE_DELAY_S,
    }
    return {"autoscaling_config": autoscaling}


def environment(service: ServiceDeclaration) -> dict[str, str]:
    """Compose's variables of the service, less the worker count that each replica sizes from its CPUs."""
    setting = service.deploy.workers_setting
    sized = env_name(service.settings, setting) if setting else None
    return {name: value for name, value in service.deploy.env.items() if name != sized}


def application(service: ServiceDeclaration) -> list[str]:
    resources = service.deploy.resources
    actor = {"num_cpus": resources.cpu_request, "memory": resources.memory_request_mib * 2**20}
    lines = [
        f"- name: {service.name}",
        f"  route_prefix: /{service.name}",
        f"  import_path: {IMPORT_PATH}",
        f"  args: {_flow({'service': service.name})}",
    ]
    if env := environment(service):
        lines += [
            "  runtime_env:",
            "    env_vars:",
            *(f"      {name}: {json.dumps(value)}" for name, value in env.items()),
        ]
    lines += ["  deployments:", f"    - name: {service.name}", f"      ray_actor_options: {_flow(actor)}"]
    if setting := service.deploy.workers_setting:
        lines += [
            f"      # {env_name(service.settings, setting)}: num_cpus rounded up, unless set on the node or "
            f"above"
        ]
    lines += [
        f"      {key}: {_flow(value) if isinstance(value, dict) else value}"
        for key, value in replicas(service).items()
    ]
    if service.deploy.bubblewrap:
        lines += [
            "      # Candidates run under bubblewrap: every node needs it and unprivileged user namespaces."
        ]
    return lines


def serve_config(services: Iterable[ServiceDeclaration]) -> str:
    head = [
        f"# Written by `{COMMAND}` from the services' declarations: edit those, not this.",
        f"#   serve deploy {SERVE_CONFIG} --address http://<head>:8265        (deploy/README.md, Ray Serve)",
        "# Every node needs the services installed and, in the environment `ray start` runs in, "
        "CORRGRPO_REDIS_URL and",
        "# CORRGRPO_STORE_SECRET (a replica refuses to start without them: replicas share idempotency, "
        "caches and",
        "# episodes through Redis only) and CORRGRPO_API_TOKEN (the proxy listens on every interface).",
        "proxy_location: EveryNode",
        f"http_options: {_flow({'host': '0.0.0.0', 'port': HTTP_PORT})}",
        "applications:",
    ]
    body = [f"  {line}" for service in services for line in application(service)]
    return "\n".join(head + body) + "\n"


def rendered(root: Path = REPO, services: Iterable[ServiceDeclaration] | None = None) -> dict[Path, str]:
    """Path → the text it must hold."""
    return {root / SERVE_CONFIG: serve_config(declared().values() if services is None else services)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the file drifted (exit 1)")
    args = parser.parse_args(argv)
    wanted = rendered()
    stale = [path for path, text in wanted.items() if not path.is_file() or path.read_text() != text]
    for path in stale:
        if not args.check:
            path.write_text(wanted[path])
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
