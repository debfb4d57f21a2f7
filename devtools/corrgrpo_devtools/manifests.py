"""`python -m corrgrpo_devtools.manifests [--check] [--root DIR]`: the deployment files' per-service parts, from the declarations.

Generated files beside hand-written ones, as the README tables (docs.py) and the JSON Schemas are: the
files stay plain compose, nginx and kustomize input that runs without this tool, a drift test
(tests/deploy/test_static.py) fails when they differ from the declarations, and `make manifests` rewrites
them. Rewritten: in docker-compose.yml, each service's block and the load balancer's ports and
dependencies; in deploy/nginx/nginx.conf the `listen` lines; in deploy/nginx/upstreams.conf the port → service
map, each between `# <part>:begin` and `# <part>:end` lines (the rest of those files is hand-written); and whole,
deploy/k8s/base/<service>.yaml and deploy/k8s/base/kustomization.yaml. Without `--check` the files are
rewritten; with it, the command lists those that drifted and exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from corrgrpo_common.registry import ServiceDeclaration, declared

REPO = Path(__file__).resolve().parents[2]
COMMAND = "python -m corrgrpo_devtools.manifests"
COMPOSE = "docker-compose.yml"
NGINX_CONF = "deploy/nginx/nginx.conf"
UPSTREAMS = "deploy/nginx/upstreams.conf"
K8S_BASE = "deploy/k8s/base"
DOCKERFILE = "deploy/docker/service.Dockerfile"
K8S_SHARED = ("namespace.yaml", "configmap.yaml", "redis.yaml")  # hand-written, before the services
SERVICE_COMPONENT = "reward-service"
CLIENT_LABEL = "corrgrpo.io/client"  # pods that may call the services: the ingress controller, RL jobs


def _cpu(cores: float) -> str:
    return f'"{int(cores)}"' if float(cores).is_integer() else f"{round(cores * 1000)}m"


def _memory(mib: int, giga: str, mega: str) -> str:
    return f"{mib // 1024}{giga}" if mib % 1024 == 0 else f"{mib}{mega}"


def python_image(root: Path) -> str:
    """The service Dockerfile's default base image (compose passes it unless CORRGRPO_PYTHON_IMAGE says otherwise)."""
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (root / DOCKERFILE).read_text(), flags=re.M)
    if match is None:
        raise ValueError(f"{DOCKERFILE} has no `ARG PYTHON_IMAGE=<default>`")
    return match.group(1)


# ---------------------------------------------------------------- docker compose


def compose_service(service: ServiceDeclaration, image: str) -> list[str]:
    deploy, port = service.deploy, service.port
    lines = [
        f"{service.name}:",
        "  <<: *service",
        "  build:",
        "    context: .",
        f"    dockerfile: {DOCKERFILE}",
        "    args:",
        f"      PYTHON_IMAGE: ${{CORRGRPO_PYTHON_IMAGE:-{image}}}",
        f"      SERVICE: {service.name}",
        f'      PORT: "{port}"',
        *(f"      {name}: {value}" for name, value in deploy.build_args.items()),
        f"  image: corrgrpo/{service.name}:{service.version}",
        "  environment:",
        "    <<: *common-env",
        # CORRGRPO_* defaults stay overridable from the shell or an .env file.
        *(f"    {k}: ${{{k}:-{v}}}" if k.startswith("CORRGRPO_") else f"    {k}: {v}" for k, v in deploy.env.items()),
    ]
    if deploy.bubblewrap:
        lines += [
            "  # bubblewrap needs user, PID and network namespaces and a fresh /proc inside the container: Docker's",
            "  # default seccomp and AppArmor profiles block unshare/mount, and its masked /proc paths make the kernel",
            '  # refuse a new procfs ("mount too revealing"). The container stays unprivileged (no capabilities,',
            '  # non-root user); see deploy/README.md "Sandbox privileges". Without them (e.g. Compose v1 drops',
            "  # systempaths=unconfined) the service refuses to start rather than run candidates unisolated.",
            "  security_opt: [no-new-privileges:true, seccomp=unconfined, apparmor=unconfined, systempaths=unconfined]",
        ]
    if deploy.shared_data:
        lines += ["  volumes: *shared-data"]  # docker-compose.yml's hand-written x-shared-data
    resources = deploy.resources
    memory = _memory(resources.memory_limit_mib, "g", "m")
    lines += [
        f'  expose: ["{port}"]',
        "  deploy:",
        "    resources:",
        f'      limits: {{cpus: "{resources.cpu_limit:g}", memory: {memory}}}',
    ]
    return lines


