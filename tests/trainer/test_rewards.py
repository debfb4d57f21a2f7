"""Reward columns for TRL: one request per service per batch, per-item errors as None, a dead service as a clear error."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from servers import free_port, start_service

from corrgrpo_proto import AsyncRewardClient, RewardServiceUnavailable
from corrgrpo_proto.agentdojo import EpisodeSpec
from corrgrpo_trainer.rewards import ServiceRewards, agentdojo_item, code_item, reward_columns, score_all
from corrgrpo_trainer.rollouts import parse_tool_calls, run_episode

GROUND_TRUTH = (
    '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}\n</tool_call>'
)
WRONG_TOOL = '<think>x</think>\n<tool_call>\n{"name": "get_time", "parameters": {"zone": "UTC"}}\n</tool_call>'
TOOLCALL_COMPONENTS = ["format", "name", "param_names", "param_values"]


class FakeService:
    """An httpx transport that scores `completion` as float(completion) and fails items whose completion is "bad"."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        results = [
            {"error": {"code": "internal", "message": "boom"}}
            if item["completion"] == "bad"
            else {"components": {"a": float(item["completion"]), "b": -float(item["completion"])}, "total": 0.0}
            for item in body["items"]
        ]
        return httpx.Response(200, json={"service": "fake", "results": results})


def fake_rewards(service: FakeService, components: list[str], prefix: str = "") -> ServiceRewards:
    builder = lambda completion, row: {"completion": completion, "ground_truth": row["ground_truth"]}  # noqa: E731
    return ServiceRewards(
        "fake", "http://fake", components, builder, prefix, client_options={"transport": httpx.MockTransport(service)}
    )


async def call_columns(columns: list[Any], completions: list[Any], **columns_kwargs: Any) -> list[list[float | None]]:
    """Call the columns the way TRL does for async reward functions: concurrently, with the dataset columns as kwargs."""
    prompts = ["p"] * len(completions)
    return list(await asyncio.gather(*(c(prompts=prompts, completions=completions, **columns_kwargs) for c in columns)))


async def test_columns_share_one_request_and_failed_items_are_none() -> None:
    service = FakeService()
    columns = fake_rewards(service, ["a", "b"]).columns()
    assert [c.__name__ for c in columns] == ["a", "b"]
    completions = ["1", "bad", [{"role": "assistant", "content": "2.5"}]]
    a, b = await call_columns(columns, completions, ground_truth=["g0", "g1", "g2"], trainer_state=object())
    assert a == [1.0, None, 2.5] and b == [-1.0, None, -2.5]
    assert len(service.requests) == 1
    assert [item["ground_truth"] for item in service.requests[0]["items"]] == ["g0", "g1", "g2"]


async def test_a_new_batch_makes_a_new_request() -> None:
    service = FakeService()
    columns = fake_rewards(service, ["a"]).columns()
    assert await call_columns(columns, ["1"], ground_truth=["g"]) == [[1.0]]
    assert await call_columns(columns, ["3"], ground_truth=["g"]) == [[3.0]]
    assert len(service.requests) == 2


async def test_score_all_calls_every_service_and_duplicate_names_need_a_prefix() -> None:
    first, second = FakeService(), FakeService()
    services = [fake_rewards(first, ["a"]), fake_rewards(second, ["a"], prefix="other/")]
    assert [c.__name__ for c in reward_columns(services)] == ["a", "other/a"]
    scores = await score_all(services, ["2"], [{"ground_truth": "g"}])
    assert scores == {"a": [2.0], "other/a": [2.0]}
    assert len(first.requests) == len(second.requests) == 1
    with pytest.raises(ValueError, match="prefix"):
        reward_columns([fake_rewards(first, ["a"]), fake_rewards(second, ["a"])])


async def test_dead_service_fails_the_step_with_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    rewards = ServiceRewards("toolcall", url, ["format"], client_options={"retries": 1, "backoff": 0.01})
    with pytest.raises(RewardServiceUnavailable, match=r"toolcall reward service at .* is unavailable.*2 attempts"):
        await call_columns(rewards.columns(), ["x"], ground_truth=["g"])


