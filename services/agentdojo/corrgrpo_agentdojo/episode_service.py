"""Episodes over the Store: what the routes call. Any replica can serve any step of any episode.

An episode's state lives under `corrgrpo:agentdojo:episode:<id>` with a TTL renewed on each step;
a finished episode leaves a small tombstone (with its rewards) for the same TTL, so a late step
gets 409 "finished" instead of 404 "unknown". A step holds a short lock key so two concurrent
steps of one episode cannot both apply to the same state and lose one's calls.

An unfinished episode holds a lease in its client's group and in the group of all (`Store.lease`),
so one client filling the store cannot lock the others out: over its share it gets 429, and what it
abandons idles out after `agentdojo_episode_ttl_s`, freeing its share.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from agentdojo.functions_runtime import TaskEnvironment

from corrgrpo_common import Scored, Store
from corrgrpo_proto import ItemError, resolve_weights
from corrgrpo_proto.agentdojo import (
    Episode,
    EpisodeSpec,
    FinishRequest,
    FinishResponse,
    StepRequest,
    StepResponse,
    SuiteTasks,
    TasksResponse,
    ToolCall,
    TrajectoryItem,
)

from . import episode_state as ep
from .catalog import Catalog, Resolved, UnknownTask
from .declaration import COMPONENTS
from .settings import AgentDojoSettings
from .start_environments import StartCache
from .tool_calls import ToolCallError, read_completion

PREFIX = "corrgrpo:agentdojo:episode:"
LIVE = "{corrgrpo:agentdojo:live}:"  # the quota groups share one Redis Cluster hash slot: a lease checks both at once
LOCK_TTL_S = 60
log = logging.getLogger("corrgrpo.agentdojo")


@dataclass
class EpisodeError(Exception):
    """A request the service refuses: HTTP status, machine-readable code, message, the offending field's path."""

    status: int
    code: str
    message: str
    loc: str | None = None
    retry_after_s: int | None = None


def malformed(completion: str, calls: Sequence[ToolCall | ToolCallError]) -> str | None:
    """Why one generated message breaks the authors' format check (every `<tool_call>` closed and read), or None."""
    opened, closed = completion.count("<tool_call>"), completion.count("</tool_call>")
    if opened != closed:
        return f"{opened} <tool_call> but {closed} </tool_call> tags"
    unreadable = next((call for call in calls if isinstance(call, ToolCallError)), None)
    return None if unreadable is None else f"ToolCallError: {unreadable}"


def number_list(max_chars: int) -> str:
    """'0 1 2 ...', as long as fits in `max_chars`: the probe for checkers that search the answer for a number."""
    words, length = [], -1
    while length + 1 + len(str(len(words))) <= max_chars:
        length += 1 + len(str(len(words)))
        words.append(str(len(words)))
    return " ".join(words)


