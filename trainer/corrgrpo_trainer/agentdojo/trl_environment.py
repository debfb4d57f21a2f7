"""Multi-turn AgentDojo for TRL's GRPOTrainer: the policy calls the suite's tools and reads their results.

TRL 1.16's `environment_factory` gives every rollout its own environment instance. Its public
methods are the tools (TRL renders their signatures and docstrings into the chat template and
calls them when the policy emits a tool call), `reset(**row)` starts it and returns text appended
to the prompt, and reward functions receive the instances as `environments=`. Here each instance
is one episode of the AgentDojo service, reached only over HTTP through `corrgrpo_proto`'s client:

- `reset` creates the episode (`POST /v1/episodes`) for the row's suite, user task, injection task
  and attack and returns the user task's prompt (the row's prompt holds agentdojo's system message);
- each tool method is built from the service's tool schema (name, parameters, description) and
  runs one `POST .../step`. The result text (injections included) is what the policy reads next.
  A failed call raises `ToolError` with the service's error text: TRL shows it to the policy as
  the tool's result and counts it in `tools/failure_frequency`. The training step goes on;
- the reward columns `utility` and `security` call `POST .../finish` once per rollout with the
  last assistant message (the service reads the answer out of it) and give the two components.
  An episode whose finish fails scores None (missing) and is left to expire.

The protocol: the tool calls TRL parsed from the policy's text go to `/step` as structured `tool_calls`,
the wire contract's typed form (one parser, the policy's own chat template, decides what the policy called).
The last message goes to `/finish` raw, so the service reads the answer and checks its form. Timing of
every service call is kept in `ServiceClock`, so a run can say how much of a step the service took.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corrgrpo_proto import RewardClient, RewardServiceError, RewardServiceUnavailable
from corrgrpo_proto.agentdojo import Episode, EpisodeSpec, FinishResponse, StepResponse

from .tools import tool_method

SPEC_KEYS = ("suite", "user_task", "injection_task", "attack")


class ToolError(RuntimeError):
    """A tool call that did not run: TRL turns it into the tool's result `{"error": message}`."""


@dataclass
class ServiceClock:
    """Every service call's (start, end) by kind (create, step, finish): time spent and overlap, for
    measurements."""

    spans: dict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: {"create": [], "step": [], "finish": []}
    )
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, kind: str, start: float, end: float) -> None:
        with self.lock:
            self.spans[kind].append((start, end))

    def seconds(self, kind: str) -> float:
        return sum(end - start for start, end in self.spans[kind])

    def max_overlap(self, kind: str) -> int:
        """The most calls of `kind` in flight at one moment (1: they ran one after another)."""
        events = sorted(
            [(start, 1) for start, _ in self.spans[kind]] + [(end, -1) for _, end in self.spans[kind]]
        )
        depth = best = 0
        for _, change in events:
            depth += change
            best = max(best, depth)
        return best


@dataclass
class EpisodeLog:
    """Every finished rollout: its spec and reward vector (evaluation reads it)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, spec: dict[str, Any], result: FinishResponse | None) -> None:
        """The episode's components (None when unscored) and the injection checker's own verdict: an invalid
        trajectory scores security 0 whether or not the injection's goal was met."""
        components = result.components if result else None
        succeeded = result.info.get("injection_succeeded") if result else None
        with self.lock:
            self.rows.append({**spec, "components": components, "injection_succeeded": succeeded})


