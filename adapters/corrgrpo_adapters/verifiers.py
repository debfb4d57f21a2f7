"""The corrgrpo services as a verifiers environment (verifiers 0.3, its `vf.Environment` / `vf.Rubric` API).

    vf-eval corrgrpo-verifiers -a '{"service_url": "http://127.0.0.1:8102", "dataset": "rows.jsonl"}'

`load_environment` asks the service what it is (`/v1/components`, `/openapi.json`):
- code and tool calls: a single-turn environment over the given rows (`prompt` or `question`; the item fields in
  `info`, e.g. `{"task_id": "HumanEval/0"}`; or a bare label in `answer`);
- AgentDojo: a multi-turn environment over the episode API: each rollout creates an episode (its messages and
  tool schemas become the prompt and the tools), each tool call of the policy is a step whose result (injections
  included) the policy reads next, a turn without tool calls ends the rollout. Rows default to every user task
  of the service's suites (`suites`), optionally under every injection task (`injections`).

The rubric has one reward function per declared component, named after it, weighted by the declared default
weight (`weights` overrides some; `resolve_weights`), so verifiers logs every component as a metric and its
reward is the service's weighted total under the same weights, sent with each request. The functions are group
functions: the first one scores a whole group of rollouts in ONE `POST /v1/score` (AgentDojo: one finish per
episode, concurrently); the others read that result. A rollout the service could not score is missing (the rule
of `corrgrpo_proto.common`): its `state["error"]` is a `vf.InfraError` with the reason, `corrgrpo_error` is 1 (a
metric of weight 0), and its reward is the mean of its group's scored rollouts, so its advantage is 0 and the
others' are as if it had not been there (all failed: reward 0, advantage 0). A service that cannot be reached
fails the group as verifiers does for any reward function.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import verifiers as vf
from datasets import Dataset
from verifiers.types import Messages, Tool, ToolMessage
from verifiers.utils.message_utils import normalize_messages

from corrgrpo_adapters.service import (
    Episodes,
    ServiceInfo,
    completion_text,
    describe,
    episode_specs,
    finished,
    parse_arguments,
)
from corrgrpo_proto import AsyncRewardClient, ItemResult, RewardClient, RewardServiceError, resolve_weights

RESULT_KEY = "corrgrpo_result"
ERROR_METRIC = "corrgrpo_error"
logger = logging.getLogger(__name__)
T = TypeVar("T")


class PerLoop(Generic[T]):
    """One `make()` per event loop: an httpx client belongs to the loop that first used it."""

    def __init__(self, make: Callable[[], T]) -> None:
        self.make = make
        self.made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        if loop not in self.made:
            self.made[loop] = self.make()
        return self.made[loop]


def _text(content: Any) -> str:
    """A message's content as text (a string, or a list of content parts)."""
    if isinstance(content, str) or content is None:
        return content or ""
    return "".join(
        str(getattr(part, "text", None) or (part.get("text", "") if isinstance(part, dict) else "")) for part in content
    )


def turn_text(message: Any) -> str:
    """An assistant message as the text the services parse (reasoning, text and tool calls included)."""
    calls = [(call.name, call.arguments) for call in getattr(message, "tool_calls", None) or []]
    return completion_text(_text(message.content), getattr(message, "reasoning_content", None), calls)


def last_turn(completion: Any) -> str:
    """The rollout's last assistant turn as text."""
    if isinstance(completion, str):
        return completion
    turns = [message for message in completion or [] if message.role == "assistant"]
    return turn_text(turns[-1]) if turns else ""


class ServiceRubric(vf.Rubric):
    """One group reward function per component; `score` fills `state[RESULT_KEY]` once per group."""

    def __init__(self, info: ServiceInfo, score: Callable[[list[vf.State]], Any], weights: dict[str, float]) -> None:
        super().__init__()
        self._score = score
        for spec in info.components:
            self.add_reward_func(self._component(spec.name), weight=weights[spec.name])
        self.add_metric(self._component(ERROR_METRIC))

    async def score_group(self, states: list[vf.State]) -> None:
        """verifiers' scoring, then each unscored rollout made missing: its group's mean reward, advantage 0."""
        await super().score_group(states)
        scored = [state["reward"] for state in states if state[RESULT_KEY].error is None]
        mean = sum(scored) / len(scored) if scored else 0.0
        for state in states:
            if (error := state[RESULT_KEY].error) is not None:
                state["error"] = vf.InfraError(f"corrgrpo could not score this rollout: {error.code}: {error.message}")
                state["reward"] = mean
            state["advantage"] = state["reward"] - mean
            for step in state["trajectory"]:  # verifiers copied the state's values into the steps
                step["reward"], step["advantage"] = state["reward"], state["advantage"]

    async def results(self, states: list[vf.State]) -> list[ItemResult]:
        missing = [state for state in states if RESULT_KEY not in state]
        if missing:
            for state, result in zip(missing, await self._score(missing), strict=True):
                if result.error is not None:
                    logger.error("corrgrpo could not score a rollout: %s: %s", result.error.code, result.error.message)
                state[RESULT_KEY] = result
        return [state[RESULT_KEY] for state in states]

    def _component(self, name: str) -> Callable[..., Any]:
        async def component(states: list[vf.State]) -> list[float]:
            results = await self.results(states)
            if name == ERROR_METRIC:
                return [float(result.error is not None) for result in results]
            return [float((result.components or {}).get(name, 0.0)) for result in results]

        component.__name__ = name
        return component


