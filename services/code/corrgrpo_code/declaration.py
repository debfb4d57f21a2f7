"""The code service, declared once: name, version, port, components, settings, app."""

from __future__ import annotations

from importlib.metadata import version

from corrgrpo_proto import ComponentSpec
from corrgrpo_service.registry import ServiceDeclaration

from .settings import CodeSettings

COMPONENTS = (
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
)

SERVICE = ServiceDeclaration(
    name="code",
    version=version("corrgrpo-code"),
    port=8101,
    components=COMPONENTS,
    settings=CodeSettings,
    app="corrgrpo_code.app:build",
)
