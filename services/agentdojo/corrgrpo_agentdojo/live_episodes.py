"""Live episodes over the Store: create, step, finish. Any replica can serve any step of any episode.

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
import uuid

from corrgrpo_common import Store
from corrgrpo_proto import resolve_weights
from corrgrpo_proto.agentdojo import Episode, EpisodeSpec, FinishRequest, FinishResponse, StepRequest, StepResponse

from . import episode_state as ep
from .catalog import Catalog
from .declaration import COMPONENTS
from .request_checks import EpisodeError, calls_of, check_budget, malformed, resolve_spec
from .settings import AgentDojoSettings
from .start_environments import StartCache
from .tool_calls import read_completion

PREFIX = "corrgrpo:agentdojo:episode:"
LIVE = "{corrgrpo:agentdojo:live}:"  # the quota groups share one Redis Cluster hash slot: a lease checks both at once
LOCK_TTL_S = 60


class LiveEpisodes:
    def __init__(self, settings: AgentDojoSettings, store: Store, catalog: Catalog, starts: StartCache) -> None:
        self.settings, self.store, self.catalog, self.starts = settings, store, catalog, starts

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
        resolved, normal = resolve_spec(self.catalog, spec)
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
        max_arg_chars = self.settings.agentdojo_max_arg_chars  # a completion can be megabytes: read off the loop
        calls, answer, broken = await asyncio.to_thread(calls_of, request, max_arg_chars)
        await self._locked(episode_id)
        try:
            state = await self._load(episode_id)
            check_budget(len(state.trace) + len(calls), self.settings.agentdojo_max_tool_calls)
            if broken is not None:
                ep.mark_invalid(state, broken)
            resolved, _ = resolve_spec(self.catalog, state.spec)
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
            resolved, _ = resolve_spec(self.catalog, state.spec)
            max_chars = self.settings.agentdojo_max_answer_chars
            components, info = await asyncio.to_thread(ep.score, state, resolved, final_answer, max_chars)
            tombstone = json.dumps({"components": components, "info": info}).encode()
            await self.store.set(PREFIX + episode_id, tombstone, self.settings.agentdojo_episode_ttl_s)
            await self.store.release(episode_id, list(self._quota(state.owner)))
        finally:
            await self.store.delete(PREFIX + episode_id + ":lock")
        total = sum(weights[name] * value for name, value in components.items())
        return FinishResponse(episode_id=episode_id, components=components, total=total, info=info)
