"""The service as containers run it: `python -m corrgrpo_agentdojo`, one process with the in-memory
store for `/v1/score` over all 949 pairs, two processes sharing one Redis for split episodes."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from corrgrpo_agentdojo.catalog import Catalog
from corrgrpo_proto.agentdojo import TrajectoryItem
from corrgrpo_testing.servers import ServiceProcess, start_service

PAIRS = [
    ("workspace", "user_task_0", "injection_task_0"),
    ("workspace", "user_task_13", "injection_task_3"),
    ("travel", "user_task_3", "injection_task_2"),
    ("travel", "user_task_10", "injection_task_4"),
    ("banking", "user_task_3", "injection_task_1"),
    ("banking", "user_task_13", "injection_task_8"),
    ("slack", "user_task_2", "injection_task_1"),
    ("slack", "user_task_17", "injection_task_4"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[ServiceProcess]:
    with start_service("agentdojo") as process:
        yield process


@pytest.fixture(scope="module")
def replicas() -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    redis_url = os.environ.get("CORRGRPO_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    env = {"CORRGRPO_REDIS_URL": redis_url, "CORRGRPO_AGENTDOJO_EPISODE_TTL_S": "300"}
    with start_service("agentdojo", env=env) as a, start_service("agentdojo", env=env) as b:
        yield a, b


def ground_truth_items(catalog: Catalog, ground_truth: Callable[..., TrajectoryItem]) -> list[dict[str, Any]]:
    """The user tasks' ground truths for PAIRS, each computed on its own injected start environment."""
    return [ground_truth(catalog.resolve(*pair, None)).model_dump() for pair in PAIRS]


def test_score_replays_ground_truths_under_important_instructions(
    server: ServiceProcess, catalog: Catalog, ground_truth: Callable[..., TrajectoryItem]
) -> None:
    """The HTTP path of the 949-pair check in test_episode.py (same `replay`), on the PAIRS sample."""
    items = ground_truth_items(catalog, ground_truth)
    response = httpx.post(f"{server.url}/v1/score", json={"items": items}, timeout=300)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["components"] for r in results] == [{"utility": 1.0, "security": 1.0}] * len(PAIRS)
    assert all(
        r["info"]["attack"] == "important_instructions" and r["info"]["tool_errors"] == 0 for r in results
    )


def test_tasks_and_episode_creation(server: ServiceProcess) -> None:
    tasks = httpx.get(f"{server.url}/v1/tasks", timeout=120).json()  # the first call probes every checker
    assert tasks["benchmark_version"] == "v1.2.2" and tasks["default_attack"] == "important_instructions"
    assert "manual" not in tasks["attacks"] and "tool_knowledge" in tasks["attacks"]
    assert sum(len(s["user_tasks"]) * len(s["injection_tasks"]) for s in tasks["suites"].values()) == 949
    created = httpx.post(
        f"{server.url}/v1/episodes",
        json={"suite": "slack", "user_task": "user_task_1", "injection_task": "injection_task_1"},
    )
    assert created.status_code == 200, created.text
    episode = created.json()
    assert episode["attack"] == "important_instructions"
    assert [m["role"] for m in episode["messages"]] == ["system", "user"]
    assert "Emma Johnson" in episode["messages"][0]["content"] and episode["messages"][1]["content"]
    assert {t["function"]["name"] for t in episode["tools"]} >= {
        "send_direct_message",
        "read_channel_messages",
    }


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"suite": "shop", "user_task": "user_task_0"}, 422, "unknown suite 'shop'"),
        (
            {
                "suite": "slack",
                "user_task": "user_task_0",
                "injection_task": "injection_task_1",
                "attack": "nope",
            },
            422,
            "unknown attack",
        ),
        ({"suite": "slack"}, 422, "user_task"),
    ],
)
def test_bad_episode_specs_are_refused(server: ServiceProcess, body: dict, status: int, message: str) -> None:
    response = httpx.post(f"{server.url}/v1/episodes", json=body)
    assert response.status_code == status and message in response.json()["message"]


def test_score_reports_bad_items_per_item(server: ServiceProcess) -> None:
    items = [
        {"suite": "slack", "user_task": "user_task_404"},
        {"suite": "banking", "user_task": "user_task_0"},
    ]
    results = httpx.post(f"{server.url}/v1/score", json={"items": items}, timeout=120).json()["results"]
    assert results[0]["error"]["code"] == "unknown_task"
    # no calls, no answer: the task is not done; no injection task: security 0, as the authors score clean
    # episodes
    assert results[1]["components"] == {"utility": 0.0, "security": 0.0}


@pytest.mark.parametrize(("suite", "user_task", "injection_task"), PAIRS)
def test_step_api_split_across_two_replicas_sharing_redis(
    replicas: tuple[ServiceProcess, ServiceProcess],
    catalog: Catalog,
    ground_truth: Callable[..., TrajectoryItem],
    suite: str,
    user_task: str,
    injection_task: str,
) -> None:
    urls = itertools.cycle([replicas[0].url, replicas[1].url])
    spec = {"suite": suite, "user_task": user_task, "injection_task": injection_task}
    episode = httpx.post(f"{next(urls)}/v1/episodes", json=spec, timeout=60).json()
    episode_id = episode["episode_id"]
    seen = []
    calls = [
        call.model_dump()
        for call in ground_truth(catalog.resolve(suite, user_task, injection_task, None)).tool_calls
    ]
    for index, call in enumerate(calls):
        step = httpx.post(
            f"{next(urls)}/v1/episodes/{episode_id}/step", json={"tool_calls": [call]}, timeout=60
        )
        assert step.status_code == 200, step.text
        assert step.json()["tool_calls_so_far"] == index + 1
        seen.extend(result["content"] for result in step.json()["results"])
    assert any("<INFORMATION>" in text for text in seen), "the injection should reach the agent"
    answer = catalog.suites[suite].user_tasks[user_task].GROUND_TRUTH_OUTPUT
    finished = httpx.post(
        f"{next(urls)}/v1/episodes/{episode_id}/finish", json={"final_answer": answer}, timeout=60
    )
    assert finished.status_code == 200, finished.text
    assert finished.json()["components"] == {"utility": 1.0, "security": 1.0}
    again = httpx.post(
        f"{next(urls)}/v1/episodes/{episode_id}/step", json={"tool_calls": calls[:1] or [{"function": "x"}]}
    )
    assert again.status_code == 409 and "is finished" in again.json()["message"]


def test_unknown_episode_is_404_on_every_replica(replicas: tuple[ServiceProcess, ServiceProcess]) -> None:
    for replica in replicas:
        response = httpx.post(f"{replica.url}/v1/episodes/deadbeef/finish", json={"final_answer": ""})
        assert response.status_code == 404 and "unknown or expired" in response.json()["message"]
