"""HTTP layer of the tool-call service: routes only. Scoring lives in `scoring.py`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI

from corrgrpo_common import Scored, add_score_route
from corrgrpo_proto import ItemError
from corrgrpo_proto.toolcall import ToolCallItem, ToolCallScoreRequest

from .calls import Unparseable
from .declaration import SERVICE
from .scoring import Score, score_group
from .settings import ToolCallSettings


def describe(result: Score) -> dict[str, Any]:
    """The raw matching scores behind the components, for evaluation and debugging."""
    info: dict[str, Any] = {"expects_tool_call": result.matching is not None}  # the ground truth has a call
    if result.matching is not None:
        m = result.matching
        info.update(s_name=m.s_name, s_params=m.s_params, s_values=m.s_values, s_max=m.s_max, exact=m.exact)
        info["toolrl_correctness"] = m.toolrl_correctness  # ToolRL's single number, before the fork split it
    if result.reason is not None:
        info["unparseable"] = result.reason
    return info


def build(settings: ToolCallSettings) -> FastAPI:
    app = SERVICE.create_app(
        settings, field_limits={"ground_truth": settings.toolcall_max_ground_truth_chars}
    )
    rules, caps = settings.format_rules(), settings.parse_caps()

    def score_items(items: list[ToolCallItem]) -> list[Scored | ItemError]:
        """Item by item, grouped by ground truth so each distinct one is parsed once."""
        groups: dict[str, list[int]] = {}
        for index, item in enumerate(items):
            groups.setdefault(item.ground_truth, []).append(index)
        answers: list[Scored | ItemError] = [ItemError(code="internal", message="not scored")] * len(items)
        for ground_truth, indexes in groups.items():
            try:
                results = score_group([items[i].completion for i in indexes], ground_truth, rules, caps)
            except Unparseable as error:
                for i in indexes:
                    answers[i] = ItemError(code="invalid_ground_truth", message=str(error))
                continue
            for i, result in zip(indexes, results, strict=True):
                answers[i] = Scored(result.as_dict(), describe(result))
        return answers

    async def scorer(items: list[ToolCallItem]) -> Sequence[Scored | ItemError]:
        # In a worker thread: a large batch (seconds of CPU) must not stall the event loop and /healthz.
        return await asyncio.to_thread(score_items, items)

    add_score_route(app, ToolCallScoreRequest, scorer)
    return app
