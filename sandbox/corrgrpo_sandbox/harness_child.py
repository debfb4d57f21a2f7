"""The harness's half that runs in the sandbox's child (stdlib only, Python >= 3.10; see `harness` for the protocol).

Every worker imports this module once, before its first run (`worker.PRELOADED`), so each forked child inherits
it compiled and initialised and a run's whole program is one call with the problem as literals: compiling and
executing this code in every child cost about 1.5 ms a run, as much as a typical HumanEval test. Everything here
runs in the candidate's process once the solution's top level has run: the parent trusts none of it beyond the
data it writes to fd 3 (I/O mode), and the judge (`judge`) never sees the candidate's code.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

CHANNEL = 3  # the fd only the parent reads
SCALARS = (type(None), bool, int, float, str)


def send(message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(CHANNEL, data) :]


def describe(error: BaseException) -> str:
    return (type(error).__name__ + ": " + str(error))[:300]


def encode(x: Any) -> Any:
    """Builtin data → tagged JSON. Exact `type(x) is T` checks: a subclass of a builtin (an int whose `__eq__` is
    always True) is not data, so no object carries its own `__eq__` across."""
    t = type(x)
    if t in SCALARS:
        return x
    if t is list:
        return [encode(v) for v in x]
    if t is tuple:
        return {"__t": "tuple", "v": [encode(v) for v in x]}
    if t is set or t is frozenset:
        return {"__t": t.__name__, "v": [encode(v) for v in x]}
    if t is dict:
        return {"__t": "dict", "v": [[encode(k), encode(v)] for k, v in x.items()]}
    if t is bytes:
        return {"__t": "bytes", "v": x.hex()}
    return {"__t": "unencodable", "v": t.__name__}


def load(prelude: str, solution: str) -> tuple[dict[str, Any], dict[str, Any], frozenset[type]]:
    """Run the prelude, then the solution's top level in a copy of the prelude's namespace (so the prelude's own
    functions keep theirs). Reports the top level on the channel; exits when it raised."""
    prelude_ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(prelude, "<prelude>", "exec"), prelude_ns)
        prelude_types = frozenset(v for v in prelude_ns.values() if isinstance(v, type))
        ns = dict(prelude_ns)
        exec(compile(solution, "<solution>", "exec"), ns)
    except BaseException as error:
        send({"toplevel": describe(error)})
        os._exit(1)
    send({"toplevel": "ok"})
    return prelude_ns, ns, prelude_types


def run_io(prelude: str, solution: str, entry: str, calls: list[str]) -> None:
    """Evaluate each call expression with `candidate` bound; write each output (or the error) as it comes."""
    _, ns, _ = load(prelude, solution)
    try:
        candidate = eval(entry, ns)
    except BaseException as error:
        send({"i": 0, "error": describe(error)})
        os._exit(1)
    ns["candidate"] = candidate
    for index, call in enumerate(calls):
        try:
            out = encode(eval(call, ns))
        except BaseException as error:
            send({"i": index, "error": describe(error)})
            os._exit(1)
        send({"i": index, "out": out})
    send({"done": True})
    os._exit(0)


def run_assert(prelude: str, solution: str, entry: str, test: str) -> None:
    """Run the test source's `check(candidate)` in the prelude's namespace, the entry point's names taken from the
    solution; the candidate's return values must be plain data (or instances of prelude classes)."""
    prelude_ns, ns, prelude_types = load(prelude, solution)

    def plain(x: Any, depth: int = 0) -> bool:
        t = type(x)
        if depth > 200:
            return False
        if t in SCALARS or t is bytes:
            return True
        if t in (list, tuple, set, frozenset):
            return all(plain(v, depth + 1) for v in x)
        if t is dict:
            return all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in x.items())
        if t in prelude_types:
            return all(plain(v, depth + 1) for v in vars(x).values())
        return False

    def guard(function: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            if not plain(result):
                raise TypeError("candidate returned " + type(result).__name__ + ", not plain data")
            return result

        return guarded

    try:
        for name in compile(entry, "<entry>", "eval").co_names:  # the function under test is the solution's
            if name in ns:
                prelude_ns[name] = ns[name]
        exec(compile(test, "<test>", "exec"), prelude_ns)
        prelude_ns["check"](guard(eval(entry, ns)))
    except AssertionError as error:
        send({"assertion": describe(error)})
        os._exit(1)
    except BaseException as error:
        send({"error": describe(error)})
        os._exit(1)
    send({"done": True})
    os._exit(0)


class Unencodable:
    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return "<unencodable " + self.type_name + ">"


def decode(value: Any) -> Any:
    """Tagged JSON back to builtin data (in the judge, a sandboxed run: hash containers cost only its limits)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag, items = value.get("__t"), value.get("v")
    if tag == "tuple":
        return tuple(decode(v) for v in items)
    if tag == "set":
        return {decode(v) for v in items}
    if tag == "frozenset":
        return frozenset(decode(v) for v in items)
    if tag == "dict":
        return {decode(k): decode(v) for k, v in items}
    if tag == "bytes":
        return bytes.fromhex(items)
    if tag == "unencodable":
        return Unencodable(str(items))
    raise ValueError("unknown tag " + repr(tag))


def judge(checks: dict[str, str]) -> None:
    """Never the candidate's process: evaluate each check over `[[index, tagged output], ...]` read from stdin."""
    for index, tagged in json.loads(sys.stdin.buffer.read()):
        try:
            scope = {"math": math, "inf": math.inf, "nan": math.nan, "_out": decode(tagged)}
            message = {"i": index, "ok": bool(eval(checks[str(index)], scope))}
        except BaseException as error:
            message = {"i": index, "error": describe(error)}
        send(message)
    send({"done": True})
    os._exit(0)
