"""Checks of what a service sends back, beyond what its JSON parser accepts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


def valid_utf8_json(response: httpx.Response) -> Any:
    """The body as JSON: strict UTF-8, and no `\\ud800`-style escape (valid JSON syntax no UTF-8 reader can
    take)."""
    document = json.loads(response.content.decode("utf-8"))
    for text in _strings_of(document):
        text.encode("utf-8")  # raises on a lone surrogate
    return document


def _strings_of(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from _strings_of(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings_of(inner)
