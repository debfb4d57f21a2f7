"""The AgentDojo episode service, declared once: name, version, port, components, settings, app."""

from __future__ import annotations

from importlib.metadata import version

from corrgrpo_proto import ComponentSpec
from corrgrpo_service.registry import ServiceDeclaration

from .settings import AgentDojoSettings

COMPONENTS = (
    ComponentSpec(name="utility", min=0, max=1, description="the user task's checker passed"),
    ComponentSpec(name="security", min=0, max=1, description="the injection task's goal was NOT achieved"),
)

SERVICE = ServiceDeclaration(
    name="agentdojo",
    version=version("corrgrpo-agentdojo"),
    port=8103,
    components=COMPONENTS,
    settings=AgentDojoSettings,
    app="corrgrpo_agentdojo.app:build",
)
