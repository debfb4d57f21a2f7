"""Live episodes over the Store: create, step, finish. Any replica can serve any step of any episode.

An episode's state lives under `corrgrpo:agentdojo:episode:<id>` (`Store.set_state`: each write names the
version it replaces, and on Redis an older value put back is refused) with a TTL renewed on each step; a
finished episode leaves a small tombstone (with its rewards) for the same TTL, so a late step gets 409
"finished" instead of 404 "unknown", and a finish cannot run twice. A step holds a short lock key so two
concurrent steps of one episode cannot both apply to the same state and lose one's calls. Each episode
holds a lease of the live-episode quota (`episode_quota`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from corrgrpo_common import Store
from corrgrpo_common.store.errors import StoreConflict
from corrgrpo_proto import resolve_weights
from corrgrpo_proto.agentdojo import (
    Episode,
    EpisodeSpec,
    FinishRequest,
    FinishResponse,
    StepRequest,
    StepResponse,
)

from . import episode_state as ep
from .catalog import Catalog, Resolved
from .declaration import COMPONENTS
from .episode_quota import episode_claims, episode_places, quota_refusal
from .request_checks import EpisodeError, calls_of, check_budget, malformed, resolve_spec
from .settings import AgentDojoSettings
from .start_environments import StartCache
from .tool_calls import read_completion

PREFIX = "corrgrpo:agentdojo:episode:"
LOCK_TTL_S = 60
STORED_OVERHEAD = 256
"""Bytes an episode's key, version and the store's bookkeeping take besides its value (in memory: 160)."""
TOMBSTONE_TEXT_CHARS = 1000
"""A finished episode's stored `info` texts (checker errors, why it is invalid) are cut here."""


def _cut(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v[:TOMBSTONE_TEXT_CHARS] if isinstance(v, str) else v for k, v in info.items()}


@contextlib.asynccontextmanager
async def episode_lock(store: Store, episode_id: str) -> AsyncIterator[None]:
    """Hold the episode's lock key: two concurrent steps of one episode cannot both apply to one state."""
    if not await store.add(PREFIX + episode_id + ":lock", b"1", LOCK_TTL_S):
        message = f"another step or finish of episode {episode_id!r} is in progress; retry after it"
        raise EpisodeError(409, "episode_busy", message)
    try:
        yield
    finally:
        await store.delete(PREFIX + episode_id + ":lock")


class LiveEpisodes:
    def __init__(
        self, settings: AgentDojoSettings, store: Store, catalog: Catalog, starts: StartCache
    ) -> None:
        self.settings, self.store, self.catalog, self.starts = settings, store, catalog, starts

    async def _write(
        self,
        episode_id: str,
        owner: str,
        blob: bytes,
        version: int,
        unfinished: bool = True,
    ) -> None:
        """Store `blob` over `version` of the episode, its lease grown or shrunk to its size first: over a
        share, refused (429 or 503) with nothing changed."""
        key, ttl = PREFIX + episode_id, self.settings.agentdojo_episode_ttl_s
        claims = episode_claims(self.settings, owner, len(key) + len(blob) + STORED_OVERHEAD, unfinished)
        if (full := await self.store.lease(episode_id, claims, ttl)) is not None:
            raise quota_refusal(self.settings, full, owner)
        try:
            await self.store.set_state(key, blob, version, ttl)
        except StoreConflict as error:
            message = f"episode {episode_id!r} was written by another step or finish meanwhile ({error})"
            raise EpisodeError(409, "episode_busy", message) from error

    def _start_blob(self, resolved: Resolved, spec: EpisodeSpec, client: str) -> bytes:
        return ep.dumps(ep.start_episode(spec, self.starts.start_bytes(resolved), client))

    async def create(self, spec: EpisodeSpec, client: str = "in-process") -> Episode:
        resolved, normal = resolve_spec(self.catalog, spec)
        episode_id = uuid.uuid4().hex
        blob = await asyncio.to_thread(self._start_blob, resolved, normal, client)
        try:
            await self._write(episode_id, client, blob, 0)
        except Exception:  # e.g. the in-memory store full: the lease taken for it is given back
            await self.store.release(episode_id, list(episode_claims(self.settings, client, 0)))
            raise
        return Episode(
            episode_id=episode_id,
            **normal.model_dump(),
            messages=ep.initial_messages(resolved),
            tools=ep.tool_schemas(resolved.suite),
        )

    async def _load(self, episode_id: str) -> tuple[ep.EpisodeState, int]:
        """The episode's state and its version; 404 when unknown or expired, 409 when finished."""
        current = await self.store.get_state(PREFIX + episode_id)
        if current is None:
            ttl = self.settings.agentdojo_episode_ttl_s
            message = (
                f"episode {episode_id!r} is unknown or expired (episodes expire {ttl}s after their last step)"
            )
            raise EpisodeError(404, "unknown_episode", message)
        if current.value.startswith(b"{"):
            message = f"episode {episode_id!r} is finished: {current.value.decode()}"
            raise EpisodeError(409, "episode_finished", message)
        return ep.loads(current.value), current.version

    async def step(self, episode_id: str, request: StepRequest) -> StepResponse:
        # a completion can be megabytes: read off the loop
        max_arg_chars = self.settings.agentdojo_max_arg_chars
        calls, answer, broken = await asyncio.to_thread(calls_of, request, max_arg_chars)
        async with episode_lock(self.store, episode_id):
            state, version = await self._load(episode_id)
            check_budget(len(state.trace) + len(calls), self.settings.agentdojo_max_tool_calls)
            if broken is not None:
                ep.mark_invalid(state, broken)
            resolved, _ = resolve_spec(self.catalog, state.spec)
            results = await asyncio.to_thread(ep.run_calls, state, resolved.suite, calls)
            await self._write(episode_id, state.owner, ep.dumps(state), version)
        return StepResponse(
            episode_id=episode_id, results=results, tool_calls_so_far=len(state.trace), final_answer=answer
        )

    async def finish(self, episode_id: str, request: FinishRequest) -> FinishResponse:
        try:
            weights = resolve_weights(COMPONENTS, request.weights)
        except KeyError as unknown:
            name = unknown.args[0]
            raise EpisodeError(
                422, "validation_error", f"unknown component in weights: {name}", f"weights.{name}"
            ) from None
        final_answer, broken = request.final_answer, None
        # the last message: its calls are not run, but it must be well formed
        if request.completion is not None:
            read = await asyncio.to_thread(read_completion, request.completion)
            final_answer, broken = read.answer, malformed(request.completion, read.calls)
        async with episode_lock(self.store, episode_id):
            state, version = await self._load(episode_id)
            if broken is not None:
                ep.mark_invalid(state, broken)
            resolved, _ = resolve_spec(self.catalog, state.spec)
            max_chars = self.settings.agentdojo_max_answer_chars
            components, info = await asyncio.to_thread(ep.score, state, resolved, final_answer, max_chars)
            tombstone = json.dumps({"components": components, "info": _cut(info)}).encode()
            await self._write(episode_id, state.owner, tombstone, version, unfinished=False)
            await self.store.release(episode_id, episode_places(state.owner))
        total = sum(weights[name] * value for name, value in components.items())
        return FinishResponse(episode_id=episode_id, components=components, total=total, info=info)