class AgentDojoEnvironment:
    """One rollout's AgentDojo episode; `environment_class(suite, ...)` adds the suite's tools as methods.

    TRL treats every public method but `reset` as a tool: everything else here is private."""

    suite: str
    client: (
        RewardClient  # create/finish: retried (idempotent enough: a lost create leaves an episode to expire)
    )
    step_client: RewardClient  # steps are not idempotent: never retried
    clock: ServiceClock
    log: EpisodeLog
    weights: dict[str, float]  # sent with each finish: its `total` is the sum the trainer optimises

    def __init__(self) -> None:
        self.episode_id: str | None = None
        self.spec: dict[str, Any] = {}
        self._result: FinishResponse | None = None
        self._finish_lock = threading.Lock()

    def _timed(self, kind: str, client: RewardClient, path: str, body: dict[str, Any]) -> Any:
        start = time.perf_counter()
        try:
            return client.request("POST", path, body)
        finally:
            self.clock.record(kind, start, time.perf_counter())

    def reset(self, **row: Any) -> str:
        """Create the row's episode. The user task's prompt is appended to the (empty) last user message."""
        spec = EpisodeSpec(**{key: row.get(key) for key in SPEC_KEYS})
        if spec.suite != self.suite:
            raise ValueError(f"a {spec.suite} row reached the {self.suite} environment")
        episode = Episode.model_validate(
            self._timed("create", self.client, "/v1/episodes", spec.model_dump(exclude_none=True))
        )
        self.episode_id, self._result = episode.episode_id, None
        self.spec = {
            key: getattr(episode, key) for key in SPEC_KEYS
        }  # as the service resolved it (default attack named)
        return str(episode.messages[-1]["content"])

    def _run_tool(self, function: str, arguments: dict[str, Any]) -> str:
        """Run one tool call in the episode. Its result text, or ToolError with the text the policy should
        see."""
        if self.episode_id is None:
            raise ToolError("no episode: reset() did not run")
        body = {"tool_calls": [{"function": function, "args": arguments}]}
        try:
            answer = self._timed("step", self.step_client, f"/v1/episodes/{self.episode_id}/step", body)
        except (
            RewardServiceError
        ) as error:  # refused (e.g. too many calls, an argument too long): the policy's doing
            raise ToolError(error.message) from None
        except RewardServiceUnavailable as error:
            raise ToolError(f"the tool could not be reached: {error}") from None
        (result,) = StepResponse.model_validate(answer).results
        if result.error is not None:
            raise ToolError(result.content)
        return result.content

    def _finish(self, completion: str) -> FinishResponse | None:
        """Close the episode once (later calls return the same result); None when the service cannot score
        it."""
        with self._finish_lock:
            if self._result is None and self.episode_id is not None:
                path = f"/v1/episodes/{self.episode_id}/finish"
                try:
                    self._result = FinishResponse.model_validate(
                        self._timed(
                            "finish", self.client, path, {"completion": completion, "weights": self.weights}
                        )
                    )
                except (RewardServiceError, RewardServiceUnavailable):
                    self._result = None  # left to expire. The rollout's rewards are missing
                self.log.add(self.spec, self._result)
                self.episode_id = None
            return self._result


def environment_class(
    suite: str,
    tools: Sequence[dict[str, Any]],
    client: RewardClient,
    step_client: RewardClient,
    clock: ServiceClock,
    log: EpisodeLog,
    weights: dict[str, float],
) -> type[AgentDojoEnvironment]:
    """A subclass of AgentDojoEnvironment whose public methods are `suite`'s tools."""
    methods = {tool["function"]["name"]: tool_method(tool) for tool in tools}
    clash = sorted(name for name in methods if name in ("reset", "get_reward") or name.startswith("_"))
    if clash:
        raise ValueError(f"{suite}: tools {clash} clash with the environment's own methods")
    attributes = {
        "suite": suite,
        "client": client,
        "step_client": step_client,
        "clock": clock,
        "log": log,
        "weights": weights,
    }
    attributes |= methods
    return type(f"AgentDojo_{suite}", (AgentDojoEnvironment,), attributes)


def last_assistant_text(completion: Any) -> str:
    """The last assistant message's text of a TRL completion (a string, or a list of chat messages)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            return (
                content
                if isinstance(content, str)
                else " ".join(str(part.get("text", "")) for part in content)
            )
    return ""


def reward_column(component: str) -> Callable[..., Any]:
    """TRL reward function `component`: finishes each rollout's episode (once, shared by both columns)."""

    async def column(
        completions: list[Any], environments: list[AgentDojoEnvironment], **_: Any
    ) -> list[float | None]:
        results = await asyncio.gather(
            *(
                asyncio.to_thread(env._finish, last_assistant_text(c))
                for env, c in zip(environments, completions, strict=True)
            )
        )
        return [None if result is None else result.components[component] for result in results]

    column.__name__ = column.__qualname__ = component
    return column