class AgentDojoEnv(vf.MultiTurnEnv):
    """Each rollout is an episode of the AgentDojo service; its tools run there."""

    def __init__(self, episodes: PerLoop[Episodes], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.episodes = episodes

    async def setup_state(self, state: vf.State) -> vf.State:
        episode = await self.episodes.get().create(state["info"])
        state["episode_id"] = episode.episode_id
        state["prompt"] = normalize_messages(episode.messages, field_name="episode.messages")
        state["tool_defs"] = [
            Tool(
                name=tool["function"]["name"],
                description=tool["function"].get("description", ""),
                parameters=tool["function"].get("parameters", {}),
            )
            for tool in episode.tools
        ]
        return state

    @vf.stop
    async def answered(self, state: vf.State) -> bool:
        """A turn without tool calls is the final answer."""
        if not state["trajectory"]:
            return False
        last = state["trajectory"][-1]["completion"][-1]
        return last.role == "assistant" and not getattr(last, "tool_calls", None)

    async def env_response(self, messages: Messages, state: vf.State, **kwargs: Any) -> Messages:
        calls = messages[-1].tool_calls or []
        body = [{"function": call.name, "args": parse_arguments(call.arguments), "id": call.id} for call in calls]
        try:
            step = await self.episodes.get().step(state["episode_id"], body)
        except RewardServiceError as error:  # refused (e.g. too many calls): the policy's doing, it reads why
            return [ToolMessage(tool_call_id=call.id, content=error.message) for call in calls]
        return [
            ToolMessage(tool_call_id=call.id, content=result.content) for call, result in zip(calls, step.results, strict=True)
        ]


def _rows(dataset: str | Sequence[dict[str, Any]] | Dataset) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset
    if isinstance(dataset, str):
        return Dataset.from_list([json.loads(line) for line in Path(dataset).read_text().splitlines() if line.strip()])
    return Dataset.from_list(list(dataset))


def load_environment(
    service_url: str = "http://127.0.0.1:8102",
    dataset: str | Sequence[dict[str, Any]] | Dataset | None = None,
    weights: dict[str, float] | None = None,
    system_prompt: str | None = None,
    suites: Sequence[str] | None = None,
    injections: bool = False,
    attack: str | None = None,
    max_turns: int = 20,
    timeout_s: float = 120.0,
) -> vf.Environment:
    """The environment of the service at `service_url` (bearer token: `CORRGRPO_API_TOKEN`)."""
    token = os.environ.get("CORRGRPO_API_TOKEN")
    with RewardClient(service_url, token=token, timeout=timeout_s) as client:
        info = describe(client)
        if dataset is None and not info.episodic:
            raise ValueError(f"the {info.name} service needs rows: pass `dataset` (a JSONL path or a list of rows)")
        if dataset is None:  # every episode of the suites; `info` as JSON text: rows differ in their keys
            dataset = [
                {"question": "", "info": json.dumps(spec)} for spec in episode_specs(client, suites, injections, attack)[1]
            ]
        rows = _rows(dataset)
    try:
        weights = resolve_weights(info.components, weights)
    except KeyError as unknown:
        raise ValueError(f"weights: the {info.name} service has no component {unknown} (it has {info.names})") from None
    if info.episodic:
        episodes = PerLoop(lambda: Episodes(service_url, token=token, timeout=timeout_s))

        async def finish(states: list[vf.State]) -> list[ItemResult]:
            finishing = (episodes.get().finish(s["episode_id"], last_turn(s["completion"]), weights) for s in states)
            done = await asyncio.gather(*finishing)
            return [finished(response) for response in done]

        rubric = ServiceRubric(info, finish, weights)
        return AgentDojoEnv(episodes, dataset=rows, eval_dataset=rows, rubric=rubric, max_turns=max_turns)

    clients = PerLoop(lambda: AsyncRewardClient(service_url, token=token, timeout=timeout_s))

    async def score(states: list[vf.State]) -> list[ItemResult]:
        items = [info.item(last_turn(s["completion"]), dict(s.get("info") or {}), s.get("answer")) for s in states]
        return await clients.get().score(items, weights)

    rubric = ServiceRubric(info, score, weights)
    return vf.SingleTurnEnv(dataset=rows, eval_dataset=rows, system_prompt=system_prompt, rubric=rubric)
