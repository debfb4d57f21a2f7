"""Kubernetes manifests of the declared services, as data: deploy/k8s/base/<service>.yaml and its
kustomization.yaml (written by `manifests`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from corrgrpo_common.registry import ServiceDeclaration

from .yaml_text import Flow, FlowList, dump, dump_all

COMMAND = "python -m corrgrpo_devtools.manifests"
SHARED = ("namespace.yaml", "configmap.yaml", "redis.yaml")  # hand-written, before the services
# marks the pods Redis admits (deploy/k8s/base/redis.yaml's NetworkPolicy)
SERVICE_COMPONENT = "reward-service"
CLIENT_LABEL = "corrgrpo.io/client"  # pods that may call the services: the ingress controller, RL jobs
BUBBLEWRAP = """\
hostUsers: false, procMount: Unmasked: bubblewrap needs user, PID and network namespaces and a fresh /proc: an
unmasked /proc needs the pod in its own user namespace (Kubernetes >= 1.33 with a runtime that supports it).
Clusters that forbid this: overlays/no-bwrap (see deploy/README.md)."""
SECRETS = """\
The secret corrgrpo-secrets is required: CORRGRPO_REDIS_PASSWORD and CORRGRPO_STORE_SECRET
(CORRGRPO_API_TOKEN if wanted); deploy/README.md creates it."""
CALLERS = (
    f'Only pods labelled {CLIENT_LABEL}: "true", in any namespace (the ingress controller, RL jobs), '
    "may call it."
)
BURSTS = "Scoring comes in bursts (one batch per training step): scale up at once, down slowly."


def cpu(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def memory(mib: int, giga: str = "Gi", mega: str = "Mi") -> str:
    return f"{mib // 1024}{giga}" if mib % 1024 == 0 else f"{mib}{mega}"


def selector(name: str) -> Flow:
    return Flow({"app.kubernetes.io/name": name})


def metadata(name: str) -> dict[str, Any]:
    labels = Flow(
        selector(name)
        | {"app.kubernetes.io/component": SERVICE_COMPONENT, "app.kubernetes.io/part-of": "corrgrpo"}
    )
    return {"name": name, "labels": labels}


def probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {"httpGet": Flow(path=path, port="http"), "periodSeconds": period_s, "failureThreshold": failures}


# The sandbox keeps its workers' files on a tmpfs (always resident: no page-cache bits between runs). A pod's
# /dev/shm is 64 MiB, so it gets a memory volume there (counted against the pod's memory limit).
ROOTFS_VOLUME = {"name": "sandbox-rootfs", "emptyDir": Flow(medium="Memory", sizeLimit="256Mi")}
ROOTFS_MOUNT = Flow(name="sandbox-rootfs", mountPath="/dev/shm")


def container(service: ServiceDeclaration) -> dict[str, Any]:
    name, port, deploy, resources = service.name, service.port, service.deploy, service.deploy.resources
    spec: dict[str, Any] = {
        "name": name,
        "image": f"corrgrpo/{name}:{service.version}",
        "args": FlowList(["python", "-m", service.module, "--host", "0.0.0.0", "--port", str(port)]),
        "ports": [Flow(name="http", containerPort=port)],
        "envFrom": [
            {"configMapRef": Flow(name="corrgrpo-config")},
            {"secretRef": Flow(name="corrgrpo-secrets")},
        ],
    }
    if deploy.env:
        spec["env"] = [Flow(name=key, value=value) for key, value in deploy.env.items()]
    security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": Flow(drop=FlowList(["ALL"])),
    }
    if deploy.bubblewrap:
        security |= {
            "procMount": "Unmasked",
            "seccompProfile": Flow(type="Unconfined"),
            "appArmorProfile": Flow(type="Unconfined"),
        }
    return spec | {
        "startupProbe": probe("/healthz", 2, -(-deploy.startup_s // 2)),
        "readinessProbe": probe("/readyz", 5, 2),
        "livenessProbe": probe("/healthz", 10, 3),
        "resources": {
            "requests": Flow(cpu=cpu(resources.cpu_request), memory=memory(resources.memory_request_mib)),
            "limits": Flow(cpu=cpu(resources.cpu_limit), memory=memory(resources.memory_limit_mib)),
        },
        "securityContext": security,
        "volumeMounts": [Flow(name="tmp", mountPath="/tmp")] + ([ROOTFS_MOUNT] if deploy.bubblewrap else []),
    }


def deployment(service: ServiceDeclaration) -> dict[str, Any]:
    name, deploy = service.name, service.deploy
    pod: dict[str, Any] = {"automountServiceAccountToken": False}
    if deploy.bubblewrap:
        pod["hostUsers"] = False
    pod["securityContext"] = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001}
    if not deploy.bubblewrap:
        pod["securityContext"]["seccompProfile"] = Flow(type="RuntimeDefault")
    volumes = [{"name": "tmp", "emptyDir": {}}] + ([ROOTFS_VOLUME] if deploy.bubblewrap else [])
    pod |= {"containers": [container(service)], "volumes": volumes}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name),
        "spec": {
            "replicas": deploy.replicas,
            "selector": {"matchLabels": selector(name)},
            "template": {"metadata": {"labels": metadata(name)["labels"]}, "spec": pod},
        },
    }


def network_policy(name: str) -> dict[str, Any]:
    callers = Flow(namespaceSelector=Flow(), podSelector=Flow(matchLabels=Flow({CLIENT_LABEL: "true"})))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name),
        "spec": {
            "podSelector": Flow(matchLabels=selector(name)),
            "policyTypes": FlowList(["Ingress"]),
            "ingress": [
                {"from": FlowList([callers]), "ports": FlowList([Flow(protocol="TCP", port="http")])}
            ],
        },
    }


def autoscaler(name: str, low: int, high: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(name),
        "spec": {
            "scaleTargetRef": Flow(apiVersion="apps/v1", kind="Deployment", name=name),
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": Flow(type="Utilization", averageUtilization=70)},
                }
            ],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "policies": FlowList([Flow(type="Percent", value=100, periodSeconds=30)]),
                },
                "scaleDown": {"stabilizationWindowSeconds": 300},
            },
        },
    }


def service_object(name: str, port: int) -> dict[str, Any]:
    spec = {"selector": selector(name), "ports": [Flow(name="http", port=port, targetPort="http")]}
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(name), "spec": spec}


def disruption_budget(name: str) -> dict[str, Any]:
    spec = {"minAvailable": 1, "selector": {"matchLabels": selector(name)}}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name),
        "spec": spec,
    }


def manifest(service: ServiceDeclaration) -> str:
    """deploy/k8s/base/<service>.yaml: Deployment, Service, NetworkPolicy, and when it autoscales, its
    autoscaler and disruption budget."""
    name, deploy = service.name, service.deploy
    header = f"Written by `{COMMAND}` from {service.module}/declaration.py: edit that, not this."
    above_deployment = "\n".join([header, *([BUBBLEWRAP] if deploy.bubblewrap else []), SECRETS])
    documents = [
        (above_deployment, deployment(service)),
        ("", service_object(name, service.port)),
        (CALLERS, network_policy(name)),
    ]
    if deploy.autoscale:
        documents += [(BURSTS, autoscaler(name, *deploy.autoscale)), ("", disruption_budget(name))]
    return dump_all(documents)


def kustomization(services: Iterable[ServiceDeclaration]) -> str:
    services = list(services)
    above = f"""\
Written by `{COMMAND}` from the services' declarations.
kubectl apply -k deploy/k8s/base   (or an overlay: deploy/k8s/overlays/no-bwrap)
images: point them at your registry after `docker compose build` + `docker push`."""
    data = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "corrgrpo",
        "resources": [*SHARED, *(f"{s.name}.yaml" for s in services)],
        "images": [Flow(name=f"corrgrpo/{s.name}", newTag=s.version) for s in services],
    }
    return dump(data, above)
