"""The pure scoring functions: ToolRL's test vectors, edge cases, and properties of the components.

Parity with the authors' per-component definition, case by case and on RLLA-4K rows: test_parity.py."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrgrpo_toolcall.calls import ParseCaps
from corrgrpo_toolcall.matching import RANGES, json_equal
from corrgrpo_toolcall.response import FormatRules, extract_response, format_score
from corrgrpo_toolcall.scoring import score


def calls_block(*calls: dict[str, Any]) -> str:
    return "<tool_call>\n" + "\n".join(json.dumps(c) for c in calls) + "\n</tool_call>"


def response(*calls: dict[str, Any], think: str = "reasoning", reply: str | None = None) -> str:
    text = f"<think>{think}</think>\n" + calls_block(*calls)
    return text + (f"\n<response>{reply}</response>" if reply is not None else "")


def correctness(completion: str, ground_truth: str) -> float:
    """ToolRL's single correctness, kept beside the components."""
    matching = score(completion, ground_truth).matching
    assert matching is not None
    return matching.toolrl_correctness


def components(completion: str, ground_truth: str) -> tuple[float, ...]:
    return tuple(score(completion, ground_truth).components.values())


WEATHER = {"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}
TIME = {"name": "get_time", "parameters": {"zone": "CET"}}
GT = response(WEATHER, TIME)


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (response(WEATHER, TIME), 3.0),  # exact
        (response(TIME, WEATHER), 3.0),  # calls swapped
        # one wrong value
        (response({**WEATHER, "parameters": {"city": "Paris", "unit": "kelvin"}}, TIME), 2.0),
        (response(WEATHER), 0.5),  # second call missing
        # wrong tools
        (response({"name": "get_news", "parameters": {}}, {"name": "get_stock", "parameters": {}}), -3.0),
        # bad JSON
        ('<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {\n</tool_call>', -3.0),
    ],
    ids=["exact", "swapped", "one-wrong-value", "second-missing", "wrong-tool", "bad-json"],
)
def test_toolrl_vectors(completion: str, expected: float) -> None:
    assert correctness(completion, GT) == pytest.approx(expected, abs=1e-12)
    assert score(completion, GT).format == 1.0


def test_each_component_is_its_matching_score_over_its_own_maximum() -> None:
    # TIME missing, WEATHER's unit wrong: s_name 1/2 of 1, s_params 1 of 2 calls, s_values 1 of 3 values.
    result = score(response({**WEATHER, "parameters": {"city": "Paris", "unit": "kelvin"}}), GT)
    assert result.components == pytest.approx(
        {"name": 0.5 - 0.5, "param_names": 2 * 1 / 2 - 1, "param_values": 3 * 1 / 3 - 1.5}
    )
    assert result.matching is not None and result.matching.toolrl_correctness == pytest.approx(
        6 * 2.5 / 6 - 3
    )


def test_unparseable_puts_each_component_at_its_minimum() -> None:
    # values at −1.5 even with none to get right
    for truth in (GT, response({"name": "ping", "parameters": {}})):
        result = score("<think>no calls</think>\n<response>hi</response>", truth)
        assert result.components == {"name": -0.5, "param_names": -1.0, "param_values": -1.5}
        assert result.reason == "no <tool_call>…</tool_call> block"


def test_response_only_ground_truth_gives_zero_and_checks_the_response_layout() -> None:
    truth = "<think>no tool needed</think>\n<response>Hello!</response>"
    for completion in (truth, response(WEATHER)):
        result = score(completion, truth)
        assert result.components == {"name": 0.0, "param_names": 0.0, "param_values": 0.0}
        assert result.matching is None
    assert score(truth, truth).format == 1.0
    assert score(response(WEATHER), truth).format == 0.0


def test_values_compare_as_json_types() -> None:
    truth = response({"name": "f", "parameters": {"n": 1, "flag": True}})
    assert correctness(
        response({"name": "f", "parameters": {"n": 1.0, "flag": True}}), truth
    ) == pytest.approx(3.0)
    # S_max = 1 + 1 + 2 = 4; one of two values wrong → 6·3/4 − 3 = 1.5
    assert correctness(
        response({"name": "f", "parameters": {"n": "1", "flag": True}}), truth
    ) == pytest.approx(1.5)
    assert correctness(response({"name": "f", "parameters": {"n": True, "flag": 1}}), truth) == pytest.approx(
        0.0
    )
    assert components(response({"name": "f", "parameters": {"n": "1", "flag": True}}), truth) == (
        0.5,
        1.0,
        0.0,
    )
    assert json_equal({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]})
    assert (
        not json_equal([False], [0])
        and not json_equal({"a": 1}, {"a": [1]})
        and not json_equal([1, 2], [1, 2, 3])
    )


