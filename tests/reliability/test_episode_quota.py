"""One client cannot block every client's AgentDojo episodes (issue 37.5): real service processes, the in-memory
store and a real Redis. Two clients are two source addresses (127.0.0.2 and .3), as two trainer hosts would be."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from corrgrpo_testing.servers import ServiceProcess, start_service

EPISODE = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_1"}
STEP = {"tool_calls": [{"function": "get_most_recent_transactions", "args": {"n": 5}}]}
SHARE, TOTAL, IDLE_S = 10, 14, 4
# In memory, ~30 banking episodes fill this cap: without a share, one client alone would fill it.
LIMITS = {
    "CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES_PER_CLIENT": str(SHARE),
    "CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES": str(TOTAL),
    "CORRGRPO_AGENTDOJO_EPISODE_TTL_S": str(IDLE_S),
    "CORRGRPO_MEMORY_STORE_MAX_BYTES": "200000",
    "CORRGRPO_RETRY_AFTER_S": "2",
}


@contextmanager
def client_at(address: str) -> Iterator[httpx.Client]:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60) as client:
        yield client


@pytest.fixture(params=["memory", "redis"])
def agentdojo(request: pytest.FixtureRequest) -> Iterator[ServiceProcess]:
    with ExitStack() as stack:
        env = dict(LIMITS)
        if request.param == "redis":
            env["CORRGRPO_REDIS_URL"] = request.getfixturevalue("throwaway_redis").url
        yield stack.enter_context(start_service("agentdojo", env=env, timeout_s=120))


def create_until_refused(client: httpx.Client, url: str, attempts: int) -> tuple[list[str], httpx.Response | None]:
    created: list[str] = []
    for _ in range(attempts):
        answer = client.post(f"{url}/v1/episodes", json=EPISODE)
        if answer.status_code != 200:
            return created, answer
        created.append(answer.json()["episode_id"])
    return created, None


def test_a_client_over_its_share_gets_429_and_never_blocks_another(agentdojo: ServiceProcess) -> None:
    url = agentdojo.url
    with client_at("127.0.0.2") as greedy, client_at("127.0.0.3") as other:
        held, refused = create_until_refused(greedy, url, 40)
        assert refused is not None, "40 unfinished episodes of one client accepted: no share"
        assert len(held) == SHARE and refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "2" and refused.json()["error"] == "too_many_episodes"
        assert "127.0.0.2" in refused.json()["message"]
        theirs, full = create_until_refused(other, url, 40)  # the other client still starts episodes
        assert len(theirs) == TOTAL - SHARE and full is not None, "the total of live episodes is not bounded"
        assert full.status_code == 503 and full.json()["error"] == "episodes_full" and full.headers["Retry-After"] == "2"
        assert other.post(f"{url}/v1/episodes/{theirs[0]}/step", json=STEP).status_code == 200
        finished = greedy.post(f"{url}/v1/episodes/{held[0]}/finish", json={"final_answer": "done"})
        assert finished.status_code == 200, finished.text
        assert other.post(f"{url}/v1/episodes", json=EPISODE).status_code == 200  # a finished episode frees its place
        assert greedy.post(f"{url}/v1/episodes", json=EPISODE).status_code == 503
    assert agentdojo.process.poll() is None


def test_idle_episodes_expire_and_free_the_share(agentdojo: ServiceProcess) -> None:
    url = agentdojo.url
    with client_at("127.0.0.2") as client:
        held, refused = create_until_refused(client, url, SHARE + 1)
        assert len(held) == SHARE and refused is not None and refused.status_code == 429, refused
        last_created = time.monotonic()
        time.sleep(IDLE_S / 2)
        assert client.post(f"{url}/v1/episodes/{held[0]}/step", json=STEP).status_code == 200  # kept alive
        time.sleep(max(0.0, last_created + IDLE_S + 1 - time.monotonic()))
        assert client.post(f"{url}/v1/episodes/{held[1]}/step", json=STEP).status_code == 404  # idled out
        again, refused = create_until_refused(client, url, SHARE + 1)
        assert len(again) == SHARE - 1 and refused is not None and refused.status_code == 429  # the stepped one holds
        assert client.post(f"{url}/v1/episodes/{held[0]}/finish", json={"final_answer": "done"}).status_code == 200