def test_builders_read_the_dataset_columns() -> None:
    problem = {"task_id": "t", "entry_point": "f", "test": "def check(c): pass", "reference": "def f(): pass"}
    assert code_item("c", {"problem": problem}) == {"completion": "c", "problem": problem}
    assert code_item("c", {"task_id": "t1"}) == {"completion": "c", "task_id": "t1"}
    with pytest.raises(ValueError, match="problem"):
        code_item("c", {})
    text = '<tool_call>\n{"name": "send_money", "arguments": {"amount": 5}}\n</tool_call>\nDone.'
    item = agentdojo_item(text, {"suite": "banking", "user_task": "user_task_0", "injection_task": None})
    assert item == {
        "suite": "banking",
        "user_task": "user_task_0",
        "tool_calls": [{"function": "send_money", "args": {"amount": 5}}],
        "final_answer": "Done.",
    }


def test_parse_tool_calls_reads_hermes_and_toolrl_forms_and_drops_bad_lines() -> None:
    text = (
        "<think>plan</think><tool_call>\n"
        '{"name": "a", "arguments": {"x": 1}}\nnot json\n{"name": "b", "parameters": {"y": 2}}\n'
        "</tool_call><response> ok </response>"
    )
    calls, answer = parse_tool_calls(text)
    assert [(c.function, c.args) for c in calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert answer == "ok"
    assert parse_tool_calls("<think>t</think> just text") == ([], "just text")


@pytest.mark.slow
def test_columns_against_the_real_toolcall_service() -> None:
    with start_service("toolcall") as service:
        rewards = ServiceRewards("toolcall", service.url, TOOLCALL_COMPONENTS)
        columns = asyncio.run(call_columns(rewards.columns(), [GROUND_TRUTH, WRONG_TOOL], ground_truth=[GROUND_TRUTH] * 2))
    by_name = dict(zip(TOOLCALL_COMPONENTS, columns, strict=True))
    assert by_name["format"] == [1.0, 1.0]
    exact, wrong = (sum(by_name[c][i] for c in TOOLCALL_COMPONENTS[1:]) for i in range(2))
    assert exact == pytest.approx(3.0) and wrong == pytest.approx(-3.0)  # ToolRL: exact → 3, wrong tool → −3


async def test_run_episode_steps_tool_calls_feeds_results_back_and_finishes_with_the_answer() -> None:
    calls: list[tuple[str, Any]] = []

    def episode_api(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        calls.append((request.url.path, body))
        if request.url.path == "/v1/episodes":
            messages = [{"role": "user", "content": "pay the bill"}]
            return httpx.Response(200, json={"episode_id": "e1", **body, "messages": messages, "tools": [{"name": "pay"}]})
        if request.url.path.endswith("/step"):
            results = [{"function": c["function"], "content": f"paid {c['args']['amount']}"} for c in body["tool_calls"]]
            return httpx.Response(200, json={"episode_id": "e1", "results": results, "tool_calls_so_far": 1})
        return httpx.Response(200, json={"episode_id": "e1", "components": {"utility": 1.0, "security": 1.0}, "total": 2.0})

    seen: list[list[dict[str, Any]]] = []

    async def policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        seen.append(list(messages))
        if len(seen) == 1:
            return '<tool_call>\n{"name": "pay", "arguments": {"amount": 5}}\n</tool_call>'
        return "<response>Paid.</response>"

    async with AsyncRewardClient("http://episodes", transport=httpx.MockTransport(episode_api)) as client:
        result = await run_episode(client, EpisodeSpec(suite="banking", user_task="user_task_0"), policy)
    assert result.components == {"utility": 1.0, "security": 1.0}
    assert [path for path, _ in calls] == ["/v1/episodes", "/v1/episodes/e1/step", "/v1/episodes/e1/finish"]
    assert calls[1][1] == {"tool_calls": [{"function": "pay", "args": {"amount": 5}}]}
    assert seen[1][-1] == {"role": "tool", "name": "pay", "content": "paid 5"}
    assert calls[2][1] == {"final_answer": "Paid."}
