"""Text a service echoes from untrusted input, made encodable: every answer is valid UTF-8 JSON.

A Python `str` can hold lone UTF-16 surrogates (`json.loads('"\\ud800"')`,
`bytes.decode(errors="surrogateescape")`, a candidate's exception message sent back over the sandbox channel).
No UTF-8 encoder takes them, so one such string in one item's `info` failed the serialisation of its whole
batch. They become U+FFFD here.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (a high-low pair becomes the character it
    encodes)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_PLAIN = frozenset({int, float, bool, type(None)})


def _flat_ascii(value: dict[Any, Any]) -> bool:
    """Whether a dict holds only ASCII keys and scalar or ASCII values: most `info`, passed on without a
    copy."""
    for key, inner in value.items():
        kind = type(inner)
        if not (type(key) is str and key.isascii() and (kind in _PLAIN or (kind is str and inner.isascii()))):
            return False
    return True


def valid_json(value: Any) -> Any:
    """`value` (JSON data: dicts, lists, scalars) with `valid_text` applied to every string in it, keys
    included."""
    if type(value) is dict and _flat_ascii(value):
        return value
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {valid_text(k) if isinstance(k, str) else k: valid_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [valid_json(v) for v in value]
    return value
