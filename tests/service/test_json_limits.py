"""Per-request size limits in-process: value count, entries per array/object, capped fields, each with its
path."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrgrpo_common.guards.json_checks import JsonLimits, Problem, check_json, too_many_values

LIMITS = JsonLimits(max_depth=64, max_values=1000, max_items=10, fields={"ground_truth": 50})


def problem(document: object) -> tuple[int, str, str | None] | None:
    found = check_json(json.dumps(document).encode(), limits=LIMITS)
    return (found.status, found.error, found.loc) if isinstance(found, Problem) else None


def test_values_are_counted_outside_strings_only() -> None:
    assert too_many_values(b"[1,2,3]", 3) and not too_many_values(b"[1,2,3]", 4)
    # marks inside a string do not count
    assert not too_many_values(json.dumps(["a, [b], {c}" * 1000]).encode(), 2)
    assert not too_many_values(json.dumps(['say \\"[,\\"', "x"]).encode(), 3)  # nor after escaped quotes
    assert problem({"items": [[1] * 9] * 9}) is None
    assert problem({"items": [[1] * 9] * 9 + [[0]] * 5}) == (413, "too_many_items", "items")
    assert problem({"items": [[]] * 9, "more": [[[[]] * 9] * 9] * 9}) == (413, "too_many_values", "body")


def marks(document: object) -> int:
    """The marks `too_many_values` counts in a document's JSON: each container's opening bracket and
    commas."""
    if isinstance(document, list | dict):
        children = list(document.values()) if isinstance(document, dict) else document
        return max(1, len(children)) + sum(map(marks, children))
    return 0


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.integers(0, 9) | st.text(",[{", max_size=2),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=1), inner, max_size=4),
        max_leaves=40,
    ),
    st.integers(0, 3),
)
def test_a_short_body_is_never_over_the_count(document: object, slack: int) -> None:
    body = json.dumps(document, separators=(",", ":")).encode()
    count = 1 + marks(document)
    for limit in {max(1, count - slack), count + slack, max(1, (len(body) + 1) // 2)}:  # 0 means no limit
        assert too_many_values(body, limit) == (count > limit), (body, limit)


@pytest.mark.parametrize(
    ("document", "loc"),
    [
        ({"items": [{}] * 11}, "items"),
        ({"items": [{}], "weights": {f"w{i}": 1 for i in range(11)}}, "weights"),
        ({"items": [{"extra": {"deep": list(range(11))}}]}, "items.0.extra.deep"),
    ],
)
def test_any_array_or_object_over_the_cap_is_named(document: object, loc: str) -> None:
    assert problem(document) == (413, "too_many_items", loc)


def test_a_capped_field_over_its_length_is_named() -> None:
    items = [{"ground_truth": "ok", "completion": "c" * 500}, {"ground_truth": "g" * 51}]
    assert problem({"items": items}) == (413, "field_too_long", "items.1.ground_truth")
    assert problem({"items": [{"ground_truth": "g" * 50}]}) is None
    # the schema's business (422)
    assert problem({"items": [{"ground_truth": ["not", "a", "string"]}]}) is None
