"""Parity with the authors' tool-call reward (CorrGRPO's fork of ToolRL, `verl/utils/reward_score/rlla.py`).

Their definition, restated: `name` = s_name − 0.5, `param_names` = 2·s_params/|gt calls| − 1, `param_values` =
3·s_values/Σparams − 1.5 (1.5 when the ground truth's calls take no parameters), all three at their maximum on
an exact match and at their minimum (−0.5, −1, −1.5) when the prediction cannot be read; 0 when the ground
truth has no call. Format: `^<think>.*?</think>\\s*<tool_call>\\n.*?\\n</tool_call>…$` with one of each tag
the ground truth uses; thinking models may leave out the opening `<think>`. The tables below are worked out
from that by hand; the RLLA-4K rows check closed forms on single-call rows and an independent restatement
(`authors`) on every row.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from corrgrpo_testing.environment import require_shared_data
from corrgrpo_toolcall.datasets import Example, load_rlla4k
from corrgrpo_toolcall.response import FormatRules
from corrgrpo_toolcall.scoring import score

Call = dict[str, Any]
Components = tuple[float, float, float]  # name, param_names, param_values
WORST: Components = (-0.5, -1.0, -1.5)
BEST: Components = (0.5, 1.0, 1.5)


def text(calls: list[Any], think: str = "t", reply: str | None = None, gap: str = "\n") -> str:
    """A ToolRL response: think, one JSON per line in a `<tool_call>` block, an optional `<response>`."""
    lines = "\n".join(c if isinstance(c, str) else json.dumps(c) for c in calls)
    body = f"<think>{think}</think>{gap}<tool_call>\n{lines}\n</tool_call>"
    return body + (f"{gap}<response>{reply}</response>" if reply is not None else "")


A = {"name": "a", "parameters": {"x": 1, "y": "s"}}
B = {"name": "b", "parameters": {"z": [1, 2]}}
PING = {"name": "ping", "parameters": {}}

# (ground truth calls, predicted completion, expected (name, param_names, param_values)), each worked out by
# hand.
TABLE: list[tuple[str, list[Call], str, Components]] = [
    ("exact", [A, B], text([A, B]), BEST),
    ("swapped calls", [A, B], text([B, A]), BEST),
    # names {a} vs {a, b}: 1/2; one of two calls matched fully (2 names + 1 value of 3): 0.5·1 − 0.5, 2·1/2 −
    # 1, 3·2/3 − 1.5
    ("missing call", [A, B], text([A]), (0.0, 0.0, 0.5)),
    # extra call: names 2/3; both gt calls matched fully
    ("extra call", [A, B], text([A, B, PING]), (2 / 3 - 0.5, 1.0, 1.5)),
    ("wrong name", [A], text([{**A, "name": "c"}]), WORST),
    # keys {x, y} vs {x}: Jaccard 1/2, one value equal: 2·(1/2) − 1 = 0, 3·(1/2) − 1.5 = 0
    ("missing parameter", [A], text([{"name": "a", "parameters": {"x": 1}}]), (0.5, 0.0, 0.0)),
    # keys {x, y} vs {x, y, w}: Jaccard 2/3, both values equal
    (
        "extra parameter",
        [A],
        text([{"name": "a", "parameters": {**A["parameters"], "w": 0}}]),
        (0.5, 1 / 3, 1.5),
    ),
    ("wrong value", [A], text([{"name": "a", "parameters": {"x": 2, "y": "s"}}]), (0.5, 1.0, 0.0)),
    ("1.0 equals 1", [A], text([{"name": "a", "parameters": {"x": 1.0, "y": "s"}}]), BEST),
    (
        "nothing to get wrong in values",
        [PING],
        text([{"name": "other", "parameters": {}}]),
        (-0.5, -1.0, 1.5),
    ),
    # a parameterless ground truth's call is not matched by a call with parameters (Jaccard 0, no values)
    (
        "parameters where none are taken",
        [PING],
        text([{"name": "ping", "parameters": {"q": 1}}]),
        (0.5, -1.0, 1.5),
    ),
    ("empty call list", [A], text([""]), WORST),
    ("no block", [A], "<think>t</think>\n<response>hi</response>", WORST),
    ("bad JSON", [A], text(['{"name": "a", "parameters": {']), WORST),
    ("unclosed block", [A], "<think>t</think>\n<tool_call>\n" + json.dumps(A), WORST),
    ("same-name call without parameters", [A], text([{"name": "a"}]), WORST),
    # a foreign call the matching never reads only widens the name union: names 1/2
    ("foreign call left alone", [A], text([A, {"name": 7}]), (0.0, 1.0, 1.5)),
    ("call that is not an object", [A], text([A, '["a"]']), WORST),
]


@pytest.mark.parametrize(
    ("truth", "completion", "expected"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_components_table(truth: list[Call], completion: str, expected: Components) -> None:
    result = score(completion, text(truth))
    assert tuple(result.components.values()) == pytest.approx(expected, abs=1e-12)


def test_a_ground_truth_without_calls_scores_zero_whatever_the_prediction() -> None:
    truth = "<think>t</think>\n<response>No tool needed.</response>"
    for completion in (truth, text([A]), "garbage"):
        assert tuple(score(completion, truth).components.values()) == (0.0, 0.0, 0.0)


# (response, ground truth, think_open, expected format), worked out from the pattern.
FORMATS: list[tuple[str, str, str, bool, float]] = [
    ("one newline", text([A]), text([A]), False, 1.0),
    ("spaces between blocks", text([A], gap="  "), text([A]), False, 1.0),
    ("nothing between blocks", text([A], reply="r", gap=""), text([A], reply="r"), False, 1.0),
    (
        "no newline inside the block",
        "<think>t</think>\n<tool_call>" + json.dumps(A) + "</tool_call>",
        text([A]),
        False,
        0.0,
    ),
    ("thinking model, strict", text([A])[len("<think>") :], text([A]), False, 0.0),
    ("thinking model, relaxed", text([A])[len("<think>") :], text([A]), True, 1.0),
    (
        "relaxed still needs </think>",
        "<tool_call>\n" + json.dumps(A) + "\n</tool_call>",
        text([A]),
        True,
        0.0,
    ),
    ("a response the truth lacks", text([A], reply="r"), text([A]), False, 0.0),
    ("missing response", text([A]), text([A], reply="r"), False, 0.0),
    ("two blocks", text([A]) + "\n" + text([B])[len("<think>t</think>\n") :], text([A]), False, 0.0),
]


@pytest.mark.parametrize(
    ("completion", "truth", "think_open", "expected"),
    [row[1:] for row in FORMATS],
    ids=[row[0] for row in FORMATS],
)
def test_format_table(completion: str, truth: str, think_open: bool, expected: float) -> None:
    assert score(completion, truth, FormatRules(optional_think_open=think_open)).format == expected


def test_strict_separators_are_toolrls_original() -> None:
    assert score(text([A], gap="  "), text([A]), FormatRules(lenient_separators=False)).format == 0.0


def test_toolrl_single_correctness_is_kept() -> None:
    # S_max = 1 + (1 + 2) + (1 + 1) = 6; missing call: s = 1/2 + 1 + 2 → 6·3.5/6 − 3 = 0.5
    assert score(text([A]), text([A, B])).matching.toolrl_correctness == pytest.approx(0.5)  # type: ignore[union-attr]
    assert score(text([A, B]), text([A, B])).matching.toolrl_correctness == pytest.approx(3.0)  # type: ignore[union-attr]


# ------------------------------------------------------------------ RLLA-4K test rows, perturbed


def authors(completion: str, truth: str, think_open: bool = False) -> tuple[float, ...]:
    """(format, name, param_names, param_values) by the authors' definition, restated independently."""
    response = completion.split("<|im_start|>assistant")[-1].split("<|im_end|>")[0].strip()
    wants = [tag for tag in ("tool_call", "response") if f"<{tag}>" in truth]
    blocks = {"tool_call": r"<tool_call>\n.*?\n</tool_call>", "response": r"<response>.*?</response>"}
    pattern = (
        ("^(?:<think>)?" if think_open else "^<think>")
        + ".*?</think>"
        + "".join(r"\s*" + blocks[t] for t in wants)
        + "$"
    )
    counted = all(response.count(f"<{t}>") == response.count(f"</{t}>") == 1 for t in wants)
    fmt = 1.0 if re.search(pattern, response, re.DOTALL) and counted else 0.0
    if "<tool_call>" not in truth:
        return (fmt, 0.0, 0.0, 0.0)
    gt = [
        json.loads(line)
        for line in truth.split("<tool_call>")[1].split("</tool_call>")[0].strip().split("\n")
    ]
    try:
        if "<tool_call>" not in response or "</tool_call>" not in response:
            raise ValueError("no block")
        block = response.split("<tool_call>")[1].split("</tool_call>")[0].strip()
        predicted = [json.loads(line) for line in block.split("\n")]
        return (fmt, *matched(gt, predicted))
    except (ValueError, KeyError, TypeError, AttributeError):
        return (fmt, *WORST)