def test_duplicate_tool_names_match_one_prediction_each() -> None:
    paris, rome = (
        {"name": "get_weather", "parameters": {"city": "Paris"}},
        {"name": "get_weather", "parameters": {"city": "Rome"}},
    )
    truth = response(paris, rome)
    assert components(response(rome, paris), truth) == (0.5, 1.0, 1.5)
    # Two Paris calls: names match fully, params fully for both, one value of two: 3·1/2 − 1.5
    assert components(response(paris, paris), truth) == (0.5, 1.0, 0.0)
    assert correctness(response(paris, paris), truth) == pytest.approx(6 * 4 / 5 - 3)  # ToolRL's: S_max 5
    # One prediction cannot serve two ground-truth calls: names 1/2, one call matched (1 + 1)
    assert components(response(paris), truth) == (0.0, 0.0, 0.0)


def test_empty_parameters() -> None:
    truth = response({"name": "ping", "parameters": {}})
    assert components(truth, truth) == (0.5, 1.0, 1.5)
    # extra parameters: names Jaccard 0, so the call is not matched; no values to get wrong (1.5)
    assert components(response({"name": "ping", "parameters": {"x": 1}}), truth) == (0.5, -1.0, 1.5)
    # S_max 2
    assert correctness(response({"name": "ping", "parameters": {"x": 1}}), truth) == pytest.approx(0.0)


def test_unicode_names_and_values() -> None:
    call = {"name": "météo_查询", "parameters": {"ville": "Zürich 🌧", "città": "東京"}}
    truth = "<think>思考</think>\n<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
    assert correctness(response(call), truth) == pytest.approx(3.0)  # \u escapes and raw UTF-8 decode alike
    assert score(truth, truth).format == 1.0


def test_chat_template_wrapping_is_removed() -> None:
    wrapped = (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        f"<|im_start|>assistant\n{GT}<|im_end|>\n"
    )
    llama = (
        "<|start_header_id|>user<|end_header_id|>U<|eot_id|>"
        f"<|start_header_id|>assistant<|end_header_id|>\n\n{GT}<|eot_id|>"
    )
    for text in (wrapped, llama, GT + "<|im_end|>", f"  \n{GT}\n"):
        assert extract_response(text) == GT
        assert score(text, GT).as_dict() == score(GT, GT).as_dict()


@pytest.mark.parametrize(
    "completion",
    [
        # no newlines inside the block
        "<think>x</think>\n<tool_call>" + json.dumps(WEATHER) + "</tool_call>",
        "x</think>\n" + calls_block(WEATHER),  # no <think>
        response(WEATHER) + "\n" + calls_block(TIME),  # two blocks
        response(WEATHER) + "\n<response>extra</response>",  # a response the ground truth has none of
        response(WEATHER) + " trailing",
    ],
)
def test_malformed_layouts_fail_the_format(completion: str) -> None:
    assert format_score(completion, GT) == 0.0


def test_format_rules() -> None:
    spaced = "<think>x</think>  <tool_call>\n" + json.dumps(WEATHER) + "\n</tool_call>"
    glued = "<think>x</think><tool_call>\n" + json.dumps(WEATHER) + "\n</tool_call>"
    opened = "x</think>\n" + calls_block(WEATHER)
    assert format_score(spaced, GT) == format_score(glued, GT) == 1.0  # CorrGRPO's `\s*` by default
    assert format_score(spaced, GT, FormatRules(lenient_separators=False)) == 0.0  # ToolRL's one newline
    assert format_score(glued, GT, FormatRules(lenient_separators=False)) == 0.0
    assert format_score(opened, GT, FormatRules(optional_think_open=True)) == 1.0
    assert format_score(opened, GT) == 0.0