def compose_blocks(services: Iterable[ServiceDeclaration], image: str) -> dict[str, list[str]]:
    services = list(services)
    blocks = [line for service in services for line in ["", *compose_service(service, image)]][1:]
    return {
        "services": blocks,
        "lb-ports": [f'- "${{CORRGRPO_BIND:-127.0.0.1}}:{s.port}:{s.port}"' for s in services],
        "lb-depends": [f"{s.name}: {{condition: service_healthy}}" for s in services],
    }


# ---------------------------------------------------------------- nginx


def nginx_blocks(services: Iterable[ServiceDeclaration]) -> dict[str, list[str]]:
    return {"listen": [f"listen {s.port};" for s in services]}


def upstream_blocks(services: Iterable[ServiceDeclaration]) -> dict[str, list[str]]:
    return {"pools": [f"{s.port} {s.name}:{s.port};" for s in services]}


# ---------------------------------------------------------------- Kubernetes


def k8s_manifest(service: ServiceDeclaration) -> str:
    name, port, deploy, resources = service.name, service.port, service.deploy, service.deploy.resources
    # `component` marks the pods Redis admits (deploy/k8s/base/redis.yaml's NetworkPolicy)
    component = f"app.kubernetes.io/component: {SERVICE_COMPONENT}"
    labels = f"{{app.kubernetes.io/name: {name}, {component}, app.kubernetes.io/part-of: corrgrpo}}"
    lines = [
        f"# Written by `{COMMAND}` from {service.module}/declaration.py: edit that, not this.",
        "apiVersion: apps/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {name}",
        f"  labels: {labels}",
        "spec:",
        f"  replicas: {deploy.replicas}",
        "  selector:",
        f"    matchLabels: {{app.kubernetes.io/name: {name}}}",
        "  template:",
        "    metadata:",
        f"      labels: {labels}",
        "    spec:",
        "      automountServiceAccountToken: false",
    ]
    if deploy.bubblewrap:
        lines += [
            "      # bubblewrap needs user, PID and network namespaces and a fresh /proc: an unmasked /proc",
            "      # (procMount: Unmasked) needs the pod in its own user namespace (Kubernetes >= 1.33 with a runtime",
            "      # that supports it). Clusters that forbid this: overlays/no-bwrap (see deploy/README.md).",
            "      hostUsers: false",
        ]
    lines += [
        "      securityContext:",
        "        runAsNonRoot: true",
        "        runAsUser: 10001",
        "        runAsGroup: 10001",
        *([] if deploy.bubblewrap else ["        seccompProfile: {type: RuntimeDefault}"]),
        "      containers:",
        f"        - name: {name}",
        f"          image: corrgrpo/{name}:{service.version}",
        f'          args: [python, -m, {service.module}, --host, 0.0.0.0, --port, "{port}"]',
        "          ports:",
        f"            - {{name: http, containerPort: {port}}}",
        "          envFrom:",
        "            - configMapRef: {name: corrgrpo-config}",
        "            # Required: CORRGRPO_REDIS_PASSWORD and CORRGRPO_STORE_SECRET (CORRGRPO_API_TOKEN if wanted);",
        "            # deploy/README.md creates it.",
        "            - secretRef: {name: corrgrpo-secrets}",
    ]
    if deploy.env:
        lines += ["          env:", *(f"            - {{name: {k}, value: {json.dumps(v)}}}" for k, v in deploy.env.items())]
    requests = f"{{cpu: {_cpu(resources.cpu_request)}, memory: {_memory(resources.memory_request_mib, 'Gi', 'Mi')}}}"
    limits = f"{{cpu: {_cpu(resources.cpu_limit)}, memory: {_memory(resources.memory_limit_mib, 'Gi', 'Mi')}}}"
    lines += [
        "          startupProbe:",
        "            httpGet: {path: /healthz, port: http}",
        "            periodSeconds: 2",
        f"            failureThreshold: {-(-deploy.startup_s // 2)}",
        "          readinessProbe:",
        "            httpGet: {path: /readyz, port: http}",
        "            periodSeconds: 5",
        "            failureThreshold: 2",
        "          livenessProbe:",
        "            httpGet: {path: /healthz, port: http}",
        "            periodSeconds: 10",
        "            failureThreshold: 3",
        "          resources:",
        f"            requests: {requests}",
        f"            limits: {limits}",
        "          securityContext:",
        "            allowPrivilegeEscalation: false",
        "            readOnlyRootFilesystem: true",
        "            capabilities: {drop: [ALL]}",
    ]
    if deploy.bubblewrap:
        lines += [
            "            procMount: Unmasked",
            "            seccompProfile: {type: Unconfined}",
            "            appArmorProfile: {type: Unconfined}",
        ]
    lines += [
        "          volumeMounts:",
        "            - {name: tmp, mountPath: /tmp}",
        "      volumes:",
        "        - name: tmp",
        "          emptyDir: {}",
        "---",
        "apiVersion: v1",
        "kind: Service",
        "metadata:",
        f"  name: {name}",
        f"  labels: {labels}",
        "spec:",
        f"  selector: {{app.kubernetes.io/name: {name}}}",
        "  ports:",
        f"    - {{name: http, port: {port}, targetPort: http}}",
        "---",
        "apiVersion: networking.k8s.io/v1",
        "kind: NetworkPolicy",
        "metadata:",
        f"  name: {name}",
        f"  labels: {labels}",
        "spec:",
        f"  podSelector: {{matchLabels: {{app.kubernetes.io/name: {name}}}}}",
        "  policyTypes: [Ingress]",
        "  ingress:",
        f'    # Only pods labelled {CLIENT_LABEL}: "true", in any namespace (the ingress controller, RL jobs).',
        f'    - from: [{{namespaceSelector: {{}}, podSelector: {{matchLabels: {{{CLIENT_LABEL}: "true"}}}}}}]',
        "      ports: [{protocol: TCP, port: http}]",
    ]
    if deploy.autoscale:
        low, high = deploy.autoscale
        lines += [
            "---",
            "apiVersion: autoscaling/v2",
            "kind: HorizontalPodAutoscaler",
            "metadata:",
            f"  name: {name}",
            f"  labels: {labels}",
            "spec:",
            f"  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}",
            f"  minReplicas: {low}",
            f"  maxReplicas: {high}",
            "  metrics:",
            "    - type: Resource",
            "      resource:",
            "        name: cpu",
            "        target: {type: Utilization, averageUtilization: 70}",
            "  behavior:",
            "    # Scoring comes in bursts (one batch per training step): scale up at once, down slowly.",
            "    scaleUp:",
            "      stabilizationWindowSeconds: 0",
            "      policies: [{type: Percent, value: 100, periodSeconds: 30}]",
            "    scaleDown:",
            "      stabilizationWindowSeconds: 300",
            "---",
            "apiVersion: policy/v1",
            "kind: PodDisruptionBudget",
            "metadata:",
            f"  name: {name}",
            f"  labels: {labels}",
            "spec:",
            "  minAvailable: 1",
            "  selector:",
            f"    matchLabels: {{app.kubernetes.io/name: {name}}}",
        ]
    return "\n".join(lines) + "\n"


