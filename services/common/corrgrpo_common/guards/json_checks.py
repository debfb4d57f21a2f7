"""What a JSON request body may hold, checked on its bytes and its parsed document: the pure half of the JSON
guard (`parsed_json` is the ASGI half), also used for OpenRLHF's labels."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from fastapi.responses import JSONResponse

from corrgrpo_proto.common import ErrorDetail

from ..errors import error_response

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999 parses to inf without ever being a NaN/Infinity literal
        raise _NonFinite(literal[:40])
    return value


@dataclass(frozen=True)
class JsonLimits:
    """What one JSON body may hold (0 = no limit); `fields` caps named string fields, e.g.
    `{"ground_truth": 32768}`."""

    max_depth: int = 64
    max_values: int = 0
    max_items: int = 0
    fields: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """Why a body is refused: HTTP status, machine-readable error, message, and the offending field."""

    status: int
    error: str
    message: str
    loc: str | None = None

    def response(self) -> JSONResponse:
        details = [ErrorDetail(loc=self.loc, message=self.message)] if self.loc is not None else None
        return error_response(self.status, self.error, self.message, details)


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[,\[{]')  # a whole string, or a mark that opens a value
_NOT_MARKS = bytes(byte for byte in range(256) if byte not in b",[{")


def too_many_values(body: bytes, limit: int) -> bool:
    """Whether a JSON body holds more than `limit` values, decided without parsing it or copying it.

    Every value but the first follows a `,`, `[` or `{`. Counted over the raw bytes first (fast,
    but strings may hold such marks too). Only when that count is over the limit are the marks
    outside strings counted, stopping as soon as the limit is passed.
    """
    # In valid JSON a comma comes after a value and a bracket before its closing one, bytes that are no marks:
    # marks are at most 2/3 of the bytes. A short body needs no count (invalid JSON may hold more marks, and
    # fails its parse).
    if 2 * len(body) + 3 <= 3 * limit:
        return False
    # one pass that keeps the marks alone: deleting the marks instead took half as long again (it wrote a copy
    # of the body), three counts twice as long
    if len(body.translate(None, _NOT_MARKS)) + 1 <= limit:
        return False
    count = 1
    for token in _TOKEN.finditer(body):
        if body[token.start()] != 0x22:  # not a string
            count += 1
            if count > limit:
                return True
    return False


def _path_to(document: Any, target: Any) -> str:
    """Dotted path of the node `target` (by identity) in `document`, e.g. `items.3.ground_truth`."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(document, ())]
    while stack:
        node, path = stack.pop()
        if node is target:
            return ".".join(path) or "body"
        if isinstance(node, dict):
            stack.extend((value, (*path, str(key))) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, (*path, str(index))) for index, value in enumerate(node))
    return "body"


@dataclass(frozen=True)
class Checked:
    """A JSON body that passed `check_json`, parsed: FastAPI validates this document instead of parsing the
    body again."""

    document: Any


@dataclass(frozen=True)
class Parsed:
    """A JSON text `parse_json` parsed; `escapes`: it spells a surrogate escape, so its strings need
    `check_document`'s look (a rare case: looking at every string of every body would cost each request a pass
    over its text)."""

    document: Any
    escapes: bool


def parse_json(body: bytes, limits: JsonLimits = JsonLimits()) -> Problem | Parsed | None:
    """The first half of `check_json`: decoding, the value count, the parse. None for a syntax error.

    A body within the value count is parsed by pydantic-core (about twice json's speed on megabytes of inline
    test cases, and no decoded copy of the text): it refuses what this module must refuse or classify (invalid
    UTF-8, unpaired surrogates, NaN and infinities, nesting past its own limit), and such a body is parsed
    again as before, so that its error says why. An overflowing number (`1e999`) it reads as infinity:
    `check_document` refuses it."""
    over_count = bool(limits.max_values) and too_many_values(body, limits.max_values)
    if not over_count:
        try:
            return Parsed(pydantic_core.from_json(body, allow_inf_nan=False), escapes=False)
        except ValueError:
            pass
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return Problem(400, "invalid_encoding", f"request body is not valid UTF-8 (byte {error.start})")
    if over_count:
        return Problem(
            413, "too_many_values", f"more than {limits.max_values} JSON values in one request", "body"
        )
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NonFinite as constant:
        return Problem(422, "non_finite_number", f"{constant} is not valid JSON; send finite numbers")
    except RecursionError:
        return Problem(422, "json_too_deep", f"JSON nested deeper than {limits.max_depth} levels")
    except ValueError:
        return None
    return Parsed(document, _SURROGATE_ESCAPE.search(text) is not None)


def check_document(
    document: Any, limits: JsonLimits, *, strings: bool = True, depth: int = 1
) -> Problem | int:
    """The second half of `check_json`: why a parsed document must be refused, else how many values it holds.

    `strings`: whether to look for unpaired surrogates; `depth`: the level `document` sits at (an OpenRLHF
    label is checked as the item it becomes, which sits at level 3 of a `/v1/score` body)."""
    values = 1
    stack: list[tuple[Any, int]] = [(document, depth)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            if level > limits.max_depth:
                return Problem(422, "json_too_deep", f"JSON nested deeper than {limits.max_depth} levels")
            if limits.max_items and len(node) > limits.max_items:
                message = f"{len(node)} entries, over the limit of {limits.max_items} per array or object"
                return Problem(413, "too_many_items", message, _path_to(document, node))
            values += len(node)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((value, level + 1) for value in children)
            if isinstance(node, dict):
                if strings:
                    stack.extend((key, level) for key in node)
                for name in limits.fields.keys() & node.keys():
                    value = node[name]
                    if isinstance(value, str) and len(value) > limits.fields[name]:
                        message = f"{len(value)} characters, over the limit of {limits.fields[name]}"
                        return Problem(413, "field_too_long", message, _path_to(document, value))
        elif isinstance(node, float) and not math.isfinite(node):  # `1e999`, parsed by pydantic-core
            return Problem(422, "non_finite_number", "a number overflows to infinity; send finite numbers")
        elif strings and isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return Problem(
                    422,
                    "invalid_string",
                    "a JSON string holds an unpaired UTF-16 surrogate (\\ud800-\\udfff)",
                )
    return values


def check_json(body: bytes, limits: JsonLimits = JsonLimits()) -> Problem | Checked | None:
    """Why a JSON body must be refused before FastAPI parses it, else the parsed document; None to let FastAPI
    parse it (a syntax error).

    Refused: bytes that are not UTF-8 (400). More than `max_values` values (413, counted before
    parsing, so the parse itself stays bounded), an array or object over `max_items` entries (the
    batch's `items`, a `weights` map) or a capped field over its length (413, naming the field);
    `NaN`/`Infinity` literals and overflowing numbers like `1e999` (not finite; they would slip
    through `Any` fields as null). Nesting deeper than `max_depth` (the response serializer and the
    recursion limit would turn it into a 500); and unpaired UTF-16 surrogates (`"\\ud800"`: valid
    JSON escapes no UTF-8 response can carry).
    A syntax error is left to FastAPI's 422.
    """
    parsed = parse_json(body, limits)
    if not isinstance(parsed, Parsed):
        return parsed
    found = check_document(parsed.document, limits, strings=parsed.escapes)
    return found if isinstance(found, Problem) else Checked(parsed.document)