def matched(gt: list[Call], predicted: list[Any]) -> Components:
    if gt == predicted:
        return BEST

    def similarity(left: list[Any], right: list[Any]) -> float:
        if not left and not right:
            return 1.0
        shared = sum((Counter(left) & Counter(right)).values())
        return shared / (len(left) + len(right) - shared)

    names = similarity([c["name"] for c in gt], [c["name"] for c in predicted])
    keys = values = 0.0
    taken: set[int] = set()
    for call in gt:
        options = [
            (
                similarity(list(call["parameters"]), list(p["parameters"])),
                sum(p["parameters"].get(k, object()) == v for k, v in call["parameters"].items()),
                i,
            )
            for i, p in enumerate(predicted)
            if i not in taken and p["name"] == call["name"]
        ]
        best = max(options, key=lambda o: (o[0] + o[1], -o[2]), default=None)
        if best is not None and best[0] + best[1] > 0:
            taken.add(best[2])
            keys, values = keys + best[0], values + best[1]
    params = sum(len(c["parameters"]) for c in gt)
    return (names - 0.5, 2 * keys / len(gt) - 1, 3 * values / params - 1.5 if params else 1.5)


def calls_of(truth: str) -> list[Call]:
    return [
        json.loads(line) for line in truth.split("<tool_call>\n")[1].split("\n</tool_call>")[0].split("\n")
    ]


