"""verl interop: `compute_score` against a real service, and the CorrGRPO estimator's verl signature.

verl itself is not installed here (0.9.1 pins transformers<5.11 and needs ray; TRL 1.16 needs a newer
transformers), so the estimator is tested against verl's documented call signature, and registration
against a stand-in `register_adv_est` (the README states this limitation).
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from importlib.metadata import entry_points

import numpy as np
import pytest
import torch
from servers import start_service

from corrgrpo_proto import verl as verl_rewards
from corrgrpo_trainer import verl_plugin
from corrgrpo_trainer.advantages import corrgrpo

GT = '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}\n</tool_call>'
WRONG = '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Rome", "unit": "C"}}\n</tool_call>'


@pytest.fixture
def toolcall_url(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    with start_service("toolcall") as service:
        monkeypatch.setenv("CORRGRPO_TOOLCALL_URL", service.url)
        verl_rewards._client.cache_clear()
        yield service.url
        verl_rewards._client.cache_clear()


def test_compute_score_returns_total_and_components(toolcall_url: str) -> None:
    right = verl_rewards.compute_score("rlla_4k", GT, GT, {"index": 0})
    wrong = verl_rewards.compute_score("rlla_4k", WRONG, GT)
    assert right["score"] == pytest.approx(1 + 3)  # format 1 + correctness 3
    assert set(right) >= {"score", "format", "name", "param_names", "param_values"}
    assert right["name"] + right["param_names"] + right["param_values"] == pytest.approx(3)
    assert wrong["param_values"] < right["param_values"] and wrong["name"] == right["name"]


def test_compute_score_batch_keeps_order(toolcall_url: str) -> None:
    scores = verl_rewards.compute_score_batch(["toolrl", "toolrl", "toolrl"], [GT, WRONG, GT], [GT] * 3, [None] * 3)
    assert [s["score"] for s in scores] == [scores[0]["score"], scores[1]["score"], scores[0]["score"]]
    assert scores[1]["score"] < scores[0]["score"]


def test_unscorable_item_raises_or_zeros(monkeypatch: pytest.MonkeyPatch) -> None:
    with start_service("code") as service:
        monkeypatch.setenv("CORRGRPO_CODE_URL", service.url)
        verl_rewards._client.cache_clear()
        with pytest.raises(RuntimeError, match="unknown_task"):
            verl_rewards.compute_score("leetcode", "```python\nx = 1\n```", "no-such-task")
        monkeypatch.setenv("CORRGRPO_VERL_ON_ERROR", "zero")
        zeroed = verl_rewards.compute_score("leetcode", "```python\nx = 1\n```", "no-such-task")
        assert zeroed["score"] == 0.0 and zeroed["correct"] == 0.0 and "unknown_task" in zeroed["corrgrpo_error"]
        verl_rewards._client.cache_clear()


def test_routing_and_item_building() -> None:
    assert verl_rewards.service_for("newfacade/LeetCodeDataset", None) == "code"
    assert verl_rewards.service_for("anything", {"corrgrpo_service": "agentdojo"}) == "agentdojo"
    with pytest.raises(ValueError, match="no corrgrpo service"):
        verl_rewards.service_for("gsm8k", None)
    problem = {"task_id": "t", "entry_point": "f", "test": "def check(c): pass", "reference": "def f(): pass"}
    assert verl_rewards.build_item("code", "c", json.dumps(problem), None)["problem"] == problem
    assert verl_rewards.build_item("code", "c", "HumanEval/0", None) == {"completion": "c", "task_id": "HumanEval/0"}
    spec = {"suite": "banking", "user_task": "user_task_0"}
    calls = [{"function": "get_balance", "args": {}}]
    item = verl_rewards.build_item("agentdojo", "done", json.dumps(spec), {"tool_calls": calls})
    assert item == {**spec, "tool_calls": calls, "final_answer": "done"}


def verl_inputs(rewards: np.ndarray, uids: list[str]) -> dict:
    n = len(uids)
    return {
        "token_level_rewards": torch.zeros(n, 5),
        "response_mask": torch.ones(n, 5),
        "index": np.array(uids, dtype=object),
        "config": {"corrgrpo_reward_keys": ["a", "b", "c"], "corrgrpo_reward_weights": [1.0, 2.0, 1.0]},
        "non_tensor_batch": {"a": rewards[:, 0], "b": rewards[:, 1], "c": rewards[:, 2], "uid": np.array(uids)},
        "batch": None,
    }


def test_estimator_matches_corrgrpo_on_components() -> None:
    gen = np.random.default_rng(0)
    rewards = gen.normal(size=(12, 3)).astype(np.float32)
    uids = ["p1", "p0", "p1", "p0", "p1", "p0", "p1", "p0", "p2", "p2", "p2", "p2"]  # interleaved, as verl can be
    advantages, returns = verl_plugin.compute_corrgrpo_outcome_advantage(**verl_inputs(rewards, uids))
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
    advantages, _ = verl_plugin.compute_corrgrpo_outcome_advantage(**verl_inputs(rewards, uids))
    weighted = torch.as_tensor(rewards) * torch.tensor([1.0, 2.0, 1.0])
    assert torch.allclose(advantages[:3, 0], corrgrpo(weighted[:3].unsqueeze(0))[0], atol=1e-6)
    assert torch.allclose(advantages[3:, 0], corrgrpo(weighted[3:].unsqueeze(0))[0], atol=1e-6)


def test_without_components_it_warns_and_centers_the_total() -> None:
    totals = torch.randn(8, 4)
    inputs = {"token_level_rewards": totals, "response_mask": torch.ones(8, 4), "index": np.array(list("aaaabbbb"))}
    with pytest.warns(UserWarning, match="corrgrpo_reward_keys"):
        advantages, _ = verl_plugin.compute_corrgrpo_outcome_advantage(**inputs)
    summed = totals.sum(-1).view(2, 4)
    expected = (summed - summed.mean(1, keepdim=True)) / (1 + 1e-4)  # K = 1: Σρ = 1, no std scaling
    assert torch.allclose(advantages[:, 0], expected.flatten(), atol=1e-5)


def test_missing_component_key_is_a_clear_error() -> None:
    inputs = verl_inputs(np.zeros((4, 3), dtype=np.float32), list("aaaa"))
    del inputs["non_tensor_batch"]["b"]
    with pytest.raises(KeyError, match=r"\['b'\]"):
        verl_plugin.compute_corrgrpo_outcome_advantage(**inputs)


def test_entry_point_registers_with_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    (point,) = [ep for ep in entry_points(group="verl.plugins") if ep.name == "corrgrpo"]
    registry: dict[str, object] = {}

    def register_adv_est(name: str):  # verl's decorator-factory signature
        def wrap(fn: object) -> object:
            registry[name] = fn
            return fn

        return wrap

    for name in ("verl", "verl.trainer", "verl.trainer.ppo"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    core_algos = types.ModuleType("verl.trainer.ppo.core_algos")
    core_algos.register_adv_est = register_adv_est  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", core_algos)
    module = importlib.reload(importlib.import_module(point.value))
    assert registry == {"corrgrpo": module.compute_corrgrpo_outcome_advantage}
