"""The tool-call service, declared once: name, version, port, components, settings, app."""

from __future__ import annotations

from importlib.metadata import version

from corrgrpo_proto import ComponentSpec
from corrgrpo_service.registry import ServiceDeclaration

from .settings import ToolCallSettings

COMPONENTS = (
    ComponentSpec(name="format", min=0, max=1, description="ToolRL's tag format, chosen by the ground truth's tags"),
    # S_max ≥ 2 whenever there is a call, so |name| ≤ 3/S_max ≤ 1.5; the other two stay below 3.
    ComponentSpec(name="name", min=-1.5, max=1.5, description="function names: 6·s_name/S_max − 3/S_max"),
    ComponentSpec(name="param_names", min=-3, max=3, description="parameter names: 6·s_params/S_max − 3·|gt calls|/S_max"),
    ComponentSpec(name="param_values", min=-3, max=3, description="parameter values: 6·s_values/S_max − 3·Σparams/S_max"),
)

SERVICE = ServiceDeclaration(
    name="toolcall",
    version=version("corrgrpo-toolcall"),
    port=8102,
    components=COMPONENTS,
    settings=ToolCallSettings,
    app="corrgrpo_toolcall.app:build",
)
