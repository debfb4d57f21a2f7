"""What the harness's child writes on fd 3, and the parent's reading of it: JSON lines whose values are tagged builtin
data (`harness_child.encode`). The parent decodes them into hash-free forms and compares data only: it never
evaluates anything a run wrote, and builds no hash container of keys a candidate chose."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Literal


class ProtocolError(ValueError):
    """The channel carried something the harness never writes."""


_unencodable_ids = itertools.count()


def canonical(tagged: Any) -> Any:
    """Tagged JSON → a hash-free form whose `==` is Python's `==` of the decoded data.


    Numbers that compare equal get one form (`1 == 1.0 == True`); sets and dicts become sorted
    tuples, so no hash container of candidate-chosen keys is built (colliding hashes cost nothing);
    an unencodable value is equal to nothing. Raises ProtocolError on tags the harness never writes.
    """
    kind = type(tagged)
    if tagged is None:
        return ("z",)
    if kind is bool or kind is int:
        return ("n", int(tagged))
    if kind is float:
        return ("n", int(tagged)) if tagged.is_integer() else ("n", tagged)  # False for inf and nan
    if kind is str:
        return ("s", tagged)
    if kind is list:
        return ("l", tuple(map(canonical, tagged)))
    if kind is not dict:
        raise ProtocolError(f"unexpected JSON value of type {kind.__name__}")
    tag, items = tagged.get("__t"), tagged.get("v")
    if tag == "unencodable":
        return ("u", next(_unencodable_ids))
    if tag == "bytes" and type(items) is str:
        return ("b", bytes.fromhex(items))
    if tag == "int" and type(items) is str:
        return ("n", int(items, 16))  # `harness_child.INT_BITS`: linear, and no digit limit in base 16
    if type(items) is not list:
        raise ProtocolError(f"tag {tag!r} without a list of items")
    if tag == "tuple":
        return ("t", tuple(map(canonical, items)))
    if tag in ("set", "frozenset"):
        return ("S", tuple(sorted(map(canonical, items))))
    if tag == "dict":
        return ("d", tuple(sorted((canonical(k), canonical(v)) for k, v in map(_pair, items))))
    raise ProtocolError(f"unknown tag {tag!r}")


def _pair(item: Any) -> tuple[Any, Any]:
    if type(item) is not list or len(item) != 2:
        raise ProtocolError("dict item is not a [key, value] pair")
    return item[0], item[1]


def encode(value: Any) -> Any:
    """Builtin data → the tagged JSON the child writes (the parent's twin of `harness_child.encode`, for literals)."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [encode(v) for v in value]
    if kind in (tuple, set, frozenset):
        return {"__t": kind.__name__, "v": [encode(v) for v in value]}
    if kind is dict:
        return {"__t": "dict", "v": [[encode(k), encode(v)] for k, v in value.items()]}
    if kind is bytes:
        return {"__t": "bytes", "v": value.hex()}
    raise TypeError(f"{kind.__name__} is not builtin data")


def _truth(tagged: Any) -> bool | None:
    """Truthiness of the decoded data without decoding it; None for an unencodable value."""
    if type(tagged) is not dict:
        return bool(tagged)
    if tagged.get("__t") == "unencodable":
        return None
    return bool(tagged.get("v"))


@dataclass(frozen=True)
class Expect:
    """A check the parent decides on data alone: `_out == <literal>`, `_out is True/False/None`, `_out`, `not _out`
    (and the subclasses' forms)."""

    kind: Literal["equals", "is", "truthy", "falsy"]
    value: Any = None  # equals: the literal's `canonical` form; is: True, False or None

    @classmethod
    def equals(cls, literal: Any) -> Expect:
        return cls("equals", canonical(encode(literal)))

    def holds(self, tagged: Any) -> bool | None:
        """Whether the check holds of the output; None: not decidable on data here (the judge decides)."""
        if self.kind == "equals":
            return canonical(tagged) == self.value
        if self.kind == "is":
            return type(tagged) is type(self.value) and tagged == self.value
        truth = _truth(tagged)
        return truth is (self.kind == "truthy")


_NUMBERS = (int, float, bool)  # the JSON numbers the child writes (a long int crosses tagged: left to the judge)


@dataclass(frozen=True)
class Near(Expect):
    """`abs(_out - value) < tolerance` (`<=` unless `strict`), or with `relative` set `math.isclose(_out, value,
    rel_tol=relative, abs_tol=tolerance)`: the same arithmetic on the same numbers as the judge's. Decided when the
    output is a number; anything else (and an overflow) is left to the judge, whose error it is."""

    tolerance: float = 0.0
    relative: float | None = None
    strict: bool = True

    def holds(self, tagged: Any) -> bool | None:
        if type(tagged) not in _NUMBERS:
            return None
        try:
            if self.relative is not None:
                return math.isclose(tagged, self.value, rel_tol=self.relative, abs_tol=self.tolerance)
            gap = abs(tagged - self.value)
        except (OverflowError, ValueError):
            return None
        return gap < self.tolerance if self.strict else gap <= self.tolerance


@dataclass(frozen=True)
class Items(Expect):
    """`tuple(_out) == tuple(<literal>)` or `list(_out) == list(<literal>)`: `value` holds the literal's items in
    `canonical` form. Decided when the output is a list or a tuple (item by item, as `==` compares); another iterable
    (a str, a set, a dict) is left to the judge."""

    def holds(self, tagged: Any) -> bool | None:
        if type(tagged) is dict and tagged.get("__t") == "tuple":
            tagged = tagged.get("v")
        if type(tagged) is not list:
            return None
        return len(tagged) == len(self.value) and tuple(map(canonical, tagged)) == self.value


def channel_messages(channel: bytes) -> list[dict[str, Any]]:
    """The channel's JSON lines, parsed as one array (one parse); anything but JSON objects is a protocol error."""
    messages = json.loads(b"[" + b",".join(channel.splitlines()) + b"]")
    if not all(type(message) is dict for message in messages):
        raise ProtocolError("message is not an object")
    return messages


def by_test_index(messages: list[dict[str, Any]], total: int) -> list[dict[str, Any] | None]:
    """Messages by test index; an index the harness never writes is a protocol error (no candidate-keyed dict)."""
    by_index: list[dict[str, Any] | None] = [None] * total
    for message in messages:
        if "i" in message:
            index = message["i"]
            if type(index) is not int or not 0 <= index < total:
                raise ProtocolError(f"test index {index!r} out of range")
            by_index[index] = message
    return by_index


def first_message(channel: bytes) -> dict[str, Any]:
    """The channel's first line: written by the harness before anything of the program runs, so what a candidate
    writes after it (garbage included) cannot change it."""
    try:
        first = json.loads(channel.split(b"\n", 1)[0])
    except ValueError:
        return {}
    return first if type(first) is dict else {}