def rebuild(example: Example, calls: list[Any], **layout: Any) -> str:
    think = example.ground_truth.split("<think>")[1].split("</think>")[0]
    reply = (
        example.ground_truth.split("<response>")[1].split("</response>")[0]
        if "<response>" in example.ground_truth
        else None
    )
    return text(calls, think=think, reply=reply, **layout)


def first_with_params(calls: list[Call]) -> int | None:
    return next((i for i, c in enumerate(calls) if c["parameters"]), None)


def with_call(calls: list[Call], index: int, **change: Any) -> list[Call]:
    return [{**c, **change} if i == index else c for i, c in enumerate(calls)]


def drop_first_param(calls: list[Call]) -> list[Call] | None:
    i = first_with_params(calls)
    return (
        None if i is None else with_call(calls, i, parameters=dict(list(calls[i]["parameters"].items())[1:]))
    )


def wrong_first_value(calls: list[Call]) -> list[Call] | None:
    i = first_with_params(calls)
    if i is None:
        return None
    key = next(iter(calls[i]["parameters"]))
    return with_call(calls, i, parameters={**calls[i]["parameters"], key: "__not_the_value__"})


Perturbation = Callable[[Example, list[Call]], "str | None"]
PERTURBATIONS: dict[str, Perturbation] = {
    "exact": lambda e, calls: e.ground_truth,
    "wrong name": lambda e, calls: rebuild(e, with_call(calls, 0, name=calls[0]["name"] + "_v2")),
    "missing parameter": lambda e, calls: (c := drop_first_param(calls)) and rebuild(e, c),
    "extra parameter": lambda e, calls: rebuild(
        e, with_call(calls, 0, parameters={**calls[0]["parameters"], "extra": 1})
    ),
    "wrong value": lambda e, calls: (c := wrong_first_value(calls)) and rebuild(e, c),
    "missing call": lambda e, calls: rebuild(e, calls[:-1]) if len(calls) > 1 else None,
    "swapped calls": lambda e, calls: rebuild(e, calls[::-1]) if len(calls) > 1 else None,
    "empty call list": lambda e, calls: rebuild(e, [""]),
    "no block": lambda e, calls: e.ground_truth.split("<tool_call>")[0] + "<response>done</response>",
    "bad JSON": lambda e, calls: rebuild(e, [json.dumps(calls[0])[:-1], *calls[1:]]),
    "thinking model": lambda e, calls: e.ground_truth[len("<think>") :],
    "spaced blocks": lambda e, calls: rebuild(e, calls, gap=" \n "),
    "no newline in block": lambda e, calls: e.ground_truth.replace("<tool_call>\n", "<tool_call>"),
    "chat template": lambda e, calls: f"<|im_start|>assistant\n{e.ground_truth}<|im_end|>\n",
    "foreign extra call": lambda e, calls: rebuild(e, [*calls, {"name": 7}]),
    "same name, no parameters": lambda e, calls: rebuild(e, with_call(calls, 0, parameters=None)),
}