def test_calls_are_cut_where_toolrl_cuts_them() -> None:
    # the first block ends at the next <tool_call> when its own closing tag is missing
    unclosed = (
        "<think>x</think>\n<tool_call>\n"
        + json.dumps(WEATHER)
        + "\n<tool_call>\n"
        + json.dumps(TIME)
        + "\n</tool_call>"
    )
    assert score(unclosed, GT).matching == score(response(WEATHER), GT).matching
    assert score(unclosed, GT).format == 0.0
    # only the first block counts
    assert correctness(response(WEATHER) + "\n" + calls_block(TIME), GT) == pytest.approx(0.5)


def test_calls_the_matching_cannot_read_fail_the_prediction() -> None:
    for line in (
        '["get_weather"]',  # not an object
        '{"parameters": {}}',  # no name to count
        '{"name": ["get_weather"], "parameters": {}}',  # a name that cannot be counted
        '{"name": "get_weather"}',  # a call to a ground-truth function without parameters
        '{"name": "get_time", "parameters": ["zone"]}',
    ):
        result = score(f"<think>x</think>\n<tool_call>\n{line}\n</tool_call>", GT)
        assert result.reason is not None and tuple(result.components.values()) == (-0.5, -1.0, -1.5), line
    # calls to other functions are never read: a foreign name or parameters only widen the name union
    for line in ('{"name": 3, "parameters": {}}', '{"name": "f", "parameters": []}', '{"name": "f"}'):
        result = score(response(WEATHER, TIME)[: -len("\n</tool_call>")] + f"\n{line}\n</tool_call>", GT)
        assert result.reason is None and tuple(result.components.values()) == pytest.approx(
            (2 / 3 - 0.5, 1.0, 1.5)
        ), line


def test_work_is_bounded() -> None:
    caps = ParseCaps(max_chars=10_000, max_calls=4)
    long_think = response(WEATHER, TIME, think="a" * 20_000)
    result = score(long_think, GT, caps=caps)
    assert (result.format, sum(result.components.values())) == (0.0, pytest.approx(-3.0))
    assert result.reason == "completion over 10000 characters"
    many = response(*[WEATHER] * 5)
    assert score(many, GT, caps=caps).reason == "more than 4 calls"
    deep = "<think>x</think>\n<tool_call>\n" + "[" * 100_000 + "\n</tool_call>"
    assert sum(score(deep, GT, caps=ParseCaps(max_chars=200_000)).components.values()) == pytest.approx(-3.0)


def toolrl_format(response: str, ground_truth: str, rules: FormatRules) -> float:
    """ToolRL's format check as its source writes it (regex over the whole response, then tag counts)."""
    think = r"^(?:<think>)?" if rules.optional_think_open else r"^<think>"
    gap = r"\s*" if rules.lenient_separators else r"\n"
    calls, reply = r"<tool_call>\n.*?\n</tool_call>", r"<response>.*?</response>"
    wants = ("<tool_call>" in ground_truth, "<response>" in ground_truth)
    tail = {
        (True, False): gap + calls,
        (False, True): gap + reply,
        (True, True): gap + calls + gap + reply,
        (False, False): "",
    }
    tags = {
        (True, False): ["<tool_call>", "</tool_call>"],
        (False, True): ["<response>", "</response>"],
        (False, False): [],
    }
    tags[True, True] = tags[True, False] + tags[False, True]
    matched = re.search(f"{think}.*?</think>{tail[wants]}$", response, re.DOTALL)
    return 1.0 if matched and all(response.count(tag) == 1 for tag in tags[wants]) else 0.0


LAYOUTS = [
    "<think>a</think>",
    "<think>a</think>\n<response>b</response>",
    "<think>a</think>\n<tool_call>\n{}\n</tool_call>",
    "<think>a</think>\n<tool_call>\n{}\n</tool_call>\n<response>b</response>",
]
PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<response>",
    "</response>",
    "\n",
    " ",
    "x",
    "",
]


@st.composite
def near_layouts(draw: st.DrawFn) -> str:
    """A well-formed layout with up to three edits (delete a few characters, insert a tag or character)."""
    text = draw(st.sampled_from(LAYOUTS))
    for _ in range(draw(st.integers(0, 3))):
        at, cut = draw(st.integers(0, len(text))), draw(st.integers(0, 3))
        text = text[:at] + draw(st.sampled_from(PIECES)) + text[at + cut :]
    return text


