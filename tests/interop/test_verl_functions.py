"""verl interop in this venv: `compute_score` against a real service, the estimator on verl's call signature.

verl itself runs in its own venv (its transformers pin clashes with TRL's):
`tests/interop/stacks/test_verl_reward_loop.py` drives verl 0.9.1's reward loop and `compute_advantage` with
these (`make interop`).
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import numpy as np
import pytest
import torch

from corrgrpo_adapters import verl_estimator, verl_reward
from corrgrpo_proto import RewardClient, RewardServiceError
from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.advantages import CORRGRPO_EPS, corrgrpo

GT = (
    '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}\n'
    "</tool_call>"
)
WRONG = GT.replace("Paris", "Rome")


@pytest.fixture(scope="module")
def toolcall_url() -> str:
    with start_service("toolcall") as service:
        yield service.url


def scores(calls: list[tuple[Any, ...]], **reward_kwargs: Any) -> list[dict[str, Any]]:
    """Concurrent calls on one event loop, as verl 0.9's reward loop makes them."""

    async def run() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(*(verl_reward.compute_score(*call, **reward_kwargs) for call in calls))
        )

    return asyncio.run(run())


def test_compute_score_returns_total_and_components(toolcall_url: str) -> None:
    right, wrong = scores(
        [("toolcall", GT, GT, {"index": 0}), ("toolcall", WRONG, GT)],
        corrgrpo_services={"toolcall": toolcall_url},
    )
    assert right["score"] == pytest.approx(1 + 3)  # format 1 + correctness 3
    keys = {"score", "format", "name", "param_names", "param_values", "corrgrpo_weights", "corrgrpo_error"}
    assert set(right) == keys == set(wrong)
    assert right["name"] + right["param_names"] + right["param_values"] == pytest.approx(3)
    assert wrong["param_values"] < right["param_values"] and wrong["name"] == right["name"]


def test_concurrent_items_share_one_request(toolcall_url: str) -> None:
    seen: list[int] = []
    original = verl_reward._Service._flush

    async def counting(self: Any) -> None:
        seen.append(len(self.pending))
        await original(self)

    verl_reward._Service._flush = counting  # type: ignore[method-assign]
    try:
        out = scores(
            [("toolcall", GT, GT), ("toolcall", WRONG, GT), ("toolcall", GT, GT)],
            corrgrpo_services={"toolcall": toolcall_url},
        )
    finally:
        verl_reward._Service._flush = original  # type: ignore[method-assign]
    assert seen == [3] and [s["score"] for s in out] == [out[0]["score"], out[1]["score"], out[0]["score"]]


def test_service_from_extra_info_and_errors_raise_or_zero(toolcall_url: str) -> None:
    services = {"toolcall": toolcall_url}
    (routed,) = scores([("rlla_4k", GT, GT, {"corrgrpo_service": "toolcall"})], corrgrpo_services=services)
    assert routed["score"] == pytest.approx(4)
    with pytest.raises(ValueError, match="no URL for corrgrpo service 'gsm8k'"):
        scores([("gsm8k", GT, GT)], corrgrpo_services=services)
    # a bad label: the service's 422 with the field
    with pytest.raises(RewardServiceError, match=r"items\.0\.nope"):
        scores([("toolcall", GT, {"ground_truth": GT, "nope": 1})], corrgrpo_services=services)


def test_unscorable_item_raises_or_zeros_with_the_same_keys() -> None:
    with start_service("code", env={"CORRGRPO_CODE_DATASETS": "humaneval"}) as service:
        services = {"code": service.url}
        with pytest.raises(RuntimeError, match="unknown_task"):
            scores([("code", "```python\nx = 1\n```", "no-such-task")], corrgrpo_services=services)
        scored, zeroed = scores(
            [
                ("code", "```python\nx = 1\n```", "HumanEval/0"),
                ("code", "```python\nx = 1\n```", "no-such-task"),
            ],
            corrgrpo_services=services,
            corrgrpo_on_error="zero",
        )
    assert set(scored) == set(zeroed) and scored["corrgrpo_error"] == ""
    assert zeroed["score"] == 0.0 and zeroed["correct"] == 0.0 and "unknown_task" in zeroed["corrgrpo_error"]


def verl_inputs(rewards: np.ndarray, uids: list[str]) -> dict:
    n = len(uids)
    return {
        "token_level_rewards": torch.zeros(n, 5),
        "response_mask": torch.ones(n, 5),
        "index": np.array(uids, dtype=object),
        "config": {"corrgrpo_reward_keys": ["a", "b", "c"], "corrgrpo_reward_weights": [1.0, 2.0, 1.0]},
        "non_tensor_batch": {
            "a": rewards[:, 0],
            "b": rewards[:, 1],
            "c": rewards[:, 2],
            "uid": np.array(uids),
        },
        "batch": None,
    }


