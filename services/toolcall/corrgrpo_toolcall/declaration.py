"""The tool-call service, declared once: name, version, port, components, settings, app, example item,
deployment."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from corrgrpo_common.registry import Deploy, Resources, ServiceDeclaration
from corrgrpo_proto import ComponentSpec

from .matching import RANGES
from .settings import ToolCallSettings

MATCHING = {
    "name": "function names: s_name − 0.5 (multiset Jaccard of the names)",
    "param_names": "parameter names: 2·s_params/|gt calls| − 1 (key Jaccards of the matched calls)",
    "param_values": "parameter values: 3·s_values/Σparams − 1.5 (equal values; 1.5 when the calls take none)",
}
COMPONENTS = (
    ComponentSpec(
        name="format", min=0, max=1, description="ToolRL's tag format, chosen by the ground truth's tags"
    ),
    *(
        ComponentSpec(name=name, min=low, max=high, description=MATCHING[name])
        for name, (low, high) in RANGES.items()
    ),
)

TOOL_CALL = (
    '<think>plan</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
)


def example(completion: str | None = None) -> dict[str, Any]:
    return {"completion": TOOL_CALL if completion is None else completion, "ground_truth": TOOL_CALL}


SERVICE = ServiceDeclaration(
    name="toolcall",
    version=version("corrgrpo-toolcall"),
    port=8102,
    components=COMPONENTS,
    settings=ToolCallSettings,
    app="corrgrpo_toolcall.app:build",
    example=example,
    deploy=Deploy(
        Resources(
            cpu_request=0.5, memory_request_mib=512, cpu_limit=1, memory_limit_mib=1024, peak_rss_mib=512
        )
    ),
)
