"""`POST /v1/score`: stateless replay of whole trajectories, each in a fresh copy of its start environment."""

from __future__ import annotations

import asyncio
import logging

from corrgrpo_common import Scored
from corrgrpo_proto import ItemError
from corrgrpo_proto.agentdojo import TrajectoryItem

from . import episode_state as ep
from .catalog import Catalog
from .request_checks import EpisodeError, calls_of, check_budget, resolve_spec
from .settings import AgentDojoSettings
from .start_environments import StartCache

log = logging.getLogger("corrgrpo.agentdojo")


class TrajectoryReplay:
    def __init__(self, settings: AgentDojoSettings, catalog: Catalog, starts: StartCache) -> None:
        self.settings, self.catalog, self.starts = settings, catalog, starts

    def replay(self, item: TrajectoryItem) -> Scored | ItemError:
        """Run a whole trajectory in a fresh copy of its start environment and score it."""
        try:
            resolved, normal = resolve_spec(self.catalog, item)
            calls, answer, broken = calls_of(item, self.settings.agentdojo_max_arg_chars)
            check_budget(len(calls), self.settings.agentdojo_max_tool_calls)
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
        """One item's fault stays that item's: an infrastructure error here never reaches its batch
        neighbours."""
        try:
            return self.replay(item)
        except Exception as error:
            log.exception("replay failed", extra={"suite": item.suite, "user_task": item.user_task})
            return ItemError(code="internal", message=f"{type(error).__name__}: {error}")

    async def score_items(self, items: list[TrajectoryItem]) -> list[Scored | ItemError]:
        return await asyncio.to_thread(lambda: [self._replay_alone(item) for item in items])
