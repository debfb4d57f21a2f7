"""One declaration per service, and the registry every list of services is derived from.

A service declares itself once, in `corrgrpo_<name>/declaration.py`:

    SERVICE = ServiceDeclaration(name="code", version=version("corrgrpo-code"), port=8101,
                                 components=COMPONENTS, settings=CodeSettings, app="corrgrpo_code.app:build")

and registers it with one entry point in its own pyproject.toml:

    [project.entry-points."corrgrpo.services"]
    code = "corrgrpo_code.declaration:SERVICE"

`python -m corrgrpo_<name>` serves its `SERVICE`; `declared()` finds every installed one for the
tests' service lists, the deploy checks and local launchers. Importing a declaration is cheap
(settings and component specs only); the app module, which may import heavy packages (agentdojo
takes seconds), is imported only by `build`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from fastapi import FastAPI

from corrgrpo_proto import ComponentSpec

from .app import create_app
from .settings import ServiceSettings

ENTRY_POINT_GROUP = "corrgrpo.services"


@dataclass(frozen=True)
class ServiceDeclaration:
    """Everything the kit, the launchers and the checks need to know about one service."""

    name: str
    version: str
    port: int  # default port; `CORRGRPO_PORT` or `--port` override it
    components: Sequence[ComponentSpec]
    settings: type[ServiceSettings]
    app: str  # "module:function": builds the FastAPI app from the settings (imported only when called)

    @property
    def module(self) -> str:
        """What `python -m` runs: the app's module less a final `.app` (`corrgrpo_code.app` → `corrgrpo_code`)."""
        return self.app.partition(":")[0].removesuffix(".app")

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"

    def create_app(self, settings: ServiceSettings, **kwargs: Any) -> FastAPI:
        """The kit's app (`create_app`) under this service's name, version and components."""
        return create_app(self.name, self.version, list(self.components), settings, **kwargs)

    def build(self, settings: ServiceSettings | None = None) -> FastAPI:
        """The service's full app; settings from the environment when none are given."""
        module, _, function = self.app.partition(":")
        return getattr(importlib.import_module(module), function)(settings or self.settings())


def declared() -> dict[str, ServiceDeclaration]:
    """Every installed service, by name, in port order; raises when two declarations clash."""
    found: dict[str, ServiceDeclaration] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        service = entry.load()
        if not isinstance(service, ServiceDeclaration) or service.name != entry.name:
            raise TypeError(f"entry point {entry.name} = {entry.value} is not the ServiceDeclaration named {entry.name!r}")
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