@settings(max_examples=150, deadline=None)
@given(
    response=near_layouts(),
    truth=st.sampled_from(LAYOUTS),
    lenient=st.booleans(),
    open_think=st.booleans(),
)
def test_format_agrees_with_toolrl_regex(response: str, truth: str, lenient: bool, open_think: bool) -> None:
    rules = FormatRules(lenient, open_think)
    assert format_score(response, truth, rules) == toolrl_format(response, truth, rules)


def test_each_layout_passes_exactly_for_its_own_kind_of_ground_truth() -> None:
    verdicts = [[format_score(layout, truth) for truth in LAYOUTS] for layout in LAYOUTS]
    assert verdicts == [[1.0 if i == j else 0.0 for j in range(4)] for i in range(4)]
    assert verdicts == [
        [toolrl_format(layout, truth, FormatRules()) for truth in LAYOUTS] for layout in LAYOUTS
    ]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["a", "b", "1"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("xy"), inner, max_size=2),
    max_leaves=4,
)
tool_calls = st.builds(
    lambda name, parameters: {"name": name, "parameters": parameters},
    st.sampled_from(["f", "g", "h"]),
    st.dictionaries(st.sampled_from(["p", "q", "r"]), json_values, max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(
    truth=st.lists(tool_calls, min_size=1, max_size=3), predicted=st.lists(tool_calls, min_size=1, max_size=4)
)
def test_component_ranges_and_sum(truth: list[dict[str, Any]], predicted: list[dict[str, Any]]) -> None:
    result = score(response(*predicted), response(*truth))
    m = result.matching
    assert m is not None
    for name, value in result.components.items():
        low, high = RANGES[name]
        assert low - 1e-12 <= value <= high + 1e-12
    total = sum(result.components.values())
    assert (total == pytest.approx(3.0)) == m.exact == (m.toolrl_correctness == pytest.approx(3.0))
    assert sum(score(response(*truth), response(*truth)).components.values()) == pytest.approx(3.0)


def toolrl_correctness(truth: list[dict[str, Any]], predicted: list[dict[str, Any]]) -> float:
    """ToolRL's `compute_tool_call_reward` (max 3, min −3) restated as an independent oracle: one summed
    score."""
    if truth == predicted:
        return 3.0

    def jaccard(a: list[Any], b: list[Any]) -> float:
        if a == b:
            return 1.0
        if not a or not b:
            return 0.0
        shared = sum((Counter(a) & Counter(b)).values())
        return shared / (len(a) + len(b) - shared)

    total, s_max, used = jaccard([c["name"] for c in truth], [c["name"] for c in predicted]), 1.0, set()
    for gt in truth:
        s_max += 1 + len(gt["parameters"])
        best, best_index = 0.0, -1
        for i, pd in enumerate(predicted):
            if i in used or pd["name"] != gt["name"]:
                continue
            value = jaccard(list(gt["parameters"]), list(pd["parameters"]))
            value += sum(
                1.0 for k, v in gt["parameters"].items() if k in pd["parameters"] and pd["parameters"][k] == v
            )
            if value > best:
                best, best_index = value, i
        if best_index >= 0:
            used.add(best_index)
            total += best
    return 6 * total / s_max - 3


# No booleans here: the one place we differ from ToolRL on purpose is `true == 1`.
plain_values = (
    st.none() | st.integers(-2, 2) | st.sampled_from(["a", "1"]) | st.lists(st.integers(0, 1), max_size=2)
)
plain_calls = st.builds(
    lambda name, parameters: {"name": name, "parameters": parameters},
    st.sampled_from(["f", "g"]),
    st.dictionaries(st.sampled_from(["p", "q", "r"]), plain_values, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(
    truth=st.lists(plain_calls, min_size=1, max_size=3),
    predicted=st.lists(plain_calls, min_size=1, max_size=4),
)
def test_toolrl_correctness_is_kept(truth: list[dict[str, Any]], predicted: list[dict[str, Any]]) -> None:
    assert correctness(response(*predicted), response(*truth)) == pytest.approx(
        toolrl_correctness(truth, predicted), abs=1e-9
    )
