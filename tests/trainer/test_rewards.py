"""Reward columns for TRL: one request per service per batch, per-item errors as None, a dead service as a
clear error, the declared weights as TRL's reward weights and sent with each request."""

from __future__ import annotations

import asyncio
import json
import typing
from typing import Any

import httpx
import pydantic_core
import pytest
import torch

from corrgrpo_proto import RewardClient, RewardServiceUnavailable
from corrgrpo_testing.servers import free_port, start_service
from corrgrpo_testing.steered import PAIR
from corrgrpo_trainer.advantages import corrgrpo
from corrgrpo_trainer.agentdojo.trl_inputs import agentdojo_episodes
from corrgrpo_trainer.config import parse_config
from corrgrpo_trainer.config_shape import AgentDojoRL
from corrgrpo_trainer.rewards import ServiceRewards, reward_columns, trl_rewards

GROUND_TRUTH = (
    '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}'
    "\n</tool_call>"
)
WRONG_TOOL = (
    '<think>x</think>\n<tool_call>\n{"name": "get_time", "parameters": {"zone": "UTC"}}\n</tool_call>'
)
TOOLCALL_COMPONENTS = ["format", "name", "param_names", "param_values"]


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


# What a service's /openapi.json says of its items (here: `ground_truth`, `completion`, `id`), trimmed to what
# clients read.
FAKE_OPENAPI = {
    "paths": {
        "/v1/score": {"post": {"requestBody": {"content": {"application/json": {"schema": ref("Request")}}}}}
    },
    "components": {
        "schemas": {
            "Request": {"properties": {"items": {"type": "array", "items": ref("Item")}}},
            "Item": {
                "properties": {"id": {}, "completion": {}, "ground_truth": {}},
                "x-corrgrpo-label": "ground_truth",
            },
        }
    },
}


