"""HTTP layer of the tool-call service: routes only; scoring lives in pure functions."""

from __future__ import annotations

from fastapi import FastAPI

from corrgrpo_proto import ComponentSpec
from corrgrpo_service import ServiceSettings, create_app

SERVICE = "toolcall"
VERSION = "0.1.0"
DEFAULT_PORT = 8102

COMPONENTS = [
    ComponentSpec(name="format", min=0, max=1, description="ToolRL's tag format, chosen by the ground truth's tags"),
    ComponentSpec(name="name", min=-3, max=3, description="function names: 6·s_name/S_max − 3/S_max"),
    ComponentSpec(name="param_names", min=-3, max=3, description="parameter names: 6·s_params/S_max − 3·|gt calls|/S_max"),
    ComponentSpec(name="param_values", min=-3, max=3, description="parameter values: 6·s_values/S_max − 3·Σparams/S_max"),
]


def build(settings: ServiceSettings) -> FastAPI:
    return create_app(SERVICE, VERSION, COMPONENTS, settings)
