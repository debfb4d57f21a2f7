"""One client cannot block every client's AgentDojo episodes, in places (issue 37.5) or in bytes (issue
48.5): real service processes, the in-memory store and a real Redis. Clients are source addresses (127.0.0.2,
.3, ...), as trainer hosts would be."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from corrgrpo_testing.servers import ServiceProcess, start_service

EPISODE = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_1"}
STEP = {"tool_calls": [{"function": "get_most_recent_transactions", "args": {"n": 5}}]}
SHARE, TOTAL, IDLE_S = 10, 14, 4
# In memory, ~30 banking episodes (~6.3 kB each) fill this cap: without a share, one client would fill it.
# The byte shares hold more than the places (~15 and ~23 episodes), so places are what refuses here.
LIMITS = {
    "CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES_PER_CLIENT": str(SHARE),
    "CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES": str(TOTAL),
    "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES_PER_CLIENT": "100000",
    "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES": "150000",
    "CORRGRPO_AGENTDOJO_EPISODE_TTL_S": str(IDLE_S),
    "CORRGRPO_MEMORY_STORE_MAX_BYTES": "200000",
    "CORRGRPO_RETRY_AFTER_S": "2",
}


@contextmanager
def client_at(address: str) -> Iterator[httpx.Client]:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60) as client:
        yield client


Env = dict[str, str]


def store_env(request: pytest.FixtureRequest, env: Env, memory: Env, redis: Env) -> Env:
    """`env` and what the store of the fixture's param needs (`memory` or `redis`, and a throwaway Redis)."""
    if request.param == "redis":
        return {**env, **redis, "CORRGRPO_REDIS_URL": request.getfixturevalue("throwaway_redis").url}
    return {**env, **memory}


@pytest.fixture(params=["memory", "redis"])
def agentdojo(request: pytest.FixtureRequest) -> Iterator[ServiceProcess]:
    with start_service("agentdojo", env=store_env(request, LIMITS, {}, {}), timeout_s=120) as service:
        yield service


def create_until_refused(
    client: httpx.Client, url: str, attempts: int
) -> tuple[list[str], httpx.Response | None]:
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
        assert (
            full.status_code == 503
            and full.json()["error"] == "episodes_full"
            and full.headers["Retry-After"] == "2"
        )
        assert other.post(f"{url}/v1/episodes/{theirs[0]}/step", json=STEP).status_code == 200
        finished = greedy.post(f"{url}/v1/episodes/{held[0]}/finish", json={"final_answer": "done"})
        assert finished.status_code == 200, finished.text
        # a finished episode frees its place
        assert other.post(f"{url}/v1/episodes", json=EPISODE).status_code == 200
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
        # the stepped one holds
        assert len(again) == SHARE - 1 and refused is not None and refused.status_code == 429
        assert (
            client.post(f"{url}/v1/episodes/{held[0]}/finish", json={"final_answer": "done"}).status_code
            == 200
        )


# Byte shares only: the places allow far more. In memory only the store's cap is set, as in the issue: the
# shares derive from it (three quarters for all, a quarter of that per client); Redis gets the same numbers.
CLIENT_BYTES, ALL_BYTES = 37_500, 150_000
BYTE_LIMITS = {
    "CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES_PER_CLIENT": "1000",
    "CORRGRPO_AGENTDOJO_MAX_LIVE_EPISODES": "1000",
    "CORRGRPO_RETRY_AFTER_S": "2",
}
BIG_STEP = {
    "tool_calls": [
        {
            "function": "send_money",
            "args": {"recipient": "GB29NWBK60", "amount": 1, "subject": "x" * 19_000, "date": "2022-01-01"},
        }
    ]
}


@pytest.fixture(params=["memory", "redis"])
def bytes_bound(request: pytest.FixtureRequest) -> Iterator[ServiceProcess]:
    memory = {"CORRGRPO_MEMORY_STORE_MAX_BYTES": "200000"}
    redis = {
        "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES_PER_CLIENT": str(CLIENT_BYTES),
        "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES": str(ALL_BYTES),
    }
    env = store_env(request, BYTE_LIMITS, memory, redis)
    with start_service("agentdojo", env=env, timeout_s=120) as service:
        yield service


def test_a_client_at_its_byte_share_gets_429_and_others_still_create(bytes_bound: ServiceProcess) -> None:
    """Issue 48.5: one client created episodes until the in-memory store was full, then all got 503."""
    url = bytes_bound.url
    with client_at("127.0.0.2") as greedy, client_at("127.0.0.3") as other:
        held, refused = create_until_refused(greedy, url, 100)
        assert refused is not None, "100 episodes of one client accepted: no byte share"
        assert refused.status_code == 429, refused.text
        error, message = refused.json()["error"], refused.json()["message"]
        assert error == "too_many_episode_bytes" and "127.0.0.2" in message
        assert f"{CLIENT_BYTES} bytes (CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES_PER_CLIENT)" in message, message
        assert refused.headers["Retry-After"] == "2" and 4 <= len(held) <= 6, len(held)  # ~6.3 kB each
        theirs, _ = create_until_refused(other, url, 3)
        assert len(theirs) == 3, "another client could not create while one held its share"
        done = greedy.post(f"{url}/v1/episodes/{held[0]}/finish", json={"final_answer": "done"})
        assert done.status_code == 200, done.text  # frees its bytes but a small tombstone's
        grown = greedy.post(f"{url}/v1/episodes/{held[1]}/step", json=BIG_STEP)  # +19 kB: over the share
        assert grown.status_code == 429 and grown.json()["error"] == "too_many_episode_bytes", grown.text
        small = greedy.post(f"{url}/v1/episodes/{held[1]}/step", json=STEP)
        assert small.status_code == 200, small.text
        assert small.json()["tool_calls_so_far"] == 1, "the refused step was applied"
        assert greedy.post(f"{url}/v1/episodes", json=EPISODE).status_code == 200  # the finished one's place
    assert bytes_bound.process.poll() is None


def test_all_clients_together_are_refused_before_the_store_fills(bytes_bound: ServiceProcess) -> None:
    """Six clients at their shares exceed all clients' bytes: 503 `episodes_full`, never
    `store_unavailable`, and every episode created before still finishes."""
    url, live, refusals = bytes_bound.url, [], []
    for host in range(2, 8):
        with client_at(f"127.0.0.{host}") as client:
            held, refused = create_until_refused(client, url, 100)
            live += held
            assert refused is not None
            refusals.append((refused.status_code, refused.json()["error"]))
    assert (503, "episodes_full") in refusals, refusals
    assert set(refusals) <= {(429, "too_many_episode_bytes"), (503, "episodes_full")}, refusals
    assert len(live) * 6000 <= ALL_BYTES
    with httpx.Client(base_url=f"{url}/v1/episodes", timeout=60) as client:
        for episode in live[::2]:
            assert client.post(f"/{episode}/finish", json={"final_answer": "done"}).status_code == 200
        for episode in live[1::2]:
            assert client.post(f"/{episode}/step", json=STEP).status_code == 200
            assert client.post(f"/{episode}/finish", json={"final_answer": "done"}).status_code == 200
    assert bytes_bound.process.poll() is None