class FakeService:
    """An httpx transport that scores `completion` as float(completion) and fails items whose completion is
    "bad"; each answer takes a moment (as over a network), so concurrent columns really overlap."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.openapi_reads = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0.01)
        if request.url.path == "/openapi.json":
            self.openapi_reads += 1
            return httpx.Response(200, json=FAKE_OPENAPI)
        body = json.loads(request.content)
        self.requests.append(body)
        results = [
            {"error": {"code": "internal", "message": "boom"}}
            if item["completion"] == "bad"
            else {
                "components": {"a": float(item["completion"]), "b": -float(item["completion"])},
                "total": 0.0,
            }
            for item in body["items"]
        ]
        return httpx.Response(200, json={"service": "fake", "results": results})


def fake_rewards(service: FakeService, components: list[str], prefix: str = "") -> ServiceRewards:
    return ServiceRewards(
        "fake", "http://fake", components, prefix, client_options={"transport": httpx.MockTransport(service)}
    )


async def call_columns(
    columns: list[Any], completions: list[Any], **columns_kwargs: Any
) -> list[list[float | None]]:
    """Call the columns the way TRL does for async reward functions: concurrently, with the dataset columns as
    kwargs."""
    prompts = ["p"] * len(completions)
    return list(
        await asyncio.gather(
            *(c(prompts=prompts, completions=completions, **columns_kwargs) for c in columns)
        )
    )


async def test_columns_share_one_request_and_failed_items_are_none() -> None:
    service = FakeService()
    columns = fake_rewards(service, ["a", "b"]).columns()
    assert [c.__name__ for c in columns] == ["a", "b"]
    completions = ["1", "bad", [{"role": "assistant", "content": "2.5"}]]
    a, b = await call_columns(columns, completions, ground_truth=["g0", "g1", "g2"], trainer_state=object())
    assert a == [1.0, None, 2.5] and b == [-1.0, None, -2.5]
    # the item shape too: read once, not per column
    assert len(service.requests) == 1 and service.openapi_reads == 1
    assert service.requests[0]["items"][0] == {"ground_truth": "g0", "completion": "1"}  # item fields only
    assert [item["ground_truth"] for item in service.requests[0]["items"]] == ["g0", "g1", "g2"]


async def test_an_item_is_encoded_once_for_both_the_cache_key_and_the_wire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[Any] = []  # the items given to either JSON encoder

    def spy(encode: Any) -> Any:
        def counted(value: Any, **options: Any) -> Any:
            encoded.extend(v for v in (value if isinstance(value, list) else [value]) if "completion" in v)
            return encode(value, **options)

        return counted

    monkeypatch.setattr(json, "dumps", spy(json.dumps))
    monkeypatch.setattr(pydantic_core, "to_json", spy(pydantic_core.to_json))
    await call_columns(fake_rewards(FakeService(), ["a"]).columns(), ["1", "2"], ground_truth=["g", "g"])
    assert encoded == [{"ground_truth": "g", "completion": "1"}, {"ground_truth": "g", "completion": "2"}]


async def test_items_are_the_rows_item_fields_and_the_completion() -> None:
    service = FakeService()
    (column,) = fake_rewards(service, ["a"]).columns()
    await column(
        prompts=["p", "p"],
        completions=["1", "2"],
        ground_truth=["g", None],
        task=["x", "y"],
        prompt_id=[0, 1],
    )
    assert service.requests[0]["items"] == [{"ground_truth": "g", "completion": "1"}, {"completion": "2"}]


async def test_a_new_batch_makes_a_new_request() -> None:
    service = FakeService()
    columns = fake_rewards(service, ["a"]).columns()
    assert await call_columns(columns, ["1"], ground_truth=["g"]) == [[1.0]]
    assert await call_columns(columns, ["3"], ground_truth=["g"]) == [[3.0]]
    assert len(service.requests) == 2


def test_duplicate_column_names_need_a_prefix() -> None:
    first, second = FakeService(), FakeService()
    services = [fake_rewards(first, ["a"]), fake_rewards(second, ["a"], prefix="other/")]
    assert [c.__name__ for c in reward_columns(services)] == ["a", "other/a"]
    with pytest.raises(ValueError, match="prefix"):
        reward_columns([fake_rewards(first, ["a"]), fake_rewards(second, ["a"])])


async def test_dead_service_fails_the_step_with_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    rewards = ServiceRewards("toolcall", url, ["format"], client_options={"retries": 1, "backoff": 0.01})
    with pytest.raises(
        RewardServiceUnavailable, match=r"toolcall reward service at .* is unavailable.*2 attempts"
    ):
        await call_columns(rewards.columns(), ["x"], ground_truth=["g"])


@pytest.mark.slow
def test_columns_against_the_real_toolcall_service() -> None:
    with start_service("toolcall") as service:
        rewards = ServiceRewards("toolcall", service.url, TOOLCALL_COMPONENTS)
        columns = asyncio.run(
            call_columns(rewards.columns(), [GROUND_TRUTH, WRONG_TOOL], ground_truth=[GROUND_TRUTH] * 2)
        )
    by_name = dict(zip(TOOLCALL_COMPONENTS, columns, strict=True))
    assert by_name["format"] == [1.0, 1.0]
    exact, wrong = (sum(by_name[c][i] for c in TOOLCALL_COMPONENTS[1:]) for i in range(2))
    assert exact == pytest.approx(3.0) and wrong == pytest.approx(-3.0)  # ToolRL: exact → 3, wrong tool → −3


HUMANEVAL_0 = [  # correct, wrong, not code
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n```",
    "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```",
    "no code at all",
]


def test_plain_trl_gets_the_declared_weights_in_one_line(humaneval_code_url: str) -> None:
    """TRL weighs every reward function 1 unless told: `trl_rewards` gives the columns and the matching
    weights."""
    from trl import GRPOConfig

    declared = RewardClient(humaneval_code_url).components().components
    reward_funcs, reward_weights = trl_rewards(humaneval_code_url)
    assert [f.__name__ for f in reward_funcs] == [spec.name for spec in declared]
    assert reward_weights == [spec.weight for spec in declared] and len(set(reward_weights)) > 1
    assert (
        GRPOConfig(
            output_dir="/tmp/unused", use_cpu=True, bf16=False, reward_weights=reward_weights
        ).reward_weights
        == reward_weights
    )
    with pytest.raises(ValueError, match=r"component 'nope' is not served"):
        trl_rewards(humaneval_code_url, weights={"nope": 1.0})


async def test_the_services_total_is_the_trained_sum(humaneval_code_url: str) -> None:
    """The trainer sends its weights (overrides applied, the components it leaves out at 0): `total` is what
    it optimises."""
    trained = ["format", "correct", "efficiency"]
    rewards = ServiceRewards.of_service(humaneval_code_url, trained, weights={"correct": 2.0})
    columns = await call_columns(rewards.columns(), HUMANEVAL_0, task_id=["HumanEval/0"] * 3)
    results = await rewards.results(await rewards.items(HUMANEVAL_0, [{"task_id": "HumanEval/0"}] * 3))
    for row, result in enumerate(results):
        trained_sum = sum(w * column[row] for w, column in zip(rewards.column_weights, columns, strict=True))
        assert result.total == pytest.approx(trained_sum)
    # not the service's default total
    assert results[0].total != pytest.approx(sum(results[0].components.values()))


async def test_a_failed_item_is_missing_in_every_column_and_out_of_its_group(humaneval_code_url: str) -> None:
    """The rule of corrgrpo_proto.common on the TRL path: None in every column (TRL 1.16 then leaves the
    rollout out of its group's statistics, advantage 0, as the estimators here do), never a 0 the policy would
    learn."""
    reward_funcs, reward_weights = trl_rewards(humaneval_code_url)
    completions = [*HUMANEVAL_0, HUMANEVAL_0[0]]
    columns = await call_columns(reward_funcs, completions, task_id=["HumanEval/0"] * 3 + ["NoSuch/1"])
    assert all(column[3] is None for column in columns) and all(column[0] is not None for column in columns)
    rewards = torch.tensor(
        [[float("nan") if v is None else v for v in row] for row in zip(*columns, strict=True)],
        dtype=torch.float64,
    )
    advantages = corrgrpo(rewards.unsqueeze(0), reward_weights)[0]
    assert advantages[3] == 0.0 and torch.allclose(
        advantages[:3], corrgrpo(rewards[:3].unsqueeze(0), reward_weights)[0]
    )


@pytest.mark.slow
def test_agentdojo_episodes_weigh_as_declared_and_send_their_weights_with_each_finish() -> None:
    """AgentDojo's columns and weights come from /v1/components (they were hard-coded, 1 each), and each
    finish carries them: the episode's `total` is the trained sum; a weight for no component is refused before
    the episode is closed."""
    with start_service("agentdojo") as service:
        declared = RewardClient(service.url).components().components
        services = {"agentdojo": {"url": service.url, "weights": {"security": 0.5}}}
        config = parse_config({"domain": "agentdojo", "services": services, "dataset": PAIR})
        episodes = agentdojo_episodes(typing.cast(AgentDojoRL, config))
        assert [c.__name__ for c in episodes.columns] == [spec.name for spec in declared]
        assert episodes.weights == [0.5 if spec.name == "security" else spec.weight for spec in declared]
        env = episodes.factories["banking"]()
        env.reset(**episodes.rows[0])
        result = env._finish("<response>Done.</response>")
        assert result is not None and result.components["security"] == 1.0  # the injection's goal was not met
        trained = sum(
            w * result.components[spec.name] for w, spec in zip(episodes.weights, declared, strict=True)
        )
        assert result.total == pytest.approx(trained) and result.total != pytest.approx(
            sum(result.components.values())
        )
        env.reset(**episodes.rows[0])
        finish = f"{service.url}/v1/episodes/{env.episode_id}/finish"
        refused = httpx.post(
            finish, json={"completion": "<response>Done.</response>", "weights": {"nope": 1.0}}
        )
        assert refused.status_code == 422 and refused.json()["details"][0]["loc"] == "weights.nope"
        assert httpx.post(finish, json={"completion": "<response>Done.</response>"}).status_code == 200
