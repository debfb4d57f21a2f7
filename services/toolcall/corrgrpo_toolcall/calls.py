"""Tool calls in a `<tool_call>` block, one JSON object a line, parsed as ToolRL reads them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParseCaps:
    """Bounds on the work one item may cause."""

    max_chars: int = 200_000
    max_calls: int = 64


@dataclass(frozen=True)
class ToolCall:
    """One call. A prediction's call may be foreign: a `name` that is not a string (None here: it can match
    nothing, only counts in the name union) or `parameters` that are not an object (None). The authors fail a
    prediction on such a call only when matching reads it, which `match` does the same way."""

    name: str | None
    parameters: dict[str, Any] | None


class Unparseable(ValueError):
    """The text has no well-formed `<tool_call>` block of JSON calls."""


def parse_calls(
    text: str, max_calls: int | None = ParseCaps.max_calls, strict: bool = True
) -> list[ToolCall]:
    """The calls after the first `<tool_call>`, one JSON object with a `name` per line. Raises `Unparseable`.

    Cut as ToolRL cuts: at the next `<tool_call>` or the first `</tool_call>`, whichever comes first,
    provided the text has a `</tool_call>` at all. `strict` (ground truths): a string `name` and object
    `parameters` on every call. Otherwise foreign names and parameters are kept for `match` to judge.
    """
    start = text.find("<tool_call>")
    if start < 0 or "</tool_call>" not in text:
        raise Unparseable("no <tool_call>…</tool_call> block")
    block = text[start + len("<tool_call>") :].split("<tool_call>", 1)[0].split("</tool_call>", 1)[0]
    lines = block.strip().split("\n")
    if max_calls is not None and len(lines) > max_calls:
        raise Unparseable(f"more than {max_calls} calls")
    return [_parse_call(line, strict) for line in lines]


def _parse_call(line: str, strict: bool) -> ToolCall:
    try:
        call = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise Unparseable(f"invalid JSON: {error}") from None
    # The authors count every call's name (a multiset), so a call needs one, and a hashable one.
    if not isinstance(call, dict) or "name" not in call or isinstance(call["name"], (dict, list)):
        raise Unparseable('a call must be an object with a "name" that is not an array or object')
    name, parameters = call["name"], call.get("parameters")
    if strict and not (isinstance(name, str) and isinstance(parameters, dict)):
        raise Unparseable('a call must be an object with a string "name" and an object "parameters"')
    return ToolCall(
        name if isinstance(name, str) else None, parameters if isinstance(parameters, dict) else None
    )
