"""HTTP layer of the tool-call service: routes only; scoring lives in `scoring.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI

from corrgrpo_proto import ItemError
from corrgrpo_proto.toolcall import ToolCallItem, ToolCallScoreRequest
from corrgrpo_service import Scored, add_score_route

from .declaration import SERVICE
from .scoring import Score, Unparseable, score
from .settings import ToolCallSettings


def describe(result: Score) -> dict[str, Any]:
    """The raw matching scores behind the components, for evaluation and debugging."""
    info: dict[str, Any] = {"expects_tool_call": result.matching is not None}  # the ground truth has a call
    if result.matching is not None:
        m = result.matching
        info.update(s_name=m.s_name, s_params=m.s_params, s_values=m.s_values, s_max=m.s_max, exact=m.exact)
    if result.reason is not None:
        info["unparseable"] = result.reason
    return info


def build(settings: ToolCallSettings) -> FastAPI:
    app = SERVICE.create_app(settings)
    rules, limits = settings.format_rules(), settings.limits()

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
