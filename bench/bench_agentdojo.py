"""AgentDojo episode cost per suite, in-process (LiveEpisodes over the in-memory store, TrajectoryReplay; no
HTTP).

For the first (user task, injection task) pair of each suite under `important_instructions`:
the injected start environment built cold, an episode created from the cache, one step per
ground-truth call, finish (checkers), and the stateless replay behind `POST /v1/score`.
Prints a markdown table; `python bench/bench_agentdojo.py`.
"""

from __future__ import annotations

import asyncio
import pickle
import statistics
import time

from corrgrpo_agentdojo.catalog import Catalog
from corrgrpo_agentdojo.live_episodes import LiveEpisodes
from corrgrpo_agentdojo.settings import AgentDojoSettings
from corrgrpo_agentdojo.start_environments import StartCache
from corrgrpo_agentdojo.trajectory_replay import TrajectoryReplay
from corrgrpo_common import MemoryStore
from corrgrpo_proto.agentdojo import EpisodeSpec, FinishRequest, StepRequest, ToolCall, TrajectoryItem

ROUNDS = 5


def ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1e3:.1f}"


async def bench_suite(episodes: LiveEpisodes, replayer: TrajectoryReplay, suite: str) -> str:
    user, injection = episodes.catalog.pairs(suite)[0]
    resolved = episodes.catalog.resolve(suite, user, injection, None)
    spec = EpisodeSpec(suite=suite, user_task=user, injection_task=injection)
    # the attack's canary run, once per user task, is not an episode cost
    episodes.starts.start_bytes(resolved)
    cold, create, step, finish, replay = [], [], [], [], []
    start_env = pickle.loads(episodes.starts.start_bytes(resolved))
    calls = [
        ToolCall(function=c.function, args=dict(c.args)) for c in resolved.user_task.ground_truth(start_env)
    ]
    item = TrajectoryItem(
        **spec.model_dump(), tool_calls=calls, final_answer=resolved.user_task.GROUND_TRUTH_OUTPUT
    )
    for _ in range(ROUNDS):
        t = time.perf_counter()
        StartCache(1).start_bytes(resolved)
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        episode = await episodes.create(spec)
        create.append(time.perf_counter() - t)
        for call in calls:
            t = time.perf_counter()
            await episodes.step(episode.episode_id, StepRequest(tool_calls=[call]))
            step.append(time.perf_counter() - t)
        t = time.perf_counter()
        result = await episodes.finish(episode.episode_id, FinishRequest(final_answer=item.final_answer))
        finish.append(time.perf_counter() - t)
        assert result.components == {"utility": 1.0, "security": 1.0}, result
        t = time.perf_counter()
        replayer.replay(item)
        replay.append(time.perf_counter() - t)
    return (
        f"| {suite} | {len(calls)} | {ms(cold)} | {ms(create)} | {ms(step)} | {ms(finish)} | {ms(replay)} |"
    )


async def main() -> None:
    settings = AgentDojoSettings()
    catalog = Catalog(settings.agentdojo_version, settings.agentdojo_attack, settings.agentdojo_model_name)
    starts = StartCache(settings.agentdojo_env_cache_size)
    episodes = LiveEpisodes(settings, MemoryStore(), catalog, starts)
    replayer = TrajectoryReplay(settings, catalog, starts)
    print(f"first pair of each suite under important_instructions; median of {ROUNDS} rounds, ms\n")
    print("| suite | calls | build env (cold) | create (cached) | step (1 call) | finish | replay (whole) |")
    print("|---|---|---|---|---|---|---|")
    for suite in catalog.suites:
        print(await bench_suite(episodes, replayer, suite), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
