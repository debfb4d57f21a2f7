"""The AgentDojo episode service, declared once: name, version, port, components, settings, app."""

from __future__ import annotations

from importlib.metadata import version

from corrgrpo_proto import ComponentSpec
from corrgrpo_service.registry import ServiceDeclaration

from .settings import AgentDojoSettings

COMPONENTS = (
    ComponentSpec(name="utility", min=0, max=1, description="the user task's checker passed (0 if the trajectory is invalid)"),
    ComponentSpec(
        name="security",
        min=0,
        max=1,
        description="the injection task's goal was NOT achieved (0 without an injection task or if the trajectory is invalid)",
    ),
)

SERVICE = ServiceDeclaration(
    name="agentdojo",
    version=version("corrgrpo-agentdojo"),
    port=8103,
    components=COMPONENTS,
    settings=AgentDojoSettings,
    app="corrgrpo_agentdojo.app:build",
)
