"""Generic items: a row's item fields plus `completion`; labels as JSON objects or the declared label
field."""

from __future__ import annotations

import json

import pytest

from corrgrpo_proto.agentdojo import TrajectoryItem
from corrgrpo_proto.code import CodeItem
from corrgrpo_proto.items import ItemShape
from corrgrpo_proto.toolcall import ToolCallItem

PROBLEM = {"task_id": "t", "entry_point": "f", "test": "def check(c): pass", "reference": "def f(): pass"}


def test_each_item_declares_its_fields_and_label() -> None:
    code, toolcall, agentdojo = (
        ItemShape.of_schema(m.model_json_schema()) for m in (CodeItem, ToolCallItem, TrajectoryItem)
    )
    assert code == ItemShape(frozenset({"problem", "task_id"}), "task_id")
    assert toolcall == ItemShape(frozenset({"ground_truth"}), "ground_truth")
    assert agentdojo.label is None and {"suite", "user_task", "injection_task", "attack"} <= agentdojo.fields


def test_item_is_the_rows_item_fields_and_the_completion() -> None:
    code = ItemShape.of_schema(CodeItem.model_json_schema())
    row = {
        "prompt": [{"role": "user", "content": "q"}],
        "task_id": "HumanEval/0",
        "problem": None,
        "completion": "old",
    }
    assert code.item("c", row) == {"task_id": "HumanEval/0", "completion": "c"}
    CodeItem.model_validate(code.item("c", row))


def test_labels_are_json_objects_or_the_label_field() -> None:
    code = ItemShape.of_schema(CodeItem.model_json_schema())
    assert code.label_fields("HumanEval/0") == {"task_id": "HumanEval/0"}
    assert code.label_fields("123") == {"task_id": "123"}  # a bare string stays a string
    assert code.label_fields(json.dumps({"problem": PROBLEM})) == {"problem": PROBLEM}
    assert code.label_fields({"problem": PROBLEM}) == {"problem": PROBLEM}
    agentdojo = ItemShape.of_schema(TrajectoryItem.model_json_schema())
    with pytest.raises(ValueError, match="JSON object"):
        agentdojo.label_fields("banking")
