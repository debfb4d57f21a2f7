"""AgentDojo episode cost per suite, in-process (EpisodeService over the in-memory store, no HTTP).

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

from corrgrpo_agentdojo.episode_service import EpisodeService
from corrgrpo_agentdojo.settings import AgentDojoSettings
from corrgrpo_agentdojo.start_environments import StartCache
from corrgrpo_common import MemoryStore
from corrgrpo_proto.agentdojo import EpisodeSpec, FinishRequest, StepRequest, ToolCall, TrajectoryItem

ROUNDS = 5


def ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1e3:.1f}"


async def bench_suite(service: EpisodeService, suite: str) -> str:
    user, injection = service.catalog.pairs(suite)[0]
    resolved = service.catalog.resolve(suite, user, injection, None)
    spec = EpisodeSpec(suite=suite, user_task=user, injection_task=injection)
    service.starts.start_bytes(resolved)  # the attack's canary run, once per user task, is not an episode cost
    cold, create, step, finish, replay = [], [], [], [], []
    start_env = pickle.loads(service.starts.start_bytes(resolved))
    calls = [ToolCall(function=c.function, args=dict(c.args)) for c in resolved.user_task.ground_truth(start_env)]
    item = TrajectoryItem(**spec.model_dump(), tool_calls=calls, final_answer=resolved.user_task.GROUND_TRUTH_OUTPUT)
    for _ in range(ROUNDS):
        t = time.perf_counter()
        StartCache(1).start_bytes(resolved)
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        episode = await service.create(spec)
        create.append(time.perf_counter() - t)
        for call in calls:
            t = time.perf_counter()
            await service.step(episode.episode_id, StepRequest(tool_calls=[call]))
            step.append(time.perf_counter() - t)
        t = time.perf_counter()
        result = await service.finish(episode.episode_id, FinishRequest(final_answer=item.final_answer))
        finish.append(time.perf_counter() - t)
        assert result.components == {"utility": 1.0, "security": 1.0}, result
        t = time.perf_counter()
        service.replay(item)
        replay.append(time.perf_counter() - t)
    return f"| {suite} | {len(calls)} | {ms(cold)} | {ms(create)} | {ms(step)} | {ms(finish)} | {ms(replay)} |"


async def main() -> None:
    service = EpisodeService(AgentDojoSettings(), MemoryStore())
    print(f"first pair of each suite under important_instructions; median of {ROUNDS} rounds, ms\n")
    print("| suite | calls | build env (cold) | create (cached) | step (1 call) | finish | replay (whole) |")
    print("|---|---|---|---|---|---|---|")
    for suite in service.catalog.suites:
        print(await bench_suite(service, suite), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
