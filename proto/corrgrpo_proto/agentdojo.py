"""Wire models of the AgentDojo episode service (`corrgrpo_agentdojo`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .common import ScoreRequest, WireModel


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
    attack: str | None = Field(None, description="Attack name; the service default when an injection task is given")


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
    tool_calls: list[ToolCall] = Field(min_length=1)


class ToolResult(BaseModel):
    tool_call_id: str | None = None
    function: str
    content: str = Field(description="What the agent sees: the result, injections included, or the error text")
    error: str | None = None


class StepResponse(BaseModel):
    episode_id: str
    results: list[ToolResult]
    tool_calls_so_far: int = Field(description="Calls executed in this episode, this step's included")


class FinishRequest(WireModel):
    final_answer: str = ""


class FinishResponse(BaseModel):
    """The episode's reward vector; the episode is closed."""

    episode_id: str
    components: dict[str, float] = Field(description="`utility` and `security`, each 0 or 1")
    total: float = Field(description="Sum of the components with the service's default weights")
    info: dict[str, Any] = Field(default_factory=dict)


class SuiteTasks(BaseModel):
    user_tasks: list[str]
    injection_tasks: list[str]


class TasksResponse(BaseModel):
    """`GET /v1/tasks`: what episodes can be made of."""

    benchmark_version: str
    default_attack: str
    attacks: list[str]
    suites: dict[str, SuiteTasks]


class TrajectoryItem(EpisodeSpec):
    """A whole trajectory for the stateless `POST /v1/score`: replayed in a fresh environment."""

    id: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list, description="Every call, in order")
    final_answer: str = ""


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
