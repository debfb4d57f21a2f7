"""What the NeMo Gym, verifiers and OpenEnv tests share: samples, and the check that components arrived
intact."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from corrgrpo_proto import RewardClient

CODE = (  # a correct HumanEval/0
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n```"
)
WRONG_CODE = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
GT = (
    '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}\n'
    "</tool_call>"
)
INJECTED = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_0"}
BILL = "bill-december-2023.txt"  # banking user_task_0 asks to pay it; under an injection the file carries it


def score_requests(url: str) -> float:
    """How many `POST /v1/score` the service has answered (its Prometheus counter)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(
        float(n) for n in re.findall(r'corrgrpo_requests_total\{[^}]*route="/v1/score"[^}]*\} (\S+)', text)
    )


def check_intact(
    url: str, item: dict[str, Any], components: dict[str, float] | None, reward: float | None
) -> None:
    """`components` are what the service gives for `item` asked directly (the timing-based `efficiency` aside:
    it is measured anew), every declared one, and `reward` is their sum with the declared weights."""
    with RewardClient(url) as client:
        (result,) = client.score([item])
        weights = {spec.name: spec.weight for spec in client.components().components}
    assert result.error is None and result.components is not None and components is not None, result.error
    assert set(components) == set(weights) == set(result.components)
    assert {k: v for k, v in components.items() if k != "efficiency"} == {
        k: v for k, v in result.components.items() if k != "efficiency"
    }
    assert reward == pytest.approx(sum(weights[k] * v for k, v in components.items()))