def perturbed_rows() -> list[tuple[str, str, str]]:
    """(perturbation, completion, ground truth) for every RLLA-4K test row and perturbation that applies to
    it."""
    rows = []
    for example in load_rlla4k(require_shared_data("rlla_4k/test.parquet")):
        if "<tool_call>" not in example.ground_truth:  # the 9 response-only rows: any prediction scores 0
            rows += [
                ("no call expected", c, example.ground_truth) for c in (example.ground_truth, text([PING]))
            ]
            continue
        calls = calls_of(example.ground_truth)
        for name, perturb in PERTURBATIONS.items():
            completion = perturb(example, calls)
            if completion:
                rows.append((name, completion, example.ground_truth))
    return rows


def ours(completion: str, truth: str, think_open: bool = False) -> tuple[float, ...]:
    result = score(completion, truth, FormatRules(optional_think_open=think_open))
    return (result.format, *result.components.values())


def test_single_call_rows_have_the_closed_forms() -> None:
    """Single-call rows with P parameters: each perturbation's components in closed form."""
    checked = 0
    for example in load_rlla4k(require_shared_data("rlla_4k/test.parquet")):
        if "<tool_call>" not in example.ground_truth or len(calls_of(example.ground_truth)) != 1:
            continue
        [call] = calls_of(example.ground_truth)
        p = len(call["parameters"])
        # one parameter left out of one: nothing shared, the call is not matched (only its name counts)
        missing = (0.5, -1.0, -1.5) if p == 1 else (0.5, 2 * (p - 1) / p - 1, 3 * (p - 1) / p - 1.5)
        expected = {
            "exact": BEST,
            "wrong name": WORST,
            "missing parameter": missing,
            "extra parameter": (0.5, 2 * p / (p + 1) - 1, 1.5),
            "wrong value": (0.5, 1.0, 3 * (p - 1) / p - 1.5),
            "empty call list": WORST,
            "bad JSON": WORST,
            "same name, no parameters": WORST,
            "foreign extra call": (0.0, 1.0, 1.5),
        }
        for name, components in expected.items():
            completion = PERTURBATIONS[name](example, [call])
            assert ours(completion, example.ground_truth)[1:] == pytest.approx(components, abs=1e-12), (
                example.id,
                name,
            )
        checked += 1
    assert checked == 36  # RLLA-4K test: 36 rows with one call, each with 1 to 6 parameters


@pytest.mark.parametrize("think_open", [False, True], ids=["instruct", "thinking"])
def test_every_perturbed_rlla4k_row_agrees_with_the_authors(think_open: bool) -> None:
    rows = perturbed_rows()
    disagreements = [
        (name, completion)
        for name, completion, truth in rows
        if ours(completion, truth, think_open)
        != pytest.approx(authors(completion, truth, think_open), abs=1e-12)
    ]
    assert len(rows) > 900 and disagreements == []