def kustomization(services: Iterable[ServiceDeclaration]) -> str:
    services = list(services)
    return (
        "\n".join(
            [
                f"# Written by `{COMMAND}` from the services' declarations.",
                "# kubectl apply -k deploy/k8s/base   (or an overlay: deploy/k8s/overlays/no-bwrap)",
                "apiVersion: kustomize.config.k8s.io/v1beta1",
                "kind: Kustomization",
                "namespace: corrgrpo",
                "resources:",
                *(f"  - {name}" for name in K8S_SHARED),
                *(f"  - {s.name}.yaml" for s in services),
                "# Point these at your registry after `docker compose build` + `docker push`.",
                "images:",
                *(f"  - {{name: corrgrpo/{s.name}, newTag: {s.version}}}" for s in services),
            ]
        )
        + "\n"
    )


# ---------------------------------------------------------------- files


def filled(text: str, blocks: dict[str, list[str]], path: str) -> str:
    """`text` with each `# <part>:begin` ... `# <part>:end` block's lines replaced, at the begin line's indentation."""
    for part, lines in blocks.items():
        pattern = re.compile(
            rf"^([ \t]*)(# {re.escape(part)}:begin[^\n]*\n).*?^[ \t]*(# {re.escape(part)}:end[^\n]*)$", re.S | re.M
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
        root / K8S_BASE / "kustomization.yaml": kustomization(services),
    }
    wanted |= {root / K8S_BASE / f"{s.name}.yaml": k8s_manifest(s) for s in services}
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
    parser.add_argument("--root", type=Path, default=REPO, help="the repository to write into (default: this one)")
    args = parser.parse_args(argv)
    stale = drifted(write=not args.check, root=args.root)
    for path in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