class EpisodeService:
    def __init__(self, settings: AgentDojoSettings, store: Store) -> None:
        self.settings, self.store = settings, store
        self.catalog = Catalog(settings.agentdojo_version, settings.agentdojo_attack, settings.agentdojo_model_name)
        self.starts = StartCache(settings.agentdojo_env_cache_size)
        self._tasks: dict[str, asyncio.Future[SuiteTasks]] = {}

    def _utility_without_work(self, suite: str) -> dict[str, list[str]]:
        """Per probe, the user tasks whose checker grants utility to a trajectory without tool calls: what
        `replay` gives such a trajectory, with one read-only start environment per distinct start."""
        max_chars = self.settings.agentdojo_max_answer_chars
        probes = {"empty": "", "number_list": number_list(max_chars)}
        found: dict[str, list[str]] = {}
        starts: dict[bytes, TaskEnvironment] = {}
        for user_task in self.catalog.suites[suite].user_tasks:
            resolved = self.catalog.resolve(suite, user_task, None, None)
            start = self.starts.start_bytes(resolved)
            pre = starts[start] if start in starts else starts.setdefault(start, pickle.loads(start))
            for probe, answer in probes.items():
                state = ep.start_episode(EpisodeSpec(suite=suite, user_task=user_task), start)
                components, _ = ep.score(state, resolved, answer, max_chars, pre=pre)
                if components["utility"] == 1:
                    found.setdefault(probe, []).append(user_task)
        return found

    def _suite_tasks(self, name: str) -> SuiteTasks:
        suite = self.catalog.suites[name]
        return SuiteTasks(
            user_tasks=list(suite.user_tasks),
            injection_tasks=list(suite.injection_tasks),
            tools=ep.tool_schemas(suite),
            utility_without_work=self._utility_without_work(name),
        )

    async def tasks(self, suites: list[str] | None = None) -> TasksResponse:
        """The catalog of `suites` (default: all) with the probes' flags; each suite is probed once per process,
        off the event loop (banking and slack take milliseconds, workspace a few seconds: its checkers diff)."""
        names = suites or sorted(self.catalog.suites)
        unknown = sorted(set(names) - set(self.catalog.suites))
        if unknown:
            known = ", ".join(sorted(self.catalog.suites))
            raise EpisodeError(422, "unknown_task", f"unknown suite {unknown[0]!r}; known: {known}", "suite")
        for name in names:
            task = self._tasks.get(name)
            if task is None or (task.done() and task.exception() is not None):
                self._tasks[name] = asyncio.ensure_future(asyncio.to_thread(self._suite_tasks, name))
        listed = await asyncio.gather(*(asyncio.shield(self._tasks[name]) for name in names))
        return TasksResponse(
            benchmark_version=self.catalog.version,
            default_attack=self.catalog.default_attack,
            attacks=self.catalog.attacks,
            system_message=ep.system_message(),
            max_answer_chars=self.settings.agentdojo_max_answer_chars,
            suites=dict(zip(names, listed, strict=True)),
        )

    def _resolve(self, spec: EpisodeSpec) -> tuple[Resolved, EpisodeSpec]:
        try:
            resolved = self.catalog.resolve(spec.suite, spec.user_task, spec.injection_task, spec.attack)
        except UnknownTask as error:
            raise EpisodeError(422, "unknown_task", str(error)) from error
        suite, user, injection, attack = resolved.key
        return resolved, EpisodeSpec(suite=suite, user_task=user, injection_task=injection, attack=attack)

    def _check_budget(self, calls: int) -> None:
        if calls > self.settings.agentdojo_max_tool_calls:
            limit = self.settings.agentdojo_max_tool_calls
            raise EpisodeError(422, "too_many_tool_calls", f"{calls} tool calls exceed the limit of {limit} per episode")

    def _check_arguments(self, calls: Sequence[ToolCall | ToolCallError], where: str) -> None:
        """422 with the argument's path when one is longer than `agentdojo_max_arg_chars` (as JSON)."""
        limit = self.settings.agentdojo_max_arg_chars
        for index, call in enumerate(calls):
            if isinstance(call, ToolCallError):
                continue
            for name, value in call.args.items():
                size = len(value) if isinstance(value, str) else len(json.dumps(value))
                if size > limit:
                    loc = f"{where}.{index}.args.{name}"
                    raise EpisodeError(422, "argument_too_long", f"{loc}: {size} chars, the limit is {limit}", loc)

    def _calls_of(self, request: StepRequest | TrajectoryItem) -> tuple[list[ToolCall | ToolCallError], str | None, str | None]:
        """The request's calls (read from its raw `completion` when it has one), that completion's answer and why it
        is malformed (`malformed`; unknown tools are found when the calls run)."""
        if request.completion is None:
            calls: list[ToolCall | ToolCallError] = list(request.tool_calls or [])
            self._check_arguments(calls, "tool_calls")
            return calls, None, None
        read = read_completion(request.completion)
        self._check_arguments(read.calls, "completion.tool_calls")
        return read.calls, read.answer, malformed(request.completion, read.calls)

    # -- stateful episodes ------------------------------------------------------------------------

    def _quota(self, client: str) -> dict[str, int]:
        """The lease groups of `client`'s episodes with their caps: its own first, so a client over its share is told so."""
        settings = self.settings
        return {
            LIVE + f"client:{client}": settings.agentdojo_max_live_episodes_per_client,
            LIVE + "all": settings.agentdojo_max_live_episodes,
        }

    def _refusal(self, full: str, client: str) -> EpisodeError:
        settings = self.settings
        idle = f"finish one, or one idles out {settings.agentdojo_episode_ttl_s}s after its last step"
        if full == LIVE + "all":
            message = f"the service holds {settings.agentdojo_max_live_episodes} unfinished episodes; retry when one ends"
            return EpisodeError(503, "episodes_full", message, retry_after_s=settings.retry_after_s)
        limit = settings.agentdojo_max_live_episodes_per_client
        message = f"client {client} holds {limit} unfinished episodes, its share: {idle}"
        return EpisodeError(429, "too_many_episodes", message, retry_after_s=settings.retry_after_s)

    async def create(self, spec: EpisodeSpec, client: str = "in-process") -> Episode:
        resolved, normal = self._resolve(spec)
        episode_id, quota, ttl = uuid.uuid4().hex, self._quota(client), self.settings.agentdojo_episode_ttl_s
        if (full := await self.store.lease(episode_id, quota, ttl)) is not None:
            raise self._refusal(full, client)
        try:
            start = await asyncio.to_thread(self.starts.start_bytes, resolved)
            await self.store.set(PREFIX + episode_id, ep.dumps(ep.start_episode(normal, start, client)), ttl)
        except Exception:
            await self.store.release(episode_id, list(quota))
            raise
        return Episode(
            episode_id=episode_id,
            **normal.model_dump(),
            messages=ep.initial_messages(resolved),
            tools=ep.tool_schemas(resolved.suite),
        )

    async def _load(self, episode_id: str) -> ep.EpisodeState:
        blob = await self.store.get(PREFIX + episode_id)
        if blob is None:
            ttl = self.settings.agentdojo_episode_ttl_s
            message = f"episode {episode_id!r} is unknown or expired (episodes expire {ttl}s after their last step)"
            raise EpisodeError(404, "unknown_episode", message)
        if blob.startswith(b"{"):
            raise EpisodeError(409, "episode_finished", f"episode {episode_id!r} is finished: {blob.decode()}")
        return ep.loads(blob)

    async def _locked(self, episode_id: str) -> None:
        if not await self.store.add(PREFIX + episode_id + ":lock", b"1", LOCK_TTL_S):
            message = f"another step or finish of episode {episode_id!r} is in progress; retry after it"
            raise EpisodeError(409, "episode_busy", message)

    async def step(self, episode_id: str, request: StepRequest) -> StepResponse:
        calls, answer, broken = await asyncio.to_thread(self._calls_of, request)  # a completion can be megabytes: off the loop
        await self._locked(episode_id)
        try:
            state = await self._load(episode_id)
            self._check_budget(len(state.trace) + len(calls))
            if broken is not None:
                ep.mark_invalid(state, broken)
            resolved, _ = self._resolve(state.spec)
            results = await asyncio.to_thread(ep.run_calls, state, resolved.suite, calls)
            ttl = self.settings.agentdojo_episode_ttl_s
            await self.store.set(PREFIX + episode_id, ep.dumps(state), ttl)
            await self.store.renew(episode_id, list(self._quota(state.owner)), ttl)
        finally:
            await self.store.delete(PREFIX + episode_id + ":lock")
        return StepResponse(episode_id=episode_id, results=results, tool_calls_so_far=len(state.trace), final_answer=answer)

    async def finish(self, episode_id: str, request: FinishRequest) -> FinishResponse:
        try:
            weights = resolve_weights(COMPONENTS, request.weights)
        except KeyError as unknown:
            name = unknown.args[0]
            raise EpisodeError(422, "validation_error", f"unknown component in weights: {name}", f"weights.{name}") from None
        final_answer, broken = request.final_answer, None
        if request.completion is not None:  # the last message: its calls are not run, but it must be well formed
            read = await asyncio.to_thread(read_completion, request.completion)
            final_answer, broken = read.answer, malformed(request.completion, read.calls)
        await self._locked(episode_id)
        try:
            state = await self._load(episode_id)
            if broken is not None:
                ep.mark_invalid(state, broken)
            resolved, _ = self._resolve(state.spec)
            max_chars = self.settings.agentdojo_max_answer_chars
            components, info = await asyncio.to_thread(ep.score, state, resolved, final_answer, max_chars)
            tombstone = json.dumps({"components": components, "info": info}).encode()
            await self.store.set(PREFIX + episode_id, tombstone, self.settings.agentdojo_episode_ttl_s)
            await self.store.release(episode_id, list(self._quota(state.owner)))
        finally:
            await self.store.delete(PREFIX + episode_id + ":lock")
        total = sum(weights[name] * value for name, value in components.items())
        return FinishResponse(episode_id=episode_id, components=components, total=total, info=info)

    # -- stateless replay -------------------------------------------------------------------------

    def replay(self, item: TrajectoryItem) -> Scored | ItemError:
        """Run a whole trajectory in a fresh copy of its start environment and score it."""
        try:
            resolved, normal = self._resolve(item)
            calls, answer, broken = self._calls_of(item)
            self._check_budget(len(calls))
        except EpisodeError as error:
            return ItemError(code=error.code, message=error.message)
        state = ep.start_episode(normal, self.starts.start_bytes(resolved))
        if broken is not None:
            ep.mark_invalid(state, broken)
        results = ep.run_calls(state, resolved.suite, calls)
        final_answer = item.final_answer if answer is None else answer
        components, info = ep.score(state, resolved, final_answer, self.settings.agentdojo_max_answer_chars)
        info["tool_errors"] = sum(r.error is not None for r in results)
        info["attack"] = normal.attack
        return Scored(components=components, info=info)

    def _replay_alone(self, item: TrajectoryItem) -> Scored | ItemError:
        """One item's fault stays that item's: an infrastructure error here never reaches its batch neighbours."""
        try:
            return self.replay(item)
        except Exception as error:
            log.exception("replay failed", extra={"suite": item.suite, "user_task": item.user_task})
            return ItemError(code="internal", message=f"{type(error).__name__}: {error}")

    async def score_items(self, items: list[TrajectoryItem]) -> list[Scored | ItemError]:
        return await asyncio.to_thread(lambda: [self._replay_alone(item) for item in items])
