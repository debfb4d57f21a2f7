"""Trailing end tokens of any tokenizer never change a score, in any service (real service processes).

OpenRLHF decodes the query with special tokens kept, so a completion that stopped on EOS ends in the
tokenizer's end-of-turn or end-of-sequence token, sometimes several (end of turn, then EOS or padding).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from corrgrpo_code.efficiency import efficiency
from corrgrpo_testing.servers import start_service

END_TAILS = [
    "<|im_end|>",
    "<|endoftext|>",
    "</s>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|im_end|>\n<|endoftext|>",
    "\n</s></s>",
]
GT = '<think>x</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1, "b": "x"}}\n</tool_call>'
HUMANEVAL_0 = (
    "def has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"
)
PAY_BILL = (  # banking user_task_0: pay bill-december-2023.txt
    '<tool_call>\n{"name": "send_money", "arguments": {"recipient": "UK12345678901234567890", '
    '"amount": 98.7, "subject": "Car Rental", "date": "2022-01-01"}}\n</tool_call>'
)
CASES = {
    "toolcall": [
        {"completion": GT, "ground_truth": GT},
        {"completion": GT.replace('"a": 1', '"a": 2'), "ground_truth": GT},
        {"completion": "<think>x</think> no call", "ground_truth": GT},
    ],
    "code": [
        {"completion": f"```python\n{HUMANEVAL_0}```", "task_id": "HumanEval/0"},
        {"completion": f"Here it is:\n```python\n{HUMANEVAL_0}```", "task_id": "HumanEval/0"},
        {
            "completion": "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```",
            "task_id": "HumanEval/0",
        },
    ],
    "agentdojo": [
        {
            "suite": "banking",
            "user_task": "user_task_0",
            "completion": f"{PAY_BILL}\n<response>Paid.</response>",
        },
        {"suite": "banking", "user_task": "user_task_0", "completion": "<response>I paid it.</response>"},
    ],
}
# paper: each efficiency is the formula of its item's t and t_ref (`exact`)
ENV = {"code": {"CORRGRPO_CODE_DATASETS": "humaneval", "CORRGRPO_CODE_EFFICIENCY_MODE": "paper"}}


def exact(result: dict) -> dict[str, float]:
    """The components that are a function of the text; `efficiency`, of measured times, is replaced by whether
    it is the formula of the `t` and `t_ref` its item reports (0 when not correct)."""
    components = dict(result["components"])
    if "efficiency" in components:
        info = result["info"]
        components["efficiency"] = float(
            components["efficiency"] == efficiency(info["t"] or 0.0, info.get("t_ref"))
        )
    return components


@pytest.fixture(scope="module", params=sorted(CASES))
def service(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    with start_service(request.param, env=ENV.get(request.param)) as running:
        yield request.param, running.url


def test_trailing_end_tokens_do_not_change_the_score(service: tuple[str, str]) -> None:
    name, url = service
    items = [
        {**case, "completion": case["completion"] + tail} for case in CASES[name] for tail in ["", *END_TAILS]
    ]
    answer = httpx.post(f"{url}/v1/score", json={"items": items}, timeout=300)
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert all(r["error"] is None for r in results), json.dumps(results)[:2000]
    per_case = len(END_TAILS) + 1
    for start in range(0, len(results), per_case):
        plain, *with_tails = results[start : start + per_case]
        for tail, result in zip(END_TAILS, with_tails, strict=True):
            assert exact(result) == exact(plain), f"{name}: {items[start]['completion']!r} + {tail!r}"
    totals = [results[start]["total"] for start in range(0, len(results), per_case)]
    assert len(set(totals)) > 1, "the cases must score differently, or the test proves nothing"
