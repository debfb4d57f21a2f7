"""Wire models of the tool-call service (`corrgrpo_toolcall`)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from .common import ScoreRequest, WireModel
from .items import LABEL_KEY


class ToolCallItem(WireModel):
    """A ToolRL/RLLA-4K completion and its ground-truth response (same tag format)."""

    model_config = ConfigDict(json_schema_extra={LABEL_KEY: "ground_truth"})

    id: str | None = None
    completion: str = Field(
        description="The model's response (`<think>`, `<tool_call>`, `<response>`), raw or wrapped in a "
        "ChatML/Llama-3 chat template: the text after the last assistant-turn marker, up to the end-of-turn "
        "marker, is scored"
    )
    ground_truth: str = Field(description="The reference response in the same format")


class ToolCallScoreRequest(ScoreRequest[ToolCallItem]):
    pass


SCHEMA_MODELS = (
    ToolCallItem,
    ToolCallScoreRequest,
)
