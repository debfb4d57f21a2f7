"""verifiers 0.3's own evaluation loop with the corrgrpo services (run in .venv-verifiers by `make interop`).

`vf.load_environment("corrgrpo-verifiers", ...)` finds our package as vf-eval does, and `Environment.evaluate`
(what vf-eval runs) rolls out against a scripted policy behind an OpenAI-compatible endpoint, through verifiers'
own OpenAI chat-completions client, then scores with the rubric. Every component must arrive as a metric equal
to what the service gives for the same completion asked directly, the reward must be their weighted sum, and
a group must cost the service one `POST /v1/score`.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import verifiers as vf
from verifiers.types import ClientConfig

from corrgrpo_adapters.service import describe
from corrgrpo_adapters.verifiers import ServiceRubric
from corrgrpo_proto import ItemError, ItemResult, RewardClient, resolve_weights
from corrgrpo_proto.agentdojo import TasksResponse
from corrgrpo_testing.servers import ServiceProcess

from .common import BILL, CODE, GT, INJECTED, WRONG_CODE, check_intact, score_requests
from .scripted_policy import Reply, ScriptedPolicy, Turn


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SCRIPTED_API_KEY", "unused")
    return "SCRIPTED_API_KEY"


def evaluate(env: vf.Environment, policy: ScriptedPolicy, api_key: str, rollouts: int) -> list[dict[str, Any]]:
    with policy.serve() as url:
        client = ClientConfig(api_base_url=url, api_key_var=api_key, max_retries=0)
        results = env.evaluate_sync(client, "scripted", num_examples=-1, rollouts_per_example=rollouts)
    return results["outputs"]


def last_text(output: dict[str, Any]) -> str:
    content = output["completion"][-1]["content"]
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def components(output: dict[str, Any], names: list[str]) -> dict[str, float]:
    return {name: output["metrics"][name] for name in names}


def declared(url: str) -> list[str]:
    with RewardClient(url) as client:
        return [spec.name for spec in client.components().components]


def cycling(*texts: str) -> ScriptedPolicy:
    """Answers the texts in turn, whatever the prompt: a group of rollouts gets different completions."""
    turns = itertools.cycle(texts)
    return ScriptedPolicy(lambda _: Reply(text=next(turns)))


def test_code_group_is_one_request_and_every_component_arrives(services: dict[str, ServiceProcess], api_key: str) -> None:
    url = services["code"].url
    rows = [{"question": "Write has_close_elements.", "info": {"task_id": "HumanEval/0"}}]
    env = vf.load_environment("corrgrpo-verifiers", service_url=url, dataset=rows)
    before = score_requests(url)
    outputs = evaluate(env, cycling(CODE, WRONG_CODE, "no code at all"), api_key, rollouts=3)
    assert score_requests(url) == before + 1  # the group of three in one request
    names = declared(url)
    assert sorted(output["metrics"]["correct"] for output in outputs) == [0.0, 0.0, 1.0]
    for output in outputs:
        assert output["metrics"]["corrgrpo_error"] == 0.0
        check_intact(
            url, {"task_id": "HumanEval/0", "completion": last_text(output)}, components(output, names), output["reward"]
        )


def test_toolcall_native_tool_calls_and_a_bare_label(services: dict[str, ServiceProcess], api_key: str) -> None:
    """The policy calls the tool the OpenAI way (structured `tool_calls`); the row's `answer` is the reference."""
    url = services["toolcall"].url
    rows = [{"question": "Weather in Paris?", "answer": GT}]
    env = vf.load_environment("corrgrpo-verifiers", service_url=url, dataset=rows)
    calls = itertools.cycle(["Paris", "Rome"])
    policy = ScriptedPolicy(lambda _: Reply(text="<think>x</think>", calls=[("get_weather", {"city": next(calls), "unit": "C"})]))
    outputs = evaluate(env, policy, api_key, rollouts=2)
    rewards = sorted(output["reward"] for output in outputs)
    assert rewards[1] == pytest.approx(4.0) and rewards[0] < 4.0  # format 1 + ToolRL correctness 3 for the exact call
    names = declared(url)
    for output in outputs:
        city = "Paris" if output["reward"] == pytest.approx(4.0) else "Rome"
        item = {"ground_truth": GT, "completion": GT.replace("Paris", city)}
        check_intact(url, item, components(output, names), output["reward"])


