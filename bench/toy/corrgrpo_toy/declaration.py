"""The toy service, declared once: name, version, port, components, settings, app, example item."""

from __future__ import annotations

from typing import Any

from corrgrpo_common.registry import ServiceDeclaration
from corrgrpo_proto import ComponentSpec

from .settings import ToySettings

COMPONENTS = (
    ComponentSpec(name="length", min=0, max=None, weight=0.001, description="characters in `completion`"),
    ComponentSpec(name="nonempty", min=0, max=1, description="`completion` is not empty"),
)


def example(completion: str | None = None) -> dict[str, Any]:
    return {"completion": "abc" if completion is None else completion}


SERVICE = ServiceDeclaration(
    name="toy",
    # pyproject.toml's: the bench runs the toy from its folder, with no installed metadata to read
    version="0.1.0",
    port=8199,
    components=COMPONENTS,
    settings=ToySettings,
    app="corrgrpo_toy.app:build",
    example=example,
)
