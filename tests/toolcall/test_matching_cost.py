"""Matching costs O(n + m²) pair comparisons for n ground-truth and m predicted calls (issue 48.7: it cost
n·m, and a 1,000-call ground truth against 64 wide predicted calls took ~1 s an item), with ToolRL's results
unchanged."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrgrpo_toolcall import matching
from corrgrpo_toolcall.calls import ToolCall, Unparseable, parse_calls
from corrgrpo_toolcall.matching import json_equal, match, multiset_jaccard


def every_pair(truth: Sequence[ToolCall], predicted: Sequence[ToolCall]) -> tuple[float, float, float]:
    """ToolRL's loop as written: every unused same-name candidate scored for every ground-truth call."""
    s_params = s_values = 0.0
    used: set[int] = set()
    for gt in truth:
        best: tuple[float, float, int] | None = None
        for index, candidate in enumerate(predicted):
            if index in used or candidate.name != gt.name:
                continue
            if candidate.parameters is None:
                raise Unparseable(f'call {index} to {gt.name!r} has no object "parameters"')
            a, b = set(gt.parameters or {}), set(candidate.parameters)
            names = 1.0 if not a and not b else len(a & b) / len(a | b)
            given = candidate.parameters
            values = sum(1 for k, v in (gt.parameters or {}).items() if k in b and json_equal(given[k], v))
            if names + values > (best[0] + best[1] if best else 0.0):
                best = (names, values, index)
        if best:
            used.add(best[2])
            s_params += best[0]
            s_values += best[1]
    return multiset_jaccard((c.name for c in truth), (c.name for c in predicted)), s_params, s_values


values = st.sampled_from([0, 1, 1.0, True, "a", "A", None, [1], {"x": 1}])
parameters = st.dictionaries(st.sampled_from(["p", "q", "r", "s"]), values, max_size=3)
truth_calls = st.builds(ToolCall, st.sampled_from(["f", "g", "h"]), parameters)
predicted_calls = st.builds(ToolCall, st.sampled_from(["f", "g", "h", None]), parameters | st.none())


@settings(max_examples=400, deadline=None)
@given(truth=st.lists(truth_calls, min_size=1, max_size=12), predicted=st.lists(predicted_calls, max_size=10))
def test_results_equal_every_pair_matching(truth: list[ToolCall], predicted: list[ToolCall]) -> None:
    try:
        expected: tuple[float, float, float] | str = every_pair(truth, predicted)
    except Unparseable as error:
        expected = str(error)
    try:
        m = match(truth, predicted)
        found: tuple[float, float, float] | str = (m.s_name, m.s_params, m.s_values)
    except Unparseable as error:
        found = str(error)
    assert found == expected  # the same floats, summed in the same order; the same refusal


def block(calls: list[dict[str, Any]]) -> str:
    return "<tool_call>\n" + "\n".join(json.dumps(call) for call in calls) + "\n</tool_call>"


WIDE = {f"k{i}": 0 for i in range(300)}


@pytest.mark.parametrize(
    "gt_parameters",
    [lambda i: {}, lambda i: {"k1": 0}, lambda i: {"x": i}],
    ids=["parameterless", "one shared name", "no shared name"],
)
def test_a_thousand_call_ground_truth_compares_at_most_m_squared_pairs(
    gt_parameters: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = parse_calls(block([{"name": "a", "parameters": gt_parameters(i)} for i in range(1000)]), None)
    predicted = parse_calls(block([{"name": "a", "parameters": WIDE}] * 64), None)
    compared = []
    pair_score = matching.pair_score
    monkeypatch.setattr(matching, "pair_score", lambda *pair: compared.append(1) or pair_score(*pair))
    m = match(truth, predicted)
    assert len(compared) <= 64 * 65 // 2, f"{len(compared)} pairs compared: n·m, not m²"
    assert (m.s_name, m.s_params, m.s_values) == every_pair(truth, predicted)
