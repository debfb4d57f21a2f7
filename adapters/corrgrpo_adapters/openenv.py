"""The corrgrpo services as OpenEnv environments (`openenv` 0.10): server side and typed clients.

    CORRGRPO_SERVICE_URL=http://127.0.0.1:8103 uvicorn --factory corrgrpo_adapters.openenv:app --port 8000

The service decides the environment (`/v1/components`, `/openapi.json`):
- AgentDojo: `reset(suite=, user_task=, injection_task=, attack=)` creates an episode. Its observation carries
  the episode's `messages` and `tools`. `step(AgentDojoAction(tool_calls=[...]))` runs the calls and observes
  their `tool_results` (injections included). An action without tool calls is the policy's turn as text
  (`completion`): calls written in it run as well, and when it holds none it is the final answer: the episode
  is finished and that step is `done` with `reward` = the weighted total and `components` = the reward vector.
- code, tool calls: one step. `reset(**item_fields)` (e.g. `task_id=`, or `ground_truth=`), then
  `step(ScoreAction(completion=...))`: `done`, `reward` = total, `components`, the service's `info`.

OpenEnv's step result has a scalar `reward`. The vector travels in the observation's `components` (a stack
that reads only `reward` gets the weighted total). An item the service could not score ends with `reward` None
and the reason in `error`. Each WebSocket session is its own environment instance (concurrent sessions are
fine: the service keeps the episodes). The service is reached with `corrgrpo_proto`'s blocking client; OpenEnv
runs these synchronous methods on its thread pool.

The clients are OpenEnv's `EnvClient`: in async code `reset`, `step` and `state` are awaited
(`async with ScoreEnv(base_url=...) as env: await env.reset(...)`). Synchronous code uses `.sync()`
(`with ScoreEnv(base_url=...).sync() as env: env.reset(...)`).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from corrgrpo_adapters.service import SPEC_KEYS, ServiceInfo, describe, finished, parse_arguments
from corrgrpo_proto import ItemResult, RewardClient, RewardServiceError
from corrgrpo_proto.agentdojo import Episode, FinishResponse, StepResponse


class AgentDojoAction(Action):
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list,
        description='Calls to run: {"function", "args", "id"} each ("name"/"arguments" too)',
    )
    completion: str = Field("", description="The policy's turn as text, read when there are no `tool_calls`")


class AgentDojoObservation(Observation):
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="At reset: system and user messages"
    )
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="At reset: the suite's tool schemas"
    )
    tool_results: list[dict[str, Any]] = Field(
        default_factory=list, description="One per call: content, error, ids"
    )
    components: dict[str, float] | None = Field(None, description="When done: the reward vector")
    info: dict[str, Any] = Field(default_factory=dict)
    error: str | None = Field(None, description="Why a step or the score was refused")


class ScoreAction(Action):
    completion: str


class ScoreObservation(Observation):
    item: dict[str, Any] = Field(
        default_factory=dict, description="The item fields this episode scores against"
    )
    components: dict[str, float] | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class ServiceState(State):
    spec: dict[str, Any] = Field(
        default_factory=dict, description="The episode or item the environment was reset to"
    )
    components: dict[str, float] | None = None


def _ended(observation: Observation, result: ItemResult) -> Observation:
    """`observation`, done, with the result's reward vector (or the error that kept it from being scored)."""
    error = f"{result.error.code}: {result.error.message}" if result.error else None
    return observation.model_copy(
        update={
            "done": True,
            "reward": result.total,
            "components": result.components,
            "info": result.info,
            "error": error,
        }
    )


def _known(fields: dict[str, Any], known: Collection[str], service: str) -> None:
    """A reset naming a field the service does not know is refused, not silently scored without it."""
    unknown = set(fields) - set(known)
    if unknown:
        raise ValueError(f"not item fields of {service}: {sorted(unknown)} (known: {sorted(known)})")


def _call(call: dict[str, Any]) -> dict[str, Any]:
    """A call in the episode API's form, from OpenAI's names (`name`, `arguments` as JSON text) too."""
    body = {
        "function": call.get("function", call.get("name")),
        "args": parse_arguments(call.get("args", call.get("arguments", {}))),
    }
    return body | ({"id": call["id"]} if call.get("id") else {})


