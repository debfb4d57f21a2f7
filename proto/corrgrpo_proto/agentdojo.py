"""Wire models of the AgentDojo episode service (`corrgrpo_agentdojo`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from .common import ScoreRequest, WireModel

RAW_COMPLETION = (
    "The policy's raw generated text; the service reads its `<tool_call>{json}</tool_call>` blocks "
    "(Hermes/Qwen form, one JSON object each, ids kept) and its answer (`<response>` block, else the text "
    "outside `<think>`/`<tool_call>` blocks); trailing special tokens (`<|im_end|>`, `</s>`, ...) are ignored"
)


class ToolCall(WireModel):
    """One call of an environment function by the agent."""

    function: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = Field(None, description="The model's call id, echoed in the tool result")


class EpisodeSpec(WireModel):
    """Which episode: a user task, optionally under an injection task delivered by an attack."""

    suite: str
    user_task: str
    injection_task: str | None = None
    attack: str | None = Field(
        None, description="Attack name; the service default when an injection task is given"
    )


class EpisodeCreate(EpisodeSpec):
    pass


class Episode(BaseModel):
    """A new episode: what the policy is shown before its first step."""

    episode_id: str
    suite: str
    user_task: str
    injection_task: str | None = None
    attack: str | None = None
    messages: list[dict[str, Any]] = Field(description="System and user messages, chat format")
    tools: list[dict[str, Any]] = Field(description="Tool schemas in the OpenAI/HF `tools` format")


class StepRequest(WireModel):
    """The policy's next tool calls: structured `tool_calls`, or the raw `completion` the service parses."""

    tool_calls: list[ToolCall] | None = Field(None, min_length=1)
    completion: str | None = Field(None, description=RAW_COMPLETION)

    @model_validator(mode="after")
    def _one_form(self) -> StepRequest:
        if (self.tool_calls is None) == (self.completion is None):
            raise ValueError("give exactly one of `tool_calls` and `completion`")
        return self


class ToolResult(BaseModel):
    tool_call_id: str | None = None
    function: str
    content: str = Field(
        description="What the agent sees: the result, injections included, or the error text"
    )
    error: str | None = None


class StepResponse(BaseModel):
    episode_id: str
    results: list[ToolResult] = Field(
        description="One per call, in order; an unreadable call's result is its error"
    )
    tool_calls_so_far: int = Field(description="Calls executed in this episode, this step's included")
    final_answer: str | None = Field(
        None,
        description="For a raw `completion`: its answer text; no results means the policy answered "
        "instead of calling",
    )


class FinishRequest(WireModel):
    """The episode's final answer, or the raw last `completion` the service reads it from."""

    final_answer: str = ""
    completion: str | None = Field(None, description=RAW_COMPLETION)
    weights: dict[str, float] | None = Field(
        None, description="Overrides of the components' default weights in `total`"
    )

    @model_validator(mode="after")
    def _one_form(self) -> FinishRequest:
        if self.completion is not None and self.final_answer:
            raise ValueError("give `final_answer` or `completion`, not both")
        return self


class FinishResponse(BaseModel):
    """The episode's reward vector. The episode is closed."""

    episode_id: str
    components: dict[str, float] = Field(description="`utility` and `security`, each 0 or 1")
    total: float = Field(
        description="Weighted sum of the components: the declared weights, the request's overriding"
    )
    info: dict[str, Any] = Field(default_factory=dict)


class SuiteTasks(BaseModel):
    user_tasks: list[str]
    injection_tasks: list[str]
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="The suite's tool schemas, as an episode gets them"
    )
    utility_without_work: dict[str, list[str]] = Field(
        default_factory=dict,
        description="User tasks whose official checker grants utility to a trajectory that did no work, "
        "by probe: `empty` (no tool calls, empty answer), `number_list` (no tool calls, an answer listing "
        "0 1 2 ... up to the answer cap). Computed by the service, not hard-coded",
    )


class TasksResponse(BaseModel):
    """`GET /v1/tasks`: what episodes can be made of."""

    benchmark_version: str
    default_attack: str
    attacks: list[str]
    system_message: str = Field(
        description="agentdojo's default system message, the first message of every episode"
    )
    max_answer_chars: int = Field(
        description="Longer final answers score utility 0 (the cap the `number_list` probe fills)"
    )
    suites: dict[str, SuiteTasks]


class TrajectoryItem(EpisodeSpec):
    """A whole trajectory for the stateless `POST /v1/score`: replayed in a fresh environment."""

    id: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list, description="Every call, in order")
    final_answer: str = ""
    completion: str | None = Field(
        None, description=RAW_COMPLETION + "; instead of `tool_calls` and `final_answer`"
    )

    @model_validator(mode="after")
    def _one_form(self) -> TrajectoryItem:
        if self.completion is not None and (self.tool_calls or self.final_answer):
            raise ValueError("give `completion` or `tool_calls`/`final_answer`, not both")
        return self


class AgentDojoScoreRequest(ScoreRequest[TrajectoryItem]):
    pass


SCHEMA_MODELS = (
    TrajectoryItem,
    AgentDojoScoreRequest,
    EpisodeCreate,
    Episode,
    StepRequest,
    StepResponse,
    FinishRequest,
    FinishResponse,
    TasksResponse,
)
