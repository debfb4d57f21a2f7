"""The corrgrpo services as a verifiers v1 taskset (verifiers 0.4, `verifiers.v1`: Taskset, Task, Harness).

    vf-eval corrgrpo-verifiers --env.taskset.task.service-url http://127.0.0.1:8102 \
        --env.taskset.dataset rows.jsonl -m M --client.base-url URL

The taskset asks the service what it is (`/v1/components`, `/openapi.json`) and yields one task per row:
- code and tool calls: a row is `prompt` or `question`, the item's fields in `info` (e.g. `{"task_id":
  "HumanEval/0"}`) or a bare label in `answer`. The rollout's last assistant turn is the completion;
- AgentDojo: each rollout is an episode of the service (task setup creates it, its messages and tool schemas
  become the conversation, each tool call of the policy is a step, a turn without tool calls ends it). Rows
  default to every user task of the service's suites (`suites`), optionally under every injection task.

Each declared component is a `@vf.reward` of the task, named after it, weighted by its declared weight
(`task.weights` overrides some; `resolve_weights`), so a trace keeps every component as a keyed reward and its
`reward` is the service's weighted total under the weights sent with each request. Rollouts scored within
`task.batch_window_s` of each other (a group, usually) share one `POST /v1/score`. A rollout the service
could not score is a trace error (a `TaskError` naming the service's reason, its rewards left unscored),
never a 0. `ServiceHarness`, the taskset's default, runs the conversation in-process through verifiers'
interception (an AgentDojo episode's tool calls are steps at the service); `ServiceEnv` is verifiers' single
agent env on a local runtime.
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import httpx
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire

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

RESULT_KEY = "corrgrpo"
TOKEN_VAR = "CORRGRPO_API_TOKEN"
T = TypeVar("T")
Waiting = list[tuple[dict[str, Any], asyncio.Future[ItemResult]]]


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


class Batches:
    """Items asked for within `window_s` of the first go to the service in one request: a group's rollouts,
    which usually end together, then send an inline problem once (the client names it in the others)."""

    def __init__(self, client: AsyncRewardClient) -> None:
        self.client = client
        self.open: dict[str, Waiting] = {}
        self.sending: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references to tasks

    async def score(self, item: dict[str, Any], weights: dict[str, float], window_s: float) -> ItemResult:
        key = json.dumps(weights, sort_keys=True)
        result: asyncio.Future[ItemResult] = asyncio.get_running_loop().create_future()
        if key not in self.open:
            self.open[key] = []
            asyncio.get_running_loop().call_later(window_s, self.send, key, weights)
        self.open[key].append((item, result))
        return await result

    def send(self, key: str, weights: dict[str, float]) -> None:
        sending = asyncio.ensure_future(self.answer(self.open.pop(key), weights))
        self.sending.add(sending)
        sending.add_done_callback(self.sending.discard)

    async def answer(self, batch: Waiting, weights: dict[str, float]) -> None:
        try:
            results = await self.client.score([item for item, _ in batch], weights)
        except Exception as error:  # every rollout of the request fails as the request did
            for _, result in batch:
                if not result.done():
                    result.set_exception(error)
            return
        for (_, result), answer in zip(batch, results, strict=True):
            if not result.done():  # a rollout cancelled meanwhile (e.g. its scoring deadline) wants none
                result.set_result(answer)


class Service:
    """A service's declaration and clients, one per URL in a process: every task of a taskset shares them."""

    known: ClassVar[dict[str, Service]] = {}

    def __init__(self, url: str, timeout_s: float) -> None:
        token = os.environ.get(TOKEN_VAR)
        with RewardClient(url, token=token, timeout=timeout_s) as client:
            self.info: ServiceInfo = describe(client)
        self.url = url
        self.batches = PerLoop(lambda: Batches(AsyncRewardClient(url, token=token, timeout=timeout_s)))
        self.episodes = PerLoop(lambda: Episodes(url, token=token, timeout=timeout_s))

    @classmethod
    def at(cls, url: str, timeout_s: float = 120.0) -> Service:
        if url not in cls.known:
            cls.known[url] = cls(url, timeout_s)
        return cls.known[url]

    def weights(self, overrides: dict[str, float]) -> dict[str, float]:
        try:
            return resolve_weights(self.info.components, overrides)
        except KeyError as unknown:
            names = self.info.names
            raise ValueError(
                f"weights: the {self.info.name} service has no component {unknown} ({names})"
            ) from None


class ServiceState(vf.State):
    """An AgentDojo rollout's episode, from task setup to the harness and to scoring (not serialized)."""

    service_url: str = ""
    episode_id: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)


