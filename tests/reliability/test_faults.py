"""Faults during scoring: Redis killed and restarted, a code replica SIGKILLed mid-batch (in each of
SANDBOX_SHAPES: the store is the service's, the same in every shape)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis

from corrgrpo_proto.client import AsyncRewardClient
from corrgrpo_testing.redis_server import ThrowawayRedis
from corrgrpo_testing.servers import free_port, start_service
from corrgrpo_testing.shapes import code_service

from .helpers import PROBLEM, SANDBOX_SHAPES, valid_item


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def cached_keys(url: str, service: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return sum(1 for _ in client.scan_iter(f"corrgrpo:{service}:score:*"))
    finally:
        client.close()


def deterministic(result: dict[str, Any]) -> dict[str, float]:
    """The components that do not depend on a timing (code's `efficiency` is measured anew)."""
    return {k: v for k, v in result["components"].items() if k != "efficiency"}


@pytest.mark.parametrize("name", ["toolcall", "code"])
def test_redis_killed_and_restarted_during_scoring(
    name: str, throwaway_redis: ThrowawayRedis, http: httpx.Client
) -> None:
    with start_service(name, env={"CORRGRPO_REDIS_URL": throwaway_redis.url}) as service:

        def score(tag: str) -> list[dict[str, Any]]:
            items = [{**valid_item(service), "id": f"{tag}-{i}"} for i in range(4)]
            response = http.post(f"{service.url}/v1/score", json={"items": items})
            assert response.status_code == 200, response.text
            results = response.json()["results"]
            assert [r["id"] for r in results] == [i["id"] for i in items]
            assert all(r["error"] is None for r in results), results
            return results

        baseline = score("before")
        assert cached_keys(throwaway_redis.url, name) == 4
        throwaway_redis.kill()
        assert http.get(f"{service.url}/readyz").status_code == 503
        during = score("during")  # answered from memory; the idempotency cache is skipped
        assert [deterministic(r) for r in during] == [deterministic(r) for r in baseline]
        throwaway_redis.start()  # same port, empty (no persistence)
        wait_for(lambda: http.get(f"{service.url}/readyz").status_code == 200)
        score("after")
        assert cached_keys(throwaway_redis.url, name) == 4  # the cache works again without a restart
        assert service.process.poll() is None


SLOW_ADD = "```python\nimport time\n\ndef add(a, b):\n    time.sleep(0.2)\n    return a + b\n```"


@pytest.mark.parametrize("shape", SANDBOX_SHAPES)
async def test_code_replica_sigkilled_mid_batch_client_retries_same_url(
    shape: str, http: httpx.Client
) -> None:
    port = free_port()
    env = {"CORRGRPO_CODE_WORKERS": "2"}
    items = [
        {"completion": SLOW_ADD, "problem": PROBLEM, "id": f"item-{i}-{uuid.uuid4().hex[:6]}"}
        for i in range(12)
    ]
    with ExitStack() as stack:
        first = stack.enter_context(code_service(shape, env, port))
        async with AsyncRewardClient(
            first.url, chunk_size=2, max_concurrency=2, retries=20, backoff=0.2, max_backoff=1
        ) as client:
            batch = asyncio.create_task(client.score(items))
            while (
                'corrgrpo_inflight_items{service="code"} 0.0'
                in (await asyncio.to_thread(http.get, f"{first.url}/metrics")).text
            ):
                await asyncio.sleep(0.02)  # wait until the replica is scoring
            os.killpg(first.process.pid, signal.SIGKILL)
            first.process.wait(10)
            assert not batch.done()
            await asyncio.to_thread(stack.enter_context, code_service(shape, env, port))
            results = await asyncio.wait_for(batch, 120)
    assert [r.id for r in results] == [i["id"] for i in items]  # every item once, in order
    assert all(
        r.error is None and r.components is not None and r.components["correct"] == 1.0 for r in results
    ), results


def test_agentdojo_episode_after_redis_restart_is_a_clear_error(
    throwaway_redis: ThrowawayRedis, http: httpx.Client
) -> None:
    """Episode state lives only in Redis: down → 503, restarted empty → 404, never a reward from lost
    state."""
    with start_service("agentdojo", env={"CORRGRPO_REDIS_URL": throwaway_redis.url}) as service:
        spec = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_0"}
        created = http.post(f"{service.url}/v1/episodes", json=spec)
        assert created.status_code == 200, created.text
        episode = created.json()["episode_id"]
        step = {"tool_calls": [{"function": "get_most_recent_transactions", "args": {"n": 5}}]}
        assert http.post(f"{service.url}/v1/episodes/{episode}/step", json=step).status_code == 200
        throwaway_redis.kill()
        down = http.post(f"{service.url}/v1/episodes/{episode}/step", json=step)
        assert down.status_code == 503 and down.json()["message"], down.text
        throwaway_redis.start()  # same port, empty: the episode is gone
        wait_for(lambda: http.get(f"{service.url}/readyz").status_code == 200)
        gone = http.post(f"{service.url}/v1/episodes/{episode}/finish", json={"final_answer": "done"})
        assert gone.status_code == 404 and episode in gone.json()["message"], gone.text
        assert service.process.poll() is None
