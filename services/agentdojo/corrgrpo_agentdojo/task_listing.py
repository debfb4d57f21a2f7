"""`GET /v1/tasks`: the catalog of suites, with the user tasks whose checker grants utility to a trajectory
that did no work (found by running the checkers on probe trajectories, not hard-coded)."""

from __future__ import annotations

import asyncio
import pickle

from agentdojo.functions_runtime import TaskEnvironment

from corrgrpo_proto.agentdojo import EpisodeSpec, SuiteTasks, TasksResponse

from . import episode_state as ep
from .catalog import Catalog
from .request_checks import EpisodeError
from .settings import AgentDojoSettings
from .start_environments import StartCache


def number_list(max_chars: int) -> str:
    """'0 1 2 ...', as long as fits in `max_chars`: the probe for checkers that search the answer for a
    number."""
    words, length = [], -1
    while length + 1 + len(str(len(words))) <= max_chars:
        length += 1 + len(str(len(words)))
        words.append(str(len(words)))
    return " ".join(words)


class TaskListing:
    """The suites' tasks and tools with the probes' flags. Each suite is probed once per process."""

    def __init__(self, settings: AgentDojoSettings, catalog: Catalog, starts: StartCache) -> None:
        self.settings, self.catalog, self.starts = settings, catalog, starts
        self._tasks: dict[str, asyncio.Future[SuiteTasks]] = {}

    def _utility_without_work(self, suite: str) -> dict[str, list[str]]:
        """Per probe, the user tasks whose checker grants utility to a trajectory without tool calls: what
        `TrajectoryReplay.replay` gives such a trajectory, with one read-only start environment per distinct
        start."""
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
        """The catalog of `suites` (default: all) with the probes' flags. Each suite is probed once per
        process, off the event loop (banking and slack take milliseconds, workspace a few seconds: its
        checkers diff)."""
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
