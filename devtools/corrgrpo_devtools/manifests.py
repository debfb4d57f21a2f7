"""`python -m corrgrpo_devtools.manifests [--check] [--root DIR]`: the deployment files' per-service parts.

Generated files beside hand-written ones, as the README tables (docs.py) and the JSON Schemas are: the files
stay plain compose, nginx and kustomize input that runs without this tool, a drift test
(tests/deploy/test_static.py) fails when they differ from the declarations, and `make manifests` rewrites
them. Rewritten: in docker-compose.yml, each service's block and the load balancer's ports and dependencies.
In deploy/nginx/nginx.conf the `listen` lines. In deploy/nginx/upstreams.conf the port → service map, each
between `# <part>:begin` and `# <part>:end` lines (the rest of those files is hand-written); and whole,
deploy/k8s/base/<service>.yaml and deploy/k8s/base/kustomization.yaml (k8s.py). The YAML is built as data and
written by yaml_text.py. Without `--check` the files are rewritten. With it, the command lists those that
drifted and exits 1.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from corrgrpo_common.registry import ServiceDeclaration, declared

from . import k8s
from .yaml_text import MERGE, Alias, Flow, FlowList, dump

REPO = Path(__file__).resolve().parents[2]
COMMAND = k8s.COMMAND
COMPOSE = "docker-compose.yml"
NGINX_CONF = "deploy/nginx/nginx.conf"
UPSTREAMS = "deploy/nginx/upstreams.conf"
K8S_BASE = "deploy/k8s/base"
DOCKERFILE = "deploy/docker/service.Dockerfile"
BUBBLEWRAP = """\
security_opt: bubblewrap needs user, PID and network namespaces and a fresh /proc inside the container:
Docker's default seccomp and AppArmor profiles block unshare/mount, and its masked /proc paths make the kernel
refuse a new procfs ("mount too revealing"). The container stays unprivileged (no capabilities, non-root
user); see deploy/README.md "Sandbox privileges". Without them (e.g. Compose v1 drops systempaths=unconfined)
the service refuses to start rather than run candidates unisolated."""


def python_image(root: Path) -> str:
    """The service Dockerfile's default base image (compose passes it unless CORRGRPO_PYTHON_IMAGE says
    otherwise)."""
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (root / DOCKERFILE).read_text(), flags=re.M)
    if match is None:
        raise ValueError(f"{DOCKERFILE} has no `ARG PYTHON_IMAGE=<default>`")
    return match.group(1)


# ---------------------------------------------------------------- docker compose


def compose_service(service: ServiceDeclaration, image: str) -> dict[str, Any]:
    deploy, port = service.deploy, service.port
    args = {
        "PYTHON_IMAGE": f"${{CORRGRPO_PYTHON_IMAGE:-{image}}}",
        "SERVICE": service.name,
        "PORT": str(port),
    }
    # CORRGRPO_* defaults stay overridable from the shell or an .env file.
    env = {k: f"${{{k}:-{v}}}" if k.startswith("CORRGRPO_") else v for k, v in deploy.env.items()}
    block: dict[Any, Any] = {
        MERGE: Alias("service"),
        "build": {"context": ".", "dockerfile": DOCKERFILE, "args": args | dict(deploy.build_args)},
        "image": f"corrgrpo/{service.name}:{service.version}",
        "environment": {MERGE: Alias("common-env"), **env},
    }
    if deploy.bubblewrap:
        unconfined = [
            "no-new-privileges:true",
            "seccomp=unconfined",
            "apparmor=unconfined",
            "systempaths=unconfined",
        ]
        block["security_opt"] = FlowList(unconfined)
        # the sandbox runs its workers from tmpfs copies in /tmp (docker's tmpfs is noexec unless told)
        block["tmpfs"] = FlowList(["/tmp:exec"])
    if deploy.shared_data:
        block["volumes"] = Alias("shared-data")  # docker-compose.yml's hand-written x-shared-data
    limits = Flow(
        cpus=f"{deploy.resources.cpu_limit:g}", memory=k8s.memory(deploy.resources.memory_limit_mib, "g", "m")
    )
    return block | {"expose": FlowList([str(port)]), "deploy": {"resources": {"limits": limits}}}


def compose_blocks(services: Iterable[ServiceDeclaration], image: str) -> dict[str, list[str]]:
    services = list(services)
    texts = [
        dump({s.name: compose_service(s, image)}, BUBBLEWRAP if s.deploy.bubblewrap else "") for s in services
    ]
    return {
        "services": "\n".join(texts).splitlines(),
        "lb-ports": dump([f"${{CORRGRPO_BIND:-127.0.0.1}}:{s.port}:{s.port}" for s in services]).splitlines(),
        "lb-depends": dump({s.name: Flow(condition="service_healthy") for s in services}).splitlines(),
    }


# ---------------------------------------------------------------- nginx (not YAML: its lines are written as
# they are)


def nginx_blocks(services: Iterable[ServiceDeclaration]) -> dict[str, list[str]]:
    # deferred: the kernel hands nginx a connection once its request has arrived (one wakeup less per
    # connection; at 10x a replica's rate most connections are refused at once, on the core nginx shares with
    # a replica)
    return {"listen": [f"listen {s.port} deferred;" for s in services]}


def upstream_blocks(services: Iterable[ServiceDeclaration]) -> dict[str, list[str]]:
    return {"pools": [f"{s.port} {s.name}:{s.port};" for s in services]}


# ---------------------------------------------------------------- files


def filled(text: str, blocks: dict[str, list[str]], path: str) -> str:
    """`text` with each `# <part>:begin` ... `# <part>:end` block's lines replaced, at the begin line's
    indentation."""
    for part, lines in blocks.items():
        pattern = re.compile(
            rf"^([ \t]*)(# {re.escape(part)}:begin[^\n]*\n).*?^[ \t]*(# {re.escape(part)}:end[^\n]*)$",
            re.S | re.M,
        )
        if len(pattern.findall(text)) != 1:
            raise ValueError(f"{path} needs exactly one `# {part}:begin` ... `# {part}:end` block")

        def body(match: re.Match[str], lines: list[str] = lines) -> str:
            indent = match.group(1)
            inner = "".join(f"{indent}{line}\n" if line else "\n" for line in lines)
            return f"{indent}{match.group(2)}{inner}{indent}{match.group(3)}"

        text = pattern.sub(body, text)
    return text


def rendered(root: Path = REPO, services: Iterable[ServiceDeclaration] | None = None) -> dict[Path, str]:
    """Path → the text it must hold, for every file this module writes under `root`."""
    services = list(declared().values() if services is None else services)
    read = lambda relative: (root / relative).read_text()  # noqa: E731
    wanted = {
        root / COMPOSE: filled(read(COMPOSE), compose_blocks(services, python_image(root)), COMPOSE),
        root / NGINX_CONF: filled(read(NGINX_CONF), nginx_blocks(services), NGINX_CONF),
        root / UPSTREAMS: filled(read(UPSTREAMS), upstream_blocks(services), UPSTREAMS),
        root / K8S_BASE / "kustomization.yaml": k8s.kustomization(services),
    }
    wanted |= {root / K8S_BASE / f"{s.name}.yaml": k8s.manifest(s) for s in services}
    return wanted


def drifted(write: bool, root: Path = REPO) -> list[Path]:
    """The files that differ from the declarations (rewritten first when `write`)."""
    stale = []
    for path, text in rendered(root).items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path)
            if write:
                path.write_text(text)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files that drifted (exit 1)")
    parser.add_argument(
        "--root", type=Path, default=REPO, help="the repository to write into (default: this one)"
    )
    args = parser.parse_args(argv)
    stale = drifted(write=not args.check, root=args.root)
    for path in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