class ServiceTaskConfig(vf.TaskConfig):
    service_url: str = "http://127.0.0.1:8102"
    """The corrgrpo service that scores (bearer token: the `CORRGRPO_API_TOKEN` variable)."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Weights of some components. The others keep the weight the service declares."""
    timeout_s: float = Field(120.0, gt=0)
    """Seconds a request to the service may take."""
    batch_window_s: float = Field(0.05, ge=0)
    """Rollouts scored within this many seconds of each other share one request (code, tool calls)."""


class RowData(vf.TaskData):
    fields: dict[str, Any] = Field(default_factory=dict)
    """The item's fields (code, tool calls) or the episode's spec (AgentDojo: suite, user_task, ...)."""
    answer: str | None = None
    """A bare label, read as the item's fields the service's label carries (e.g. a tool-call ground truth)."""


class UnscoredItem(RuntimeError):
    """The service answered this rollout with an item error: the rollout is unscored, not worth 0."""


def last_turn(trace: vf.Trace) -> str:
    """The rollout's last assistant turn as the text the services parse (reasoning, tool calls included)."""
    turns = trace.assistant_messages
    if not turns:
        return ""
    message = turns[-1]
    calls = [(call.name, call.arguments) for call in message.tool_calls or []]
    return completion_text(message.content or "", message.reasoning_content, calls)


def component_reward(name: str, weight: float) -> Callable[[vf.Trace], Awaitable[float]]:
    """The `@vf.reward` of one component: its value in the service's result (kept by `ServiceTask.score`)."""

    async def reward(trace: vf.Trace) -> float:
        return float(trace.info[RESULT_KEY]["components"][name])

    reward.__name__ = name
    return vf.reward(reward, weight=weight)


class ServiceTask(vf.Task[RowData, ServiceState, ServiceTaskConfig]):
    @property
    def service(self) -> Service:
        return Service.at(self.config.service_url, self.config.timeout_s)

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """AgentDojo: the rollout's episode, created at the service before the policy's first turn."""
        if not self.service.info.episodic:
            return
        episode = await self.service.episodes.get().create(self.data.fields)
        state = trace.state
        state.service_url, state.episode_id = self.service.url, episode.episode_id
        state.messages, state.tools = list(episode.messages), list(episode.tools)

    def hooks(self, attr: str) -> list[Callable[..., Any]]:
        """verifiers' hooks, plus a reward per declared component (the service decides which there are)."""
        hooks = super().hooks(attr)
        if attr != "reward":
            return hooks
        weights = self.service.weights(self.config.weights)
        return [*hooks, *(component_reward(name, weight) for name, weight in weights.items())]

    async def score(self, trace: vf.Trace, runtime: vf.Runtime | None = None) -> None:
        """One request for the whole vector, then verifiers' scoring of each component from its result."""
        if not self.scoring_deferred:
            service = self.service
            weights = service.weights(self.config.weights)
            trace.rewards.update(dict.fromkeys(weights))  # unscored until the service has answered
            result = await self.result(service, trace, weights)
            if result.error is not None:
                raise UnscoredItem(
                    f"corrgrpo could not score this rollout: {result.error.code}: {result.error.message}"
                )
            trace.info[RESULT_KEY] = result.model_dump(mode="json", exclude_none=True)
        await super().score(trace, runtime)

    async def result(self, service: Service, trace: vf.Trace, weights: dict[str, float]) -> ItemResult:
        completion = last_turn(trace)
        episode_id = trace.state.episode_id
        if episode_id is not None:
            return finished(await service.episodes.get().finish(episode_id, completion, weights))
        if service.info.episodic:
            raise UnscoredItem(
                "an AgentDojo task needs an episode: run it with the corrgrpo-verifiers harness"
            )
        item = service.info.item(completion, dict(self.data.fields), self.data.answer)
        return await service.batches.get().score(item, weights, self.config.batch_window_s)


class ServiceTasksetConfig(vf.TasksetConfig):
    task: ServiceTaskConfig = ServiceTaskConfig()
    dataset: Path | None = None
    """JSONL rows; AgentDojo without one: every user task of `suites`."""
    suites: list[str] = Field(default_factory=list)
    """AgentDojo: the suites of the default rows (all of the service's when empty)."""
    injections: bool = False
    """AgentDojo: each user task also under every injection task of its suite."""
    attack: str | None = None
    """AgentDojo: the attack of the injected rows (the service's default when unset)."""