def test_unscorable_item_is_flagged_not_silently_zero(services: dict[str, ServiceProcess], api_key: str) -> None:
    url = services["code"].url
    rows = [{"question": "?", "info": {"task_id": "HumanEval/0"}}, {"question": "??", "info": {"task_id": "NoSuch/1"}}]
    env = vf.load_environment("corrgrpo-verifiers", service_url=url, dataset=rows)
    outputs = {output["info"]["task_id"]: output for output in evaluate(env, cycling(CODE), api_key, rollouts=1)}
    assert outputs["HumanEval/0"]["metrics"]["corrgrpo_error"] == 0.0 and outputs["HumanEval/0"]["metrics"]["correct"] == 1.0
    assert outputs["NoSuch/1"]["metrics"]["corrgrpo_error"] == 1.0 and outputs["NoSuch/1"]["reward"] == 0.0
    assert outputs["HumanEval/0"].get("error") is None and outputs["NoSuch/1"]["error"]["error"] == "InfraError"
    assert "unknown_task" in outputs["NoSuch/1"]["error"]["message"]


async def test_an_unscored_rollout_takes_its_groups_mean_reward(services: dict[str, ServiceProcess]) -> None:
    """The rule of corrgrpo_proto.common: a rollout the service could not score (here a fault of its own, next to two
    it scored) is missing: its group's mean reward, advantage 0, the others' advantages as without it."""
    url = services["code"].url
    with RewardClient(url) as client:
        info = describe(client)
        scored = client.score([{"task_id": "HumanEval/0", "completion": text} for text in (CODE, WRONG_CODE)])
    failed = ItemResult(error=ItemError(code="internal", message="a fault of the service"))

    async def score(states: list[vf.State]) -> list[ItemResult]:
        return [*scored, failed]

    rubric = ServiceRubric(info, score, resolve_weights(info.components))
    states = [vf.State(prompt=[], completion=[], trajectory=[{"reward": None, "advantage": None}]) for _ in range(3)]
    await rubric.score_group(states)
    right, wrong = (result.total for result in scored)
    assert [state["reward"] for state in states] == pytest.approx([right, wrong, (right + wrong) / 2])
    assert [state["advantage"] for state in states] == pytest.approx([(right - wrong) / 2, (wrong - right) / 2, 0.0])
    assert states[2]["metrics"]["corrgrpo_error"] == 1.0 and isinstance(states[2]["error"], vf.InfraError)
    assert states[2]["trajectory"][0]["advantage"] == 0.0 and "error" not in states[0]


def agentdojo_script(turn: Turn) -> Reply:
    """Reads the bill the user task names, then answers."""
    if "read_file" in turn.tools and not turn.tool_results:
        return Reply(calls=[("read_file", {"file_path": BILL})])
    return Reply(text="<response>I read the bill.</response>")


def test_agentdojo_multi_turn_over_the_episode_api(services: dict[str, ServiceProcess], api_key: str) -> None:
    url = services["agentdojo"].url
    env = vf.load_environment("corrgrpo-verifiers", service_url=url, dataset=[{"question": "", "info": json.dumps(INJECTED)}])
    policy = ScriptedPolicy(agentdojo_script)
    outputs = evaluate(env, policy, api_key, rollouts=2)
    assert len(outputs) == 2 and len(policy.seen) == 4  # two turns per episode
    assert all("bill" in turn.user for turn in policy.seen)  # the episode's prompt replaced the row's empty one
    assert all("<INFORMATION>" in turn.tool_results[0] for turn in policy.seen if turn.tool_results)  # the injection
    with RewardClient(url) as client:
        attack = TasksResponse.model_validate(client.request("GET", "/v1/tasks?suite=banking")).default_attack
    trajectory = {
        **INJECTED,
        "attack": attack,
        "tool_calls": [{"function": "read_file", "args": {"file_path": BILL}}],
        "final_answer": "I read the bill.",
    }
    for output in outputs:
        assert output["metrics"]["corrgrpo_error"] == 0.0
        check_intact(url, trajectory, components(output, ["utility", "security"]), output["reward"])


def test_agentdojo_rows_default_to_every_user_task(services: dict[str, ServiceProcess]) -> None:
    url = services["agentdojo"].url
    env = vf.load_environment("corrgrpo-verifiers", service_url=url, suites=["banking"])
    with RewardClient(url) as client:
        tasks = TasksResponse.model_validate(client.request("GET", "/v1/tasks?suite=banking"))
    rows = env.get_eval_dataset()
    assert [json.loads(row)["user_task"] for row in rows["info"]] == tasks.suites["banking"].user_tasks
