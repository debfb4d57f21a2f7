"""Reading tool calls: chat models' tool calls → step requests → chat messages."""

from __future__ import annotations

import pytest

from corrgrpo_agentdojo.tool_calls import (
    ToolCallError,
    tool_calls_from_chat,
    tool_calls_from_text,
    tool_messages,
)
from corrgrpo_proto.agentdojo import ToolCall, ToolResult


def test_openai_tool_calls_with_json_string_arguments() -> None:
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "send_money", "arguments": '{"recipient": "X", "amount": 5}'},
        },
        {"id": "c2", "type": "function", "function": {"name": "get_balance", "arguments": ""}},
    ]
    assert tool_calls_from_chat(calls) == [
        ToolCall(function="send_money", args={"recipient": "X", "amount": 5}, id="c1"),
        ToolCall(function="get_balance", args={}, id="c2"),
    ]


def test_hf_chat_template_calls_with_dict_arguments() -> None:
    calls = [
        {"type": "function", "function": {"name": "get_balance", "arguments": {}}},
        {"name": "f", "arguments": {"a": 1}},
    ]
    assert tool_calls_from_chat(calls) == [
        ToolCall(function="get_balance"),
        ToolCall(function="f", args={"a": 1}),
    ]


def test_generated_text_with_tool_call_blocks() -> None:
    text = (
        "Let me look.\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"file_path": "a.txt"}}\n</tool_call>\n'
        '<tool_call>{"name": "g"}</tool_call>'
    )
    assert tool_calls_from_text(text) == [
        ToolCall(function="read_file", args={"file_path": "a.txt"}),
        ToolCall(function="g"),
    ]
    assert tool_calls_from_text("no calls, a final answer") == []


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([{"function": {"name": "f", "arguments": "{oops"}}], "tool call 0: arguments are not JSON"),
        ([{"function": {"name": "f", "arguments": "[1]"}}], "must be a JSON object, got list"),
        ([{"function": {"arguments": "{}"}}], "tool call 0: no function name"),
    ],
)
def test_unreadable_calls_say_why(calls: list[dict], message: str) -> None:
    with pytest.raises(ToolCallError, match=message):
        tool_calls_from_chat(calls)
    with pytest.raises(ToolCallError, match="tool call 0: not JSON"):
        tool_calls_from_text("<tool_call>{nope</tool_call>")


def test_results_become_tool_messages() -> None:
    results = [
        ToolResult(tool_call_id="c1", function="get_balance", content="1810.0"),
        ToolResult(function="f", content="x"),
    ]
    assert tool_messages(results) == [
        {"role": "tool", "name": "get_balance", "content": "1810.0", "tool_call_id": "c1"},
        {"role": "tool", "name": "f", "content": "x"},
    ]