def row_data(row: dict[str, Any]) -> RowData:
    fields = row.get("info") or {}
    fields = json.loads(fields) if isinstance(fields, str) else dict(fields)
    prompt = row.get("prompt", row.get("question", ""))
    spec = [str(fields[key]) for key in ("suite", "user_task", "injection_task") if fields.get(key)]
    task_id = fields.get("task_id")
    return RowData(
        prompt=prompt,
        id=str(task_id) if task_id is not None else None,
        name="/".join(spec) or None,
        fields=fields,
        answer=row.get("answer"),
    )


class ServiceTaskset(vf.Taskset[ServiceTask, ServiceTasksetConfig]):
    """The rows of one corrgrpo service."""

    def __init__(self, config: ServiceTasksetConfig) -> None:
        super().__init__(config)
        task = config.task
        service = Service.at(task.service_url, task.timeout_s)
        service.weights(task.weights)  # an unknown component fails here, before any rollout
        if config.dataset is None and not service.info.episodic:
            raise ValueError(f"the {service.info.name} service needs rows: set dataset (a JSONL path)")
        self.episodes: list[dict[str, Any]] = []
        if config.dataset is None:
            token = os.environ.get(TOKEN_VAR)
            with RewardClient(task.service_url, token=token, timeout=task.timeout_s) as client:
                self.episodes = episode_specs(client, config.suites, config.injections, config.attack)[1]

    def rows(self) -> Iterator[dict[str, Any]]:
        if self.config.dataset is None:
            yield from ({"prompt": "", "info": spec} for spec in self.episodes)
            return
        with self.config.dataset.open(encoding="utf-8") as lines:
            yield from (json.loads(line) for line in lines if line.strip())

    def load(self) -> Iterator[ServiceTask]:
        for row in self.rows():
            yield ServiceTask(row_data(row), self.config.task)


class ServiceHarnessConfig(vf.HarnessConfig):
    max_turns: int = Field(20, ge=1)
    """AgentDojo: the most policy turns of an episode (a turn without tool calls ends it sooner)."""


class ServiceHarness(vf.Harness[ServiceHarnessConfig]):
    """The policy's conversation, in-process: every model call goes through the rollout's interception
    endpoint (so verifiers records the turns). An AgentDojo episode's tool calls run at the service."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        state = trace.state
        episode_id = getattr(state, "episode_id", None)
        messages = list(state.messages) if episode_id is not None else opening(*self.resolve_prompt(data))
        tools = list(state.tools) if episode_id is not None else []
        headers = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(base_url=endpoint, headers=headers, timeout=None) as model:
            for _ in range(self.config.max_turns):
                reply = await ask(model, ctx.model, messages, tools)
                messages.append(reply)
                calls = reply.get("tool_calls") or []
                if episode_id is None or not calls:
                    break
                messages += await step(Service.at(state.service_url), episode_id, calls)
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


class ServiceEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy's seat, on a local runtime by default: the harness runs no program (verifiers': Prime)."""


class ServiceEnv(vf.SingleAgentEnv, vf.Env[ServiceEnvConfig]):
    """One agent per episode, as verifiers' single-agent env, on a local runtime by default."""


def opening(system_prompt: str | None, prompt: str | vf.Messages | None) -> list[dict[str, Any]]:
    """A row's prompt as chat messages."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    if isinstance(prompt, str):
        return [*messages, {"role": "user", "content": prompt}]
    return [*messages, *(message_to_wire(message) for message in prompt or [])]


async def ask(
    model: httpx.AsyncClient, name: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict:
    """One policy turn: the assistant message, as the conversation carries it on."""
    body: dict[str, Any] = {"model": name, "messages": messages, **({"tools": tools} if tools else {})}
    response = await model.post("/chat/completions", json=body)
    response.raise_for_status()
    message = response.json()["choices"][0]["message"]
    kept = ("content", "reasoning_content", "tool_calls")
    return {"role": "assistant", **{key: message[key] for key in kept if message.get(key) is not None}}


async def step(service: Service, episode_id: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode's answer to the turn's tool calls, one tool message per call."""
    body = [
        {
            "function": call["function"]["name"],
            "args": parse_arguments(call["function"]["arguments"]),
            "id": call["id"],
        }
        for call in calls
    ]
    try:
        results = [result.content for result in (await service.episodes.get().step(episode_id, body)).results]
    except RewardServiceError as error:  # refused (e.g. too many calls): the policy's doing, it reads why
        results = [error.message] * len(calls)
    return [
        {"role": "tool", "tool_call_id": call["id"], "content": content}
        for call, content in zip(calls, results, strict=True)
    ]
