"""Whoever can write to Redis must not run code in, forge rewards of, or roll back the services reading it
back (issues 37.8, 48.7).

Real service processes on the real Redis: an attacker overwrites an AgentDojo episode's state with a pickle
that would create a file when loaded, and a toolcall item's cached result with a perfect score. The service
refuses both (an episode error, a rescored item), logs it, and never loads what it refused. An attacker who
kept an episode's earlier genuine state puts it back: the payment the agent made disappears, or a finished
episode is finished again with another answer. The service refuses the older state.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from corrgrpo_common.store.redis_store import version_key
from corrgrpo_testing.environment import REDIS_URL
from corrgrpo_testing.redis_server import ThrowawayRedis
from corrgrpo_testing.servers import ServiceProcess, free_port, start_service

EPISODE = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_1"}
STEP = {"tool_calls": [{"function": "get_most_recent_transactions", "args": {"n": 5}}]}


class Payload:
    """Unpickling it runs `touch <path>`: what a pod with write access to Redis would plant."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.path}",)


@pytest.fixture(scope="module")
def agentdojo(redis_url_module: str) -> Iterator[ServiceProcess]:
    with start_service("agentdojo", env={"CORRGRPO_REDIS_URL": redis_url_module}) as service:
        yield service


@pytest.fixture(scope="module")
def redis_url_module() -> str:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        pytest.fail(f"Redis at {REDIS_URL} does not answer ({error}); .ci/run starts it")
    finally:
        client.close()
    return REDIS_URL


def logged(service: ServiceProcess, text: str, timeout_s: float = 5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in service.log():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("route", ["step", "finish"])
@pytest.mark.parametrize("signed", [False, True], ids=["raw", "with-a-guessed-mac"])
def test_a_planted_episode_pickle_is_refused_never_loaded(
    agentdojo: ServiceProcess, tmp_path: Path, route: str, signed: bool
) -> None:
    created = httpx.post(f"{agentdojo.url}/v1/episodes", json=EPISODE, timeout=60)
    assert created.status_code == 200, created.text
    episode = created.json()["episode_id"]
    marker = tmp_path / "pwned"
    planted = pickle.dumps((3, EPISODE, b"", Payload(marker), [], None, ""))
    key = f"corrgrpo:agentdojo:episode:{episode}"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        stored = client.get(key)
        assert stored is not None
        # the old MAC: over other bytes
        client.set(key, (stored[:32] if signed else b"") + planted, px=60_000)
        body = STEP if route == "step" else {"final_answer": "done"}
        answer = httpx.post(f"{agentdojo.url}/v1/episodes/{episode}/{route}", json=body, timeout=60)
        assert not marker.exists(), "the planted pickle ran in the service"
        assert answer.status_code == 500 and answer.json()["error"] == "store_tampered", answer.text
        assert client.exists(key) == 0, "the refused state is deleted"
    finally:
        client.close()
    assert logged(agentdojo, "store value failed authentication")
    again = httpx.post(f"{agentdojo.url}/v1/episodes/{episode}/step", json=STEP, timeout=60)
    assert again.status_code == 404 and not marker.exists()
    assert agentdojo.process.poll() is None


PAY = {
    "tool_calls": [
        {
            "function": "send_money",
            "args": {"recipient": "UK1234567890", "amount": 98.7, "subject": "bill", "date": "2022-01-01"},
        }
    ]
}


def episode_key(episode: str) -> str:
    return f"corrgrpo:agentdojo:episode:{episode}"


def finish(agentdojo: ServiceProcess, episode: str, answer: str) -> httpx.Response:
    url = f"{agentdojo.url}/v1/episodes/{episode}/finish"
    return httpx.post(url, json={"final_answer": answer}, timeout=60)


@pytest.mark.parametrize("put_back", ["state", "state-and-version"])
def test_an_episode_rolled_back_to_an_earlier_genuine_state_is_refused(
    agentdojo: ServiceProcess,
    put_back: str,
) -> None:
    created = httpx.post(f"{agentdojo.url}/v1/episodes", json=EPISODE, timeout=60)
    episode, key = created.json()["episode_id"], episode_key(created.json()["episode_id"])
    client = redis.Redis.from_url(REDIS_URL)
    try:
        before, version_before = client.get(key), client.get(version_key(key))
        assert before is not None and version_before == b"1"
        paid = httpx.post(f"{agentdojo.url}/v1/episodes/{episode}/step", json=PAY, timeout=60)
        assert paid.status_code == 200 and paid.json()["results"][0]["error"] is None, paid.text
        client.set(key, before, px=60_000)  # genuine, sealed by the service: only older
        if put_back == "state-and-version":
            client.set(version_key(key), version_before, px=60_000)
        answer = finish(agentdojo, episode, "done")
        assert answer.status_code == 500 and answer.json()["error"] == "store_tampered", answer.text
        assert "an older value put back" in answer.json()["message"]
        assert client.exists(key) == 0, "the refused state is deleted"
    finally:
        client.close()
    assert logged(agentdojo, "an older value put back")


def test_a_finished_episode_cannot_finish_again(agentdojo: ServiceProcess) -> None:
    created = httpx.post(f"{agentdojo.url}/v1/episodes", json=EPISODE, timeout=60)
    episode, key = created.json()["episode_id"], episode_key(created.json()["episode_id"])
    assert httpx.post(f"{agentdojo.url}/v1/episodes/{episode}/step", json=STEP, timeout=60).status_code == 200
    client = redis.Redis.from_url(REDIS_URL)
    try:
        unfinished = client.get(key)
        assert unfinished is not None
        first = finish(agentdojo, episode, "done")
        assert first.status_code == 200, first.text
        again = finish(agentdojo, episode, "done")
        assert again.status_code == 409 and again.json()["error"] == "episode_finished", again.text
        client.set(key, unfinished, px=60_000)  # the state before the finish, put back
        replayed = finish(agentdojo, episode, "another answer")
        assert replayed.status_code == 500 and replayed.json()["error"] == "store_tampered", replayed.text
    finally:
        client.close()
    late = finish(agentdojo, episode, "another answer")
    assert late.status_code != 200, late.text


def test_a_forged_cached_score_is_not_paid() -> None:
    """The idempotency cache is a reward too: a result planted under an item's key is refused, the item
    rescored."""
    ground_truth = '<tool_call>\n{"name": "f", "parameters": {"x": 1}}\n</tool_call>'
    item = {"id": "forged", "completion": "no tool call here", "ground_truth": ground_truth}
    private = ThrowawayRedis(free_port())  # empty: the item's cache key is the only toolcall key
    private.start()
    try:
        with start_service("toolcall", env={"CORRGRPO_REDIS_URL": private.url}) as toolcall:
            first = httpx.post(f"{toolcall.url}/v1/score", json={"items": [item]}, timeout=60).json()[
                "results"
            ][0]
            assert first["error"] is None and first["total"] < 0
            client = redis.Redis.from_url(private.url)
            (key,) = client.scan_iter("corrgrpo:toolcall:score:*")
            stored = client.get(key)
            assert stored is not None and str(first["total"]).encode() in stored
            client.set(key, stored.replace(str(first["total"]).encode(), b"99.0"), px=60_000)
            client.close()
            again = httpx.post(f"{toolcall.url}/v1/score", json={"items": [item]}, timeout=60).json()[
                "results"
            ][0]
            assert again["total"] == first["total"] and again["components"] == first["components"], again
            assert logged(toolcall, "store value failed authentication")
    finally:
        private.kill()
