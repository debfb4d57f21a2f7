"""One declaration per service, and the registry every list of services is derived from.

A service declares itself once, in `corrgrpo_<name>/declaration.py`:

    SERVICE = ServiceDeclaration(name="code", version=version("corrgrpo-code"), port=8101,
                                 components=COMPONENTS, settings=CodeSettings, app="corrgrpo_code.app:build",
                                 example=example, deploy=Deploy(Resources(...), ...))

and registers it with one entry point in its own pyproject.toml:

    [project.entry-points."corrgrpo.services"]
    code = "corrgrpo_code.declaration:SERVICE"

`python -m corrgrpo_<name>` serves its `SERVICE`; `declared()` finds every installed one for the
tests' service lists, the deployment files (`python -m corrgrpo_devtools.manifests`) and local launchers.
Importing a declaration is cheap (settings and component specs only). The app module, which may import
heavy packages (agentdojo takes seconds), is imported only by `build`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from fastapi import FastAPI

from corrgrpo_proto import ComponentSpec

from .app import create_app
from .settings import ServiceSettings

ENTRY_POINT_GROUP = "corrgrpo.services"


@dataclass(frozen=True)
class Resources:
    """What one replica asks for (Kubernetes requests) and may use (compose and Kubernetes limits)."""

    cpu_request: float = 0.5
    memory_request_mib: int = 512
    cpu_limit: float = 1.0
    memory_limit_mib: int = 1024
    # the stated bound under hostile max-size requests (tests/reliability/test_memory_bounds.py)
    peak_rss_mib: int = 512


@dataclass(frozen=True)
class Deploy:
    """How the deployment files run the service, beyond its name and port (python -m
    corrgrpo_devtools.manifests)."""

    resources: Resources = Resources()
    replicas: int = 2
    startup_s: int = 60  # how long start-up may take before Kubernetes restarts the pod
    # variables and defaults (compose: overridable from the shell)
    env: Mapping[str, str] = field(default_factory=dict)
    # extra args of deploy/docker/service.Dockerfile
    build_args: Mapping[str, str] = field(default_factory=dict)
    # runs candidates under bwrap: namespaces, unconfined seccomp/AppArmor, an unmasked /proc
    bubblewrap: bool = False
    shared_data: bool = False  # mounts the shared data folder read-only (compose's x-shared-data)
    # min/max replicas: Kubernetes scales on CPU, with a disruption budget; Ray Serve on ongoing requests
    autoscale: tuple[int, int] | None = None
    # The settings field of the replica's worker count, set from its CPUs where the engine grants them (Ray
    # Serve: ray_actor_options.num_cpus, rounded up) unless its variable is set. The CPU count of the whole
    # node otherwise.
    workers_setting: str | None = None


@dataclass(frozen=True)
class ServiceDeclaration:
    """Everything the kit, the launchers and the checks need to know about one service."""

    name: str
    version: str
    port: int  # default port; `CORRGRPO_PORT` or `--port` override it
    components: Sequence[ComponentSpec]
    settings: type[ServiceSettings]
    app: str  # "module:function": builds the FastAPI app from the settings (imported only when called)
    # A well-formed /v1/score item that needs no network or data files: a right answer without `completion`,
    # else that text as the model's. The reliability suite's item.
    example: Callable[[str | None], dict[str, Any]]
    deploy: Deploy = Deploy()

    @property
    def module(self) -> str:
        """What `python -m` runs: the app's module less a final `.app` (`corrgrpo_code.app` →
        `corrgrpo_code`)."""
        return self.app.partition(":")[0].removesuffix(".app")

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"

    def create_app(self, settings: ServiceSettings, **kwargs: Any) -> FastAPI:
        """The kit's app (`create_app`) under this service's name, version and components."""
        return create_app(self.name, self.version, list(self.components), settings, **kwargs)

    def build(self, settings: ServiceSettings | None = None) -> FastAPI:
        """The service's full app. Settings from the environment when none are given."""
        module, _, function = self.app.partition(":")
        return getattr(importlib.import_module(module), function)(settings or self.settings())


def declared() -> dict[str, ServiceDeclaration]:
    """Every installed service, by name, in port order. Raises when two declarations clash."""
    found: dict[str, ServiceDeclaration] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        service = entry.load()
        if not isinstance(service, ServiceDeclaration) or service.name != entry.name:
            raise TypeError(
                f"entry point {entry.name} = {entry.value} is not the ServiceDeclaration named {entry.name!r}"
            )
        if entry.name in found and found[entry.name] != service:
            raise ValueError(f"service {entry.name!r} is declared twice")
        found[entry.name] = service
    ports = [service.port for service in found.values()]
    if len(set(ports)) != len(ports):
        raise ValueError(f"two services share a default port: {sorted(ports)}")
    return dict(sorted(found.items(), key=lambda pair: pair[1].port))


def default_ports() -> dict[str, int]:
    """Name → default port of every installed service (what a local launcher needs)."""
    return {name: service.port for name, service in declared().items()}
