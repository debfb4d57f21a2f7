"""State growth against real service processes: every key the services write to the real Redis has a TTL.
(The AgentDojo quotas refuse before the in-memory store's cap and never lose a live episode:
`test_episode_quota.py`.)"""

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
            stack.enter_context(start_service(name, env=env, timeout_s=120))
            for name in ("toolcall", "code", "agentdojo")
        )
        tag = uuid.uuid4().hex[:8]
        for service in (toolcall, code, agentdojo):
            items = [{**valid_item(service), "id": f"{tag}-{i}"} for i in range(2)]
            response = http.post(f"{service.url}/v1/score", json={"items": items})
            assert response.status_code == 200 and all(
                r["error"] is None for r in response.json()["results"]
            ), response.text
        correct = {
            "completion": "```python\ndef add(a, b):\n    return a + b\n```",
            "problem": {**PROBLEM, "task_id": tag},
        }
        scored = http.post(f"{code.url}/v1/score", json={"items": [correct]}).json()["results"][0]
        # t_ref went through Redis
        assert scored["info"].get("t_ref_source") in ("measured", "cache", "memory"), scored
        episode = http.post(f"{agentdojo.url}/v1/episodes", json=EPISODE).json()["episode_id"]
        assert http.post(f"{agentdojo.url}/v1/episodes/{episode}/step", json=STEP).status_code == 200
        assert (
            http.post(
                f"{agentdojo.url}/v1/episodes/{episode}/finish", json={"final_answer": "done"}
            ).status_code
            == 200
        )
    client = redis.Redis.from_url(throwaway_redis.url)
    try:
        ttls = {key.decode(): client.pttl(key) for key in client.scan_iter("*")}
    finally:
        client.close()
    families = {key.rsplit(":", 1)[0] for key in ttls}
    assert {"corrgrpo:toolcall:score", "corrgrpo:code:score", "corrgrpo:agentdojo:score"} <= families, (
        families
    )
    assert any("tref" in key for key in ttls) and any(episode in key for key in ttls), sorted(ttls)
    assert any(key.endswith(":amounts") for key in ttls), sorted(ttls)  # the byte quotas' running totals
    assert any(key.endswith(":version") for key in ttls), sorted(ttls)  # episode versions
    forever = sorted(key for key, ttl in ttls.items() if ttl < 0)
    assert not forever, f"keys without a TTL: {forever}"
