"""HTTP layer of the tool-call service: routes only; scoring lives in `scoring.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import Field

from corrgrpo_proto import ComponentSpec, ItemError
from corrgrpo_proto.toolcall import ToolCallItem, ToolCallScoreRequest
from corrgrpo_service import Scored, ServiceSettings, add_score_route, create_app

from .scoring import FormatRules, Limits, Score, Unparseable, score

SERVICE = "toolcall"
VERSION = "0.1.0"
DEFAULT_PORT = 8102

COMPONENTS = [
    ComponentSpec(name="format", min=0, max=1, description="ToolRL's tag format, chosen by the ground truth's tags"),
    # S_max ≥ 2 whenever there is a call, so |name| ≤ 3/S_max ≤ 1.5; the other two stay below 3.
    ComponentSpec(name="name", min=-1.5, max=1.5, description="function names: 6·s_name/S_max − 3/S_max"),
    ComponentSpec(name="param_names", min=-3, max=3, description="parameter names: 6·s_params/S_max − 3·|gt calls|/S_max"),
    ComponentSpec(name="param_values", min=-3, max=3, description="parameter values: 6·s_values/S_max − 3·Σparams/S_max"),
]


class ToolCallSettings(ServiceSettings):
    max_completion_chars: int = Field(Limits.max_chars, description="Longer completions score as unparseable")
    max_calls: int = Field(Limits.max_calls, description="A <tool_call> block with more lines scores as unparseable")
    lenient_separators: bool = Field(False, description="format: any whitespace between tag blocks, not exactly one newline")
    optional_think_open: bool = Field(False, description="format: accept a response that starts inside <think>")


def describe(result: Score) -> dict[str, Any]:
    """The raw matching scores behind the components, for evaluation and debugging."""
    info: dict[str, Any] = {"has_tool_call": result.matching is not None}
    if result.matching is not None:
        m = result.matching
        info.update(s_name=m.s_name, s_params=m.s_params, s_values=m.s_values, s_max=m.s_max, exact=m.exact)
    if result.reason is not None:
        info["unparseable"] = result.reason
    return info


def build(settings: ToolCallSettings) -> FastAPI:
    app = create_app(SERVICE, VERSION, COMPONENTS, settings)
    rules = FormatRules(settings.lenient_separators, settings.optional_think_open)
    limits = Limits(settings.max_completion_chars, settings.max_calls)

    async def scorer(items: list[ToolCallItem]) -> Sequence[Scored | ItemError]:
        # Pure CPU work of tens of microseconds per item: running it inline beats a thread hop.
        answers: list[Scored | ItemError] = []
        for item in items:
            try:
                result = score(item.completion, item.ground_truth, rules, limits)
            except Unparseable as error:
                answers.append(ItemError(code="invalid_ground_truth", message=str(error)))
                continue
            answers.append(Scored(result.as_dict(), describe(result)))
        return answers

    add_score_route(app, ToolCallScoreRequest, scorer)
    return app