class AgentDojoEnvironment(Environment[AgentDojoAction, AgentDojoObservation, ServiceState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, url: str, token: str | None = None) -> None:
        super().__init__()
        self.client = RewardClient(url, token=token)
        self.steps = RewardClient(url, token=token, retries=0)  # a lost step may have run: never retried
        self._state = ServiceState()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **spec: Any
    ) -> AgentDojoObservation:
        """A new episode (one left unfinished before expires on the service)."""
        _known(spec, SPEC_KEYS, "agentdojo")
        body = {key: spec[key] for key in SPEC_KEYS if spec.get(key) is not None}
        episode = Episode.model_validate(self.client.request("POST", "/v1/episodes", body))
        self._state = ServiceState(
            episode_id=episode.episode_id, spec={key: getattr(episode, key) for key in SPEC_KEYS}
        )
        return AgentDojoObservation(messages=episode.messages, tools=episode.tools)

    def step(self, action: AgentDojoAction, timeout_s: float | None = None, **_: Any) -> AgentDojoObservation:
        if self._state.episode_id is None or self._state.components is not None:
            raise RuntimeError("no open episode: call reset() first")
        self._state.step_count += 1
        calls = [_call(call) for call in action.tool_calls]
        path = f"/v1/episodes/{self._state.episode_id}"
        try:
            answer = StepResponse.model_validate(
                self.steps.request(
                    "POST",
                    f"{path}/step",
                    {"tool_calls": calls} if calls else {"completion": action.completion},
                )
            )
        # refused (too many calls, a malformed call): the policy reads why
        except RewardServiceError as error:
            return AgentDojoObservation(error=error.message)
        if calls or answer.results:
            return AgentDojoObservation(tool_results=[result.model_dump() for result in answer.results])
        result = finished(
            FinishResponse.model_validate(
                self.client.request("POST", f"{path}/finish", {"completion": action.completion})
            )
        )
        self._state.components = result.components
        return _ended(AgentDojoObservation(), result)

    @property
    def state(self) -> ServiceState:
        return self._state


class ScoreEnvironment(Environment[ScoreAction, ScoreObservation, ServiceState]):
    """One completion scored against the item the environment was reset to."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, url: str, info: ServiceInfo, token: str | None = None) -> None:
        super().__init__()
        self.client, self.service = RewardClient(url, token=token), info
        self._state = ServiceState()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **fields: Any
    ) -> ScoreObservation:
        _known(fields, self.service.shape.fields, self.service.name)
        self._state = ServiceState(episode_id=episode_id, spec=fields)
        return ScoreObservation(item=fields)

    def step(self, action: ScoreAction, timeout_s: float | None = None, **_: Any) -> ScoreObservation:
        self._state.step_count += 1
        (result,) = self.client.score([self.service.item(action.completion, self._state.spec)])
        self._state.components = result.components
        return _ended(ScoreObservation(item=self._state.spec), result)

    @property
    def state(self) -> ServiceState:
        return self._state


def app(url: str | None = None) -> Any:
    """The OpenEnv FastAPI app of the service at `url` (default `CORRGRPO_SERVICE_URL`; token
    `CORRGRPO_API_TOKEN`)."""
    url = url or os.environ["CORRGRPO_SERVICE_URL"]
    token = os.environ.get("CORRGRPO_API_TOKEN")
    with RewardClient(url, token=token) as client:
        info = describe(client)
    if info.episodic:
        return create_app(
            lambda: AgentDojoEnvironment(url, token),
            AgentDojoAction,
            AgentDojoObservation,
            env_name="corrgrpo_agentdojo",
            state_cls=ServiceState,
        )
    return create_app(
        lambda: ScoreEnvironment(url, info, token),
        ScoreAction,
        ScoreObservation,
        env_name=f"corrgrpo_{info.name}",
        state_cls=ServiceState,
    )


class _Client(EnvClient):
    observation: type[Observation]

    def _step_payload(self, action: Action) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[Any]:
        observation = self.observation(
            **payload["observation"], reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(
            observation=observation, reward=payload.get("reward"), done=payload.get("done", False)
        )

    def _parse_state(self, payload: dict[str, Any]) -> ServiceState:
        return ServiceState(**payload)


class AgentDojoEnv(_Client):
    """`async with AgentDojoEnv(base_url="http://host:8000") as env: await env.reset(suite=...,
    user_task=...)`.

    Synchronous: `with AgentDojoEnv(base_url=...).sync() as env: env.reset(suite=..., user_task=...)`.
    """

    observation = AgentDojoObservation


class ScoreEnv(_Client):
    """`async with ScoreEnv(base_url=...) as env: await env.reset(task_id=...); await
    env.step(ScoreAction(...))`.

    Synchronous: `with ScoreEnv(base_url=...).sync() as env: env.reset(task_id=...);
    env.step(ScoreAction(...))`.
    """

    observation = ScoreObservation
