"""Turn a chat model's tool calls into step requests, and tool results back into chat messages.

Accepted forms (what `tool_calls_from_chat` and `tool_calls_from_text` take):

- OpenAI `message.tool_calls`: `[{"id": "c1", "type": "function", "function": {"name": "get_balance",
  "arguments": "{}"}}]`, arguments a JSON string;
- HF chat-template messages: the same with `arguments` already a dict (`{"name", "arguments"}`
  without the `function` wrapper also works);
- raw generated text of Hermes/Qwen-style templates: `<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>` blocks, one JSON object each (`read_completion` also reads the answer and keeps
  unreadable blocks as errors).

`tool_messages` gives the `role: tool` messages to append before the next generation. Text is
scanned with `str.find`, never a backtracking regex: the cost is linear in the completion.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from corrgrpo_common.text import valid_json
from corrgrpo_proto.agentdojo import ToolCall, ToolResult

_SPECIAL_TOKEN_AT_END = re.compile(
    r"(?:<\|[A-Za-z0-9_.:-]{1,40}\|>|</s>|<eos>|<end_of_turn>|<｜end▁of▁sentence｜>)\Z"
)


class ToolCallError(ValueError):
    """A tool call that cannot be read. The message says which and why."""


def _parsed(text: str, where: str) -> Any:
    """`json.loads` of the policy's text, every string made encodable: a lone surrogate escape (`"\\ud800"`)
    becomes U+FFFD, so a name made of one is an unknown tool (its result says so) and no argument carries one
    into the environment or an answer. Raises `ToolCallError` for what is not JSON (or nests beyond the
    parser's stack)."""
    try:
        return valid_json(json.loads(text))
    except json.JSONDecodeError as error:
        raise ToolCallError(f"{where} ({error})") from error
    except RecursionError as error:
        raise ToolCallError(f"{where} (nested too deeply)") from error


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        raw = _parsed(raw, f"{where}: arguments are not JSON")
    if not isinstance(raw, dict):
        raise ToolCallError(f"{where}: arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def tool_call_from_chat(call: dict[str, Any], where: str = "tool call") -> ToolCall:
    body = call.get("function", call)
    if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
        raise ToolCallError(f"{where}: no function name")
    arguments = body.get("arguments", body.get("parameters"))
    try:
        return ToolCall(function=body["name"], args=_arguments(arguments, where), id=call.get("id"))
    except ValidationError as error:  # e.g. a numeric id: the policy's mistake, shown to it like any other
        raise ToolCallError(f"{where}: {'; '.join(e['msg'] for e in error.errors())}") from error


def tool_calls_from_chat(tool_calls: list[dict[str, Any]]) -> list[ToolCall]:
    """OpenAI / HF chat `tool_calls` → the `tool_calls` of a step request."""
    return [tool_call_from_chat(call, f"tool call {index}") for index, call in enumerate(tool_calls)]


def strip_special_tokens(text: str) -> str:
    """`text` without trailing whitespace and end-of-turn tokens (`<|im_end|>`, `<|eot_id|>`, `</s>`, ...)."""
    text = text.rstrip()
    while match := _SPECIAL_TOKEN_AT_END.search(text, max(0, len(text) - 64)):
        text = text[: match.start()].rstrip()
    return text


def _blocks(text: str, tag: str) -> tuple[list[str], str]:
    """(contents of `<tag>...</tag>` blocks in order, the text outside them). An unclosed block runs to the
    end."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    inside, outside, position = [], [], 0
    while (start := text.find(opening, position)) != -1:
        outside.append(text[position:start])
        end = text.find(closing, start + len(opening))
        stop = len(text) if end == -1 else end
        inside.append(text[start + len(opening) : stop])
        position = len(text) if end == -1 else end + len(closing)
    outside.append(text[position:])
    return inside, "".join(outside)


def _call_from_block(block: str, index: int) -> ToolCall:
    parsed = _parsed(block, f"tool call {index}: not JSON")
    if not isinstance(parsed, dict):
        raise ToolCallError(f"tool call {index}: expected a JSON object")
    return tool_call_from_chat(parsed, f"tool call {index}")


@dataclass
class Completion:
    """What one generated message says: its tool calls in order (an unreadable one as its `ToolCallError`)
    and its answer."""

    calls: list[ToolCall | ToolCallError]
    answer: str


def read_completion(text: str) -> Completion:
    """Tool-call blocks and the answer of raw generated text: the `<response>` block when there is one,
    else the text outside `<think>` and `<tool_call>` blocks. Trailing special tokens do not count."""
    text = strip_special_tokens(text)
    blocks, rest = _blocks(text, "tool_call")
    calls: list[ToolCall | ToolCallError] = []
    for index, block in enumerate(blocks):
        try:
            calls.append(_call_from_block(block.strip(), index))
        except ToolCallError as error:
            calls.append(error)
    responses, _ = _blocks(rest, "response")
    answer = responses[0] if responses else _blocks(rest, "think")[1]
    return Completion(calls=calls, answer=strip_special_tokens(answer).strip())


def tool_calls_from_text(text: str) -> list[ToolCall]:
    """`<tool_call>{json}</tool_call>` blocks of generated text, in order. No block → no calls. Raises on
    an unreadable one."""
    calls = read_completion(text).calls
    for call in calls:
        if isinstance(call, ToolCallError):
            raise call
    return calls  # type: ignore[return-value]


def tool_messages(results: list[ToolResult]) -> list[dict[str, Any]]:
    """A step's results as chat messages (`role: tool`), in the order of the calls."""
    return [
        {"role": "tool", "name": result.function, "content": result.content}
        | ({"tool_call_id": result.tool_call_id} if result.tool_call_id else {})
        for result in results
    ]
