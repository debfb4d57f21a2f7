"""HTTP layer of the code service: routes only; scoring lives in pure functions."""

from __future__ import annotations

from fastapi import FastAPI

from corrgrpo_proto import ComponentSpec
from corrgrpo_service import ServiceSettings, create_app

SERVICE = "code"
VERSION = "0.1.0"
DEFAULT_PORT = 8101

COMPONENTS = [
    ComponentSpec(name="format", min=0, max=1, description="exactly one fenced Python code block"),
    ComponentSpec(name="syntax", min=0, max=1, description="the extracted code parses"),
    ComponentSpec(name="compile", min=0, max=1, description="requires syntax; the module's top level runs"),
    ComponentSpec(name="runtime", min=0, max=1, description="requires compile; tests run without an uncaught error"),
    ComponentSpec(name="correct", min=0, max=1, description="requires runtime; every test passes"),
    ComponentSpec(
        name="ast_similarity",
        min=0,
        max=1,
        description="AST similarity to the reference, names and literals abstracted",
    ),
    ComponentSpec(name="efficiency", min=0, max=2, description="correct only: min(t_ref / t, 2)"),
]


def build(settings: ServiceSettings) -> FastAPI:
    return create_app(SERVICE, VERSION, COMPONENTS, settings)