def test_estimator_matches_corrgrpo_on_components() -> None:
    gen = np.random.default_rng(0)
    rewards = gen.normal(size=(12, 3)).astype(np.float32)
    # interleaved, as verl can be
    uids = ["p1", "p0", "p1", "p0", "p1", "p0", "p1", "p0", "p2", "p2", "p2", "p2"]
    advantages, returns = verl_estimator.compute_corrgrpo_outcome_advantage(**verl_inputs(rewards, uids))
    assert torch.equal(advantages, returns) and advantages.shape == (12, 5)
    weighted = torch.as_tensor(rewards) * torch.tensor([1.0, 2.0, 1.0])
    for uid in ("p0", "p1", "p2"):
        rows = [i for i, u in enumerate(uids) if u == uid]
        expected = corrgrpo(weighted[rows].unsqueeze(0))[0]
        assert torch.allclose(advantages[rows, 0], expected, atol=1e-6)
        assert torch.allclose(advantages[rows, 4], expected, atol=1e-6)  # same on every response token


def test_estimator_handles_uneven_groups() -> None:
    rewards = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
    uids = ["a", "a", "a", "b", "b", "b", "b"]
    advantages, _ = verl_estimator.compute_corrgrpo_outcome_advantage(**verl_inputs(rewards, uids))
    weighted = torch.as_tensor(rewards) * torch.tensor([1.0, 2.0, 1.0])
    assert torch.allclose(advantages[:3, 0], corrgrpo(weighted[:3].unsqueeze(0))[0], atol=1e-6)
    assert torch.allclose(advantages[3:, 0], corrgrpo(weighted[3:].unsqueeze(0))[0], atol=1e-6)


def test_anti_correlated_components_divide_by_sqrt_eps_as_the_authors() -> None:
    """b = 2(1 − a) weighed 2: ρ_ab = −1, c constant, Σρ = 0; verl's default ε (1e-6) under the root."""
    a = np.array([0.0] + [1.0] * 7, dtype=np.float32)
    rewards = np.stack([a, 2 * (1 - a), np.full(8, 0.5, dtype=np.float32)], axis=-1)
    advantages, _ = verl_estimator.compute_corrgrpo_outcome_advantage(**verl_inputs(rewards, ["p"] * 8))
    total = a + 4 * (1 - a)  # 4 − 3a: R still varies
    expected = torch.as_tensor((total - total.mean()) / math.sqrt(1e-6))  # 2625, −375 (1e-4 beside it: 10×)
    assert torch.allclose(advantages[:, 0], expected, rtol=1e-5)


def test_without_components_it_warns_and_centers_the_total() -> None:
    totals = torch.randn(8, 4)
    inputs = {
        "token_level_rewards": totals,
        "response_mask": torch.ones(8, 4),
        "index": np.array(list("aaaabbbb")),
    }
    with pytest.warns(UserWarning, match="corrgrpo_reward_keys"):
        advantages, _ = verl_estimator.compute_corrgrpo_outcome_advantage(**inputs)
    summed = totals.sum(-1).view(2, 4)
    expected = (summed - summed.mean(1, keepdim=True)) / math.sqrt(1 + CORRGRPO_EPS)  # K = 1: Σρ = 1, no std
    assert torch.allclose(advantages[:, 0], expected.flatten(), atol=1e-5)


def test_missing_component_key_is_a_clear_error() -> None:
    inputs = verl_inputs(np.zeros((4, 3), dtype=np.float32), list("aaaa"))
    del inputs["non_tensor_batch"]["b"]
    with pytest.raises(KeyError, match=r"\['b'\]"):
        verl_estimator.compute_corrgrpo_outcome_advantage(**inputs)


def verl_batch(outputs: list[dict[str, Any]], uids: list[str]) -> dict[str, Any]:
    """The estimator's inputs from `compute_score`'s outputs, as verl's legacy trainer builds them (one
    array per key)."""
    n = len(outputs)
    non_tensor = {key: np.array([output[key] for output in outputs]) for key in outputs[0] if key != "score"}
    totals = torch.zeros(n, 3)
    totals[:, -1] = torch.tensor([output["score"] for output in outputs])
    non_tensor["uid"] = np.array(uids, dtype=object)
    return {
        "token_level_rewards": totals,
        "response_mask": torch.ones(n, 3),
        "index": non_tensor["uid"],
        "non_tensor_batch": non_tensor,
    }


CODE_ANSWERS = [  # HumanEval/0: correct, wrong, not code, a syntax error
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n```",
    "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```",
    "no code at all",
    "```python\ndef has_close_elements(numbers, threshold)\n    return True\n```",
]


