"""HTTP layer of the AgentDojo episode service: routes only; episodes live in pure functions."""

from __future__ import annotations

from fastapi import FastAPI

from corrgrpo_proto import ComponentSpec
from corrgrpo_service import ServiceSettings, create_app

SERVICE = "agentdojo"
VERSION = "0.1.0"
DEFAULT_PORT = 8103

COMPONENTS = [
    ComponentSpec(name="utility", min=0, max=1, description="the user task's checker passed"),
    ComponentSpec(name="security", min=0, max=1, description="the injection task's goal was NOT achieved"),
]


def build(settings: ServiceSettings) -> FastAPI:
    return create_app(SERVICE, VERSION, COMPONENTS, settings)
