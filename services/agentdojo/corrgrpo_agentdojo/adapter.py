"""Turn a chat model's tool calls into step requests, and tool results back into chat messages.

Accepted forms (what `tool_calls_from_chat` and `tool_calls_from_text` take):

- OpenAI `message.tool_calls`: `[{"id": "c1", "type": "function", "function": {"name": "get_balance",
  "arguments": "{}"}}]`, arguments a JSON string;
- HF chat-template messages: the same with `arguments` already a dict (`{"name", "arguments"}`
  without the `function` wrapper also works);
- raw generated text of Hermes/Qwen-style templates: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
  blocks, one JSON object each.

`tool_messages` gives the `role: tool` messages to append before the next generation.
"""

from __future__ import annotations

import json
import re
from typing import Any

from corrgrpo_proto.agentdojo import ToolCall, ToolResult

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class AdapterError(ValueError):
    """A tool call the adapter cannot read; the message says which and why."""


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as error:
            raise AdapterError(f"{where}: arguments are not JSON ({error})") from error
    if not isinstance(raw, dict):
        raise AdapterError(f"{where}: arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def tool_call_from_chat(call: dict[str, Any], where: str = "tool call") -> ToolCall:
    body = call.get("function", call)
    if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
        raise AdapterError(f"{where}: no function name")
    arguments = body.get("arguments", body.get("parameters"))
    return ToolCall(function=body["name"], args=_arguments(arguments, where), id=call.get("id"))


def tool_calls_from_chat(tool_calls: list[dict[str, Any]]) -> list[ToolCall]:
    """OpenAI / HF chat `tool_calls` → the `tool_calls` of a step request."""
    return [tool_call_from_chat(call, f"tool call {index}") for index, call in enumerate(tool_calls)]


def tool_calls_from_text(text: str) -> list[ToolCall]:
    """`<tool_call>{json}</tool_call>` blocks of generated text, in order; no block → no calls."""
    calls = []
    for index, block in enumerate(_TOOL_CALL_BLOCK.findall(text)):
        try:
            parsed = json.loads(block)
        except json.JSONDecodeError as error:
            raise AdapterError(f"tool call {index}: not JSON ({error})") from error
        if not isinstance(parsed, dict):
            raise AdapterError(f"tool call {index}: expected a JSON object")
        calls.append(tool_call_from_chat(parsed, f"tool call {index}"))
    return calls


def tool_messages(results: list[ToolResult]) -> list[dict[str, Any]]:
    """A step's results as chat messages (`role: tool`), in the order of the calls."""
    return [
        {"role": "tool", "name": result.function, "content": result.content}
        | ({"tool_call_id": result.tool_call_id} if result.tool_call_id else {})
        for result in results
    ]