def test_declared_weights_without_reward_weights_and_score_is_the_weighted_sum(
    humaneval_code_url: str,
) -> None:
    """A verl user who sets no corrgrpo_reward_weights trains on the service's declared weights, not 1 each,
    and the `score` verl logs is the sum the estimator weighs; `corrgrpo_weights` overrides reach both."""
    declared = {spec.name: spec.weight for spec in RewardClient(humaneval_code_url).components().components}
    assert len(set(declared.values())) > 1  # not all equal: all-1 weights would give other advantages
    for overrides, weights in ((None, declared), ({"code": {"efficiency": 0.0, "correct": 2.0}}, None)):
        weights = weights or {**declared, "efficiency": 0.0, "correct": 2.0}
        outputs = scores(
            [("code", answer, "HumanEval/0") for answer in CODE_ANSWERS],
            corrgrpo_services={"code": humaneval_code_url},
            corrgrpo_weights=overrides,
        )
        for output in outputs:
            assert json.loads(output["corrgrpo_weights"]) == weights
            assert output["score"] == pytest.approx(sum(weights[k] * output[k] for k in declared))
        components = torch.tensor([[output[k] for k in declared] for output in outputs], dtype=torch.float32)
        advantages, _ = verl_estimator.compute_corrgrpo_outcome_advantage(
            **verl_batch(outputs, ["g"] * 4), config={}
        )
        expected = corrgrpo((components * torch.tensor(list(weights.values()))).unsqueeze(0))[0]
        assert torch.allclose(advantages[:, 0], expected, atol=1e-5)
        assert not torch.allclose(advantages[:, 0], corrgrpo(components.unsqueeze(0))[0], atol=1e-3)


def test_an_unscored_rollout_is_missing_not_zero(humaneval_code_url: str) -> None:
    """`corrgrpo_on_error=zero` gives verl a score of 0, but the estimator leaves the rollout out of its
    group: advantage 0, and the others' as if it had not been there (the rule of corrgrpo_proto.common)."""
    samples = [("code", answer, "HumanEval/0") for answer in CODE_ANSWERS[:3]] + [
        ("code", CODE_ANSWERS[0], "NoSuch/1")
    ]
    outputs = scores(samples, corrgrpo_services={"code": humaneval_code_url}, corrgrpo_on_error="zero")
    assert "unknown_task" in outputs[3]["corrgrpo_error"] and outputs[3]["score"] == 0.0
    advantages, _ = verl_estimator.compute_corrgrpo_outcome_advantage(
        **verl_batch(outputs, ["g"] * 4), config={}
    )
    alone, _ = verl_estimator.compute_corrgrpo_outcome_advantage(
        **verl_batch(outputs[:3], ["g"] * 3), config={}
    )
    assert advantages[3, 0] == 0.0 and torch.allclose(advantages[:3], alone, atol=1e-6)


def test_reward_weights_must_agree_with_the_scored_ones_and_exist(humaneval_code_url: str) -> None:
    outputs = scores(
        [("code", answer, "HumanEval/0") for answer in CODE_ANSWERS],
        corrgrpo_services={"code": humaneval_code_url},
    )
    batch = verl_batch(outputs, ["g"] * 4)
    keys = ["correct", "format"]
    with pytest.warns(UserWarning, match="weigh in the score but are not in corrgrpo_reward_keys"):
        verl_estimator.compute_corrgrpo_outcome_advantage(**batch, config={"corrgrpo_reward_keys": keys})
    with pytest.raises(ValueError, match="differ from the weights the services scored with"):
        verl_estimator.compute_corrgrpo_outcome_advantage(
            **batch, config={"corrgrpo_reward_keys": keys, "corrgrpo_reward_weights": [1.0, 1.0]}
        )
    # another reward function's batch: no declared weights to use
    del batch["non_tensor_batch"]["corrgrpo_weights"]
    with pytest.raises(ValueError, match="no weights for"):
        verl_estimator.compute_corrgrpo_outcome_advantage(**batch, config={"corrgrpo_reward_keys": keys})


def test_v1_sessions_count_once_by_their_final_output() -> None:
    """Keys `{uid}_{session}_{index}` as verl's v1 agent loop writes them; a uid may hold underscores."""
    keys = ["p_1_0_1", "p_1_0_0", "p_1_1_0", "q_0_0"]
    extra = [
        {"reward_extra_info": {"a": 1.0, "b": 2.0}},
        {"reward_extra_info": {"a": 1.0, "b": 2.0}},
        {"reward_extra_info": {"a": 0.0}},
        {},
    ]
    sessions = verl_estimator.sessions_of(keys, extra)
    assert sessions.final.tolist() == [0, 2, 3]  # session p_1_0's final output is index 1, row 0
    assert sessions.session_of.tolist() == [0, 0, 1, 2]
    assert sessions.columns["a"].tolist() == [1.0, 1.0, 0.0, None] and sessions.columns["b"].tolist()[2:] == [
        None,
        None,
    ]
