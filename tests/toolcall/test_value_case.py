"""Parameter values are compared exactly, as the authors compare them (`==` on the decoded JSON): case
included.

"PARIS" is not "Paris": a policy must not earn `param_values` for a value it got only up to case, at the top
level of the parameters or inside a list or an object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corrgrpo_toolcall.matching import RANGES
from corrgrpo_toolcall.scoring import score

LOW, HIGH = RANGES["param_values"]


def response(parameters: dict[str, Any]) -> str:
    call = json.dumps({"name": "get_weather", "parameters": parameters})
    return f"<think>reasoning</think>\n<tool_call>\n{call}\n</tool_call>"


def param_values(predicted: dict[str, Any], truth: dict[str, Any]) -> float:
    return score(response(predicted), response(truth)).components["param_values"]


@pytest.mark.parametrize(
    ("truth", "shouted"),
    [
        ({"city": "Paris"}, {"city": "PARIS"}),
        ({"cities": ["Paris", "Lyon"]}, {"cities": ["PARIS", "LYON"]}),
        ({"place": {"city": "Paris"}}, {"place": {"city": "PARIS"}}),
    ],
    ids=["value", "in-a-list", "in-an-object"],
)
def test_a_value_right_only_up_to_case_earns_nothing(truth: dict[str, Any], shouted: dict[str, Any]) -> None:
    assert param_values(truth, truth) == HIGH  # the control: the same value earns the full range
    assert param_values(shouted, truth) == LOW


def test_names_keep_their_case_too() -> None:
    """The parameter's name is matched exactly as well: `City` is another parameter."""
    assert (
        score(response({"City": "Paris"}), response({"city": "Paris"})).components["param_names"]
        == RANGES["param_names"][0]
    )
