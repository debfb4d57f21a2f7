"""Fixtures of the AgentDojo service tests: one catalog, start cache, replayer and live-episode service per
session (agentdojo import is ~2 s)."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest
from agentdojo.functions_runtime import FunctionCall

from corrgrpo_agentdojo.catalog import Catalog, Resolved
from corrgrpo_agentdojo.live_episodes import LiveEpisodes
from corrgrpo_agentdojo.settings import AgentDojoSettings
from corrgrpo_agentdojo.start_environments import StartCache
from corrgrpo_agentdojo.trajectory_replay import TrajectoryReplay
from corrgrpo_common import MemoryStore
from corrgrpo_proto.agentdojo import ToolCall, TrajectoryItem

SETTINGS = AgentDojoSettings()


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog(SETTINGS.agentdojo_version, SETTINGS.agentdojo_attack, SETTINGS.agentdojo_model_name)


@pytest.fixture(scope="session")
def starts() -> StartCache:
    return StartCache(SETTINGS.agentdojo_env_cache_size)


@pytest.fixture(scope="session")
def replayer(catalog: Catalog, starts: StartCache) -> TrajectoryReplay:
    return TrajectoryReplay(SETTINGS, catalog, starts)


@pytest.fixture(scope="session")
def episodes(catalog: Catalog, starts: StartCache) -> LiveEpisodes:
    return LiveEpisodes(SETTINGS, MemoryStore(), catalog, starts)


def calls_of(ground_truth: list[FunctionCall]) -> list[ToolCall]:
    return [ToolCall(function=call.function, args=dict(call.args)) for call in ground_truth]


@pytest.fixture(scope="session")
def ground_truth(starts: StartCache) -> Callable[[Resolved, bool], TrajectoryItem]:
    """`ground_truth(resolved, of_injection)`: the user task's (or the injection task's) ground-truth
    trajectory, computed on the episode's own start environment, with the task's expected answer."""

    def trajectory(resolved: Resolved, of_injection: bool = False) -> TrajectoryItem:
        start = pickle.loads(starts.start_bytes(resolved))
        task = resolved.injection_task if of_injection else resolved.user_task
        assert task is not None
        suite, user, injection, attack = resolved.key
        return TrajectoryItem(
            suite=suite,
            user_task=user,
            injection_task=injection,
            attack=attack,
            tool_calls=calls_of(task.ground_truth(start)),
            final_answer=task.GROUND_TRUTH_OUTPUT,
        )

    return trajectory
