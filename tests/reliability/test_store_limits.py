"""State growth against real service processes: every key the services write to the real Redis has a
TTL; the in-memory store's cap refuses new AgentDojo episodes with 503 and never loses a live one."""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import httpx
import redis

from corrgrpo_testing.redis_server import ThrowawayRedis
from corrgrpo_testing.servers import start_service

from .helpers import PROBLEM, valid_item

EPISODE = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_0"}
STEP = {"tool_calls": [{"function": "get_most_recent_transactions", "args": {"n": 5}}]}


def test_every_key_the_services_write_has_a_ttl(throwaway_redis: ThrowawayRedis, http: httpx.Client) -> None:
    env = {"CORRGRPO_REDIS_URL": throwaway_redis.url, "CORRGRPO_CODE_WORKERS": "2"}
    env["CORRGRPO_CODE_EFFICIENCY_MODE"] = "paper"  # its t_ref goes through Redis
    with ExitStack() as stack:
        toolcall, code, agentdojo = (
            stack.enter_context(start_service(name, env=env, timeout_s=120)) for name in ("toolcall", "code", "agentdojo")
        )
        tag = uuid.uuid4().hex[:8]
        for service in (toolcall, code, agentdojo):
            items = [{**valid_item(service), "id": f"{tag}-{i}"} for i in range(2)]
            response = http.post(f"{service.url}/v1/score", json={"items": items})
            assert response.status_code == 200 and all(r["error"] is None for r in response.json()["results"]), response.text
        correct = {"completion": "```python\ndef add(a, b):\n    return a + b\n```", "problem": {**PROBLEM, "task_id": tag}}
        scored = http.post(f"{code.url}/v1/score", json={"items": [correct]}).json()["results"][0]
        assert scored["info"].get("t_ref_source") in ("measured", "cache", "memory"), scored  # t_ref went through Redis
        episode = http.post(f"{agentdojo.url}/v1/episodes", json=EPISODE).json()["episode_id"]
        assert http.post(f"{agentdojo.url}/v1/episodes/{episode}/step", json=STEP).status_code == 200
        assert http.post(f"{agentdojo.url}/v1/episodes/{episode}/finish", json={"final_answer": "done"}).status_code == 200
    client = redis.Redis.from_url(throwaway_redis.url)
    try:
        ttls = {key.decode(): client.pttl(key) for key in client.scan_iter("*")}
    finally:
        client.close()
    families = {key.rsplit(":", 1)[0] for key in ttls}
    assert {"corrgrpo:toolcall:score", "corrgrpo:code:score", "corrgrpo:agentdojo:score"} <= families, families
    assert any("tref" in key for key in ttls) and any(episode in key for key in ttls), sorted(ttls)
    forever = sorted(key for key, ttl in ttls.items() if ttl < 0)
    assert not forever, f"keys without a TTL: {forever}"


def test_full_memory_store_refuses_new_episodes_and_keeps_live_ones(http: httpx.Client) -> None:
    # a workspace-sized cap for a handful of banking episodes (~10-20 KB each in memory)
    env = {"CORRGRPO_MEMORY_STORE_MAX_BYTES": "200000"}
    with start_service("agentdojo", env=env, timeout_s=120) as service:
        live, refused = [], None
        for _ in range(200):
            created = http.post(f"{service.url}/v1/episodes", json=EPISODE)
            if created.status_code != 200:
                refused = created
                break
            live.append(created.json()["episode_id"])
        assert refused is not None, "200 episodes fit in a 200 kB store: the cap is not enforced"
        assert refused.status_code == 503 and refused.json()["message"], refused.text
        assert len(live) >= 2
        for episode in live:  # every episode started before the cap was reached still steps and finishes
            assert http.post(f"{service.url}/v1/episodes/{episode}/step", json=STEP).status_code == 200
            finished = http.post(f"{service.url}/v1/episodes/{episode}/finish", json={"final_answer": "done"})
            assert finished.status_code == 200, finished.text
        assert service.process.poll() is None
