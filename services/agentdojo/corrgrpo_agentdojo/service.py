"""Episodes over the Store: what the routes call. Any replica can serve any step of any episode.

An episode's state lives under `corrgrpo:agentdojo:episode:<id>` with a TTL renewed on each step;
a finished episode leaves a small tombstone (with its rewards) for the same TTL, so a late step
gets 409 "finished" instead of 404 "unknown". A step holds a short lock key so two concurrent
steps of one episode cannot both apply to the same state and lose one's calls.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass

from corrgrpo_proto import ItemError
from corrgrpo_proto.agentdojo import (
    Episode,
    EpisodeSpec,
    FinishResponse,
    StepResponse,
    SuiteTasks,
    TasksResponse,
    ToolCall,
    TrajectoryItem,
)
from corrgrpo_service import Scored, Store

from . import episode as ep
from .catalog import Catalog, Resolved, UnknownTask
from .environments import StartCache
from .settings import AgentDojoSettings

PREFIX = "corrgrpo:agentdojo:episode:"
LOCK_TTL_S = 60


@dataclass
class EpisodeError(Exception):
    """A request the service refuses: HTTP status, machine-readable code, message."""

    status: int
    code: str
    message: str


class EpisodeService:
    def __init__(self, settings: AgentDojoSettings, store: Store) -> None:
        self.settings, self.store = settings, store
        self.catalog = Catalog(settings.agentdojo_version, settings.agentdojo_attack, settings.agentdojo_model_name)
        self.starts = StartCache(settings.env_cache_size)

    def tasks(self) -> TasksResponse:
        suites = {
            name: SuiteTasks(user_tasks=list(suite.user_tasks), injection_tasks=list(suite.injection_tasks))
            for name, suite in self.catalog.suites.items()
        }
        return TasksResponse(
            benchmark_version=self.catalog.version,
            default_attack=self.catalog.default_attack,
            attacks=self.catalog.attacks,
            suites=suites,
        )

    def _resolve(self, spec: EpisodeSpec) -> tuple[Resolved, EpisodeSpec]:
        try:
            resolved = self.catalog.resolve(spec.suite, spec.user_task, spec.injection_task, spec.attack)
        except UnknownTask as error:
            raise EpisodeError(422, "unknown_task", str(error)) from error
        suite, user, injection, attack = resolved.key
        return resolved, EpisodeSpec(suite=suite, user_task=user, injection_task=injection, attack=attack)

    def _check_budget(self, calls: int) -> None:
        if calls > self.settings.max_tool_calls:
            limit = self.settings.max_tool_calls
            raise EpisodeError(422, "too_many_tool_calls", f"{calls} tool calls exceed the limit of {limit} per episode")

    # -- stateful episodes ------------------------------------------------------------------------

    async def create(self, spec: EpisodeSpec) -> Episode:
        resolved, normal = self._resolve(spec)
        start = await asyncio.to_thread(self.starts.start_bytes, resolved)
        state = ep.start_episode(normal, start)
        episode_id = uuid.uuid4().hex
        await self.store.set(PREFIX + episode_id, ep.dumps(state), self.settings.episode_ttl_s)
        return Episode(
            episode_id=episode_id,
            **normal.model_dump(),
            messages=ep.initial_messages(resolved),
            tools=ep.tool_schemas(resolved.suite),
        )

    async def _load(self, episode_id: str) -> ep.EpisodeState:
        blob = await self.store.get(PREFIX + episode_id)
        if blob is None:
            ttl = self.settings.episode_ttl_s
            message = f"episode {episode_id!r} is unknown or expired (episodes expire {ttl}s after their last step)"
            raise EpisodeError(404, "unknown_episode", message)
        if blob.startswith(b"{"):
            raise EpisodeError(409, "episode_finished", f"episode {episode_id!r} is finished: {blob.decode()}")
        return ep.loads(blob)

    async def _locked(self, episode_id: str) -> None:
        if not await self.store.add(PREFIX + episode_id + ":lock", b"1", LOCK_TTL_S):
            message = f"another step or finish of episode {episode_id!r} is in progress; retry after it"
            raise EpisodeError(409, "episode_busy", message)

    async def step(self, episode_id: str, calls: list[ToolCall]) -> StepResponse:
        await self._locked(episode_id)
        try:
            state = await self._load(episode_id)
            self._check_budget(len(state.trace) + len(calls))
            resolved, _ = self._resolve(state.spec)
            results = await asyncio.to_thread(ep.run_calls, state, resolved.suite, calls)
            await self.store.set(PREFIX + episode_id, ep.dumps(state), self.settings.episode_ttl_s)
        finally:
            await self.store.delete(PREFIX + episode_id + ":lock")
        return StepResponse(episode_id=episode_id, results=results, tool_calls_so_far=len(state.trace))

    async def finish(self, episode_id: str, final_answer: str) -> FinishResponse:
        await self._locked(episode_id)
        try:
            state = await self._load(episode_id)
            resolved, _ = self._resolve(state.spec)
            components, info = await asyncio.to_thread(ep.score, state, resolved, final_answer)
            tombstone = json.dumps({"components": components, "info": info}).encode()
            await self.store.set(PREFIX + episode_id, tombstone, self.settings.episode_ttl_s)
        finally:
            await self.store.delete(PREFIX + episode_id + ":lock")
        return FinishResponse(episode_id=episode_id, components=components, total=sum(components.values()), info=info)

    # -- stateless replay -------------------------------------------------------------------------

    def replay(self, item: TrajectoryItem) -> Scored | ItemError:
        """Run a whole trajectory in a fresh copy of its start environment and score it."""
        try:
            resolved, normal = self._resolve(item)
            self._check_budget(len(item.tool_calls))
        except EpisodeError as error:
            return ItemError(code=error.code, message=error.message)
        state = ep.start_episode(normal, self.starts.start_bytes(resolved))
        results = ep.run_calls(state, resolved.suite, item.tool_calls)
        components, info = ep.score(state, resolved, item.final_answer)
        info["tool_errors"] = sum(r.error is not None for r in results)
        info["attack"] = normal.attack
        return Scored(components=components, info=info)

    async def score_items(self, items: list[TrajectoryItem]) -> list[Scored | ItemError]:
        return await asyncio.to_thread(lambda: [self.replay(item) for item in items])
