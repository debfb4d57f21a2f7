"""Test-harness mode: run a program in the sandbox, then tests against it, and report the stage reached.

Knows nothing of rewards. Two modes, because a verdict must not rest on what the child says about
itself (everything in the child is the candidate's once its code runs):

* I/O mode (`run_io`, preferred): the child receives the program and only the *call expressions*
  of the tests (e.g. ``candidate(n=7, queries=[[0, 5]])``). It evaluates each one and writes the
  output to fd 3 as tagged JSON (builtin data only: no object can carry its own ``__eq__`` across).
  The parent decodes the data and judges it with `IOTest.accept`, which the child never sees; the
  expected values never enter the child.
* Assert mode (`run_assert`, weaker): the child runs the test source's ``check(candidate)``.
  A pass needs a clean exit status, no timeout or signal, and the harness's completion message on
  fd 3. The candidate shares the process, so it *can* forge that message (write it and
  ``os._exit(0)``) or find expected values in memory; the return-value guard (plain data or
  instances of prelude classes only) stops the common ``__eq__`` trick, not a determined attacker.

Stages, in order: ``syntax`` (the solution does not parse), ``toplevel`` (its module body raised),
``test_error`` (a test raised something other than a failed assertion, or the child died mid-way),
``assertion`` (a test's check failed), ``timeout`` (during the tests; a top level that runs out of
time is ``toplevel``), ``passed``; plus ``anomaly`` when the sandbox
reports the execution untrustworthy (`ExecResult.anomaly`).
"""

from __future__ import annotations

import ast
import json
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the harness only calls `sandbox.run`; importing lazily keeps it usable with any runner
    from . import ExecResult, Limits, Sandbox

Stage = Literal["syntax", "toplevel", "test_error", "assertion", "timeout", "passed", "anomaly"]
Mode = Literal["io", "assert"]


@dataclass(frozen=True)
class IOTest:
    """One I/O-mode test: `call` runs in the child (with `candidate` bound); `accept` judges its output in the parent."""

    call: str
    accept: Callable[[Any], bool]


@dataclass
class HarnessResult:
    stage: Stage
    mode: Mode
    passed: int
    total: int
    error: str | None = None
    exec: ExecResult | None = None

    @property
    def ok(self) -> bool:
        return self.stage == "passed"


class _Unencodable:
    """A child output that was not plain data; equal to nothing, so no test accepts it by equality."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<unencodable {self.type_name}>"


class ProtocolError(ValueError):
    """The channel carried something the harness never writes."""


def decode(value: Any) -> Any:
    """Tagged JSON (see `_CHILD_ENCODER`) back to builtin data: every JSON object is a tag."""
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
        return _Unencodable(str(items))
    raise ProtocolError(f"unknown tag {tag!r}")


# Runs in the child before any candidate code; exact `type(x) is T` checks, so subclasses of builtins
# (an int whose __eq__ is always True) are not sent as data.
_CHILD_ENCODER = r"""
import json as _json, os as _os, sys as _sys
_chan = _os.fdopen(3, "wb")
def _send(message):
    _chan.write((_json.dumps(message) + "\n").encode())
    _chan.flush()
def _describe(error):
    return (type(error).__name__ + ": " + str(error))[:300]
_SCALARS = (type(None), bool, int, float, str)
def _encode(x):
    t = type(x)
    if t in _SCALARS:
        return x
    if t is list:
        return [_encode(v) for v in x]
    if t is tuple:
        return {"__t": "tuple", "v": [_encode(v) for v in x]}
    if t is set or t is frozenset:
        return {"__t": t.__name__, "v": [_encode(v) for v in x]}
    if t is dict:
        return {"__t": "dict", "v": [[_encode(k), _encode(v)] for k, v in x.items()]}
    if t is bytes:
        return {"__t": "bytes", "v": x.hex()}
    return {"__t": "unencodable", "v": t.__name__}
_ns = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(_PRELUDE, "<prelude>", "exec"), _ns)
    _prelude_types = frozenset(v for v in _ns.values() if isinstance(v, type))
    exec(compile(_SOLUTION, "<solution>", "exec"), _ns)
except BaseException as _error:
    _send({"toplevel": _describe(_error)})
    _os._exit(1)
_send({"toplevel": "ok"})
"""

_IO_MAIN = r"""
try:
    candidate = eval(_ENTRY, _ns)
except BaseException as _error:
    _send({"i": 0, "error": _describe(_error)})
    _os._exit(1)
_ns["candidate"] = candidate
for _i, _call in enumerate(_CALLS):
    try:
        _out = _encode(eval(_call, _ns))
    except BaseException as _error:
        _send({"i": _i, "error": _describe(_error)})
        _os._exit(1)
    _send({"i": _i, "out": _out})
_send({"done": True})
_os._exit(0)
"""

_ASSERT_MAIN = r"""
def _plain(x, depth=0):
    t = type(x)
    if depth > 200:
        return False
    if t in _SCALARS or t is bytes:
        return True
    if t in (list, tuple, set, frozenset):
        return all(_plain(v, depth + 1) for v in x)
    if t is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in x.items())
    if t in _prelude_types:
        return all(_plain(v, depth + 1) for v in vars(x).values())
    return False
def _guard(function):
    def guarded(*args, **kwargs):
        result = function(*args, **kwargs)
        if not _plain(result):
            raise TypeError("candidate returned " + type(result).__name__ + ", not plain data")
        return result
    return guarded
try:
    exec(compile(_TEST, "<test>", "exec"), _ns)
    _candidate = _guard(eval(_ENTRY, _ns))
    _ns["check"](_candidate)
except AssertionError as _error:
    _send({"assertion": _describe(_error)})
    _os._exit(1)
except BaseException as _error:
    _send({"error": _describe(_error)})
    _os._exit(1)
_send({"done": True})
_os._exit(0)
"""


def _program(prelude: str, solution: str, body: str, **constants: object) -> str:
    header = "".join(f"_{name.upper()} = {value!r}\n" for name, value in constants.items())
    return f"_PRELUDE = {prelude!r}\n_SOLUTION = {solution!r}\n{header}{_CHILD_ENCODER}{body}"


def _messages(channel: bytes) -> list[dict[str, Any]]:
    messages = []
    for line in channel.splitlines():
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ProtocolError("message is not an object")
        messages.append(message)
    return messages


_CPU_SIGNALS = {signal.SIGXCPU, signal.SIGKILL}


def _ran_out_of_time(result: ExecResult) -> bool:
    return result.timed_out or result.signal in _CPU_SIGNALS


def _syntax_error(solution: str) -> str | None:
    if not solution.strip():
        return "no code"
    try:
        ast.parse(solution)
    except (SyntaxError, ValueError) as error:  # ValueError: null bytes
        return f"{type(error).__name__}: {error}"
    return None


def _early_stage(result: ExecResult, messages: list[dict[str, Any]]) -> tuple[Stage, str | None] | None:
    """The stage when the solution's top level did not finish (or the run is untrustworthy), else None."""
    if result.anomaly:
        return "anomaly", result.anomaly
    toplevel = next((m["toplevel"] for m in messages if "toplevel" in m), None)
    if toplevel == "ok":
        return None
    if _ran_out_of_time(result):  # still `toplevel`: the stage that did not finish
        return "toplevel", "time limit exceeded at top level"
    return "toplevel", str(toplevel) if toplevel else f"exit {result.exit_code}, signal {result.signal}"


def run_io(
    sandbox: Sandbox,
    prelude: str,
    solution: str,
    entry_point: str,
    tests: Sequence[IOTest],
    limits: Limits | None = None,
) -> HarnessResult:
    """I/O mode: the child returns outputs as data; the parent judges them (see module docstring)."""
    total = len(tests)
    if error := _syntax_error(solution):
        return HarnessResult("syntax", "io", 0, total, error)
    program = _program(prelude, solution, _IO_MAIN, entry=entry_point, calls=[t.call for t in tests])
    result = sandbox.run(program, limits=limits)
    try:
        messages = _messages(result.channel)
        early = _early_stage(result, messages)
        if early:
            return HarnessResult(early[0], "io", 0, total, early[1], result)
        outputs = {m["i"]: m for m in messages if "i" in m}
        done = any(m.get("done") is True for m in messages)
        return _judge_io(tests, outputs, done, result)
    except (ValueError, KeyError, TypeError, RecursionError) as error:  # a forged, broken or truncated channel never passes
        cause = "outputs over the output cap" if result.truncated else f"protocol: {error}"
        return HarnessResult("test_error", "io", 0, total, cause, result)


def _judge_io(tests: Sequence[IOTest], outputs: dict[int, dict[str, Any]], done: bool, result: ExecResult) -> HarnessResult:
    passed, first_failure = 0, None
    for index, test in enumerate(tests):
        message = outputs.get(index)
        if message is None or "error" in message:
            stage: Stage = "timeout" if message is None and _ran_out_of_time(result) else "test_error"
            detail = message["error"] if message else f"no output (exit {result.exit_code}, signal {result.signal})"
            first_failure = first_failure or (stage, f"test {index}: {detail}")
            break
        try:
            accepted = bool(test.accept(decode(message["out"])))
        except ProtocolError:
            raise
        except Exception as error:  # the test's own check raised on this output
            accepted, first_failure = False, first_failure or ("test_error", f"test {index}: {type(error).__name__}: {error}")
        if accepted:
            passed += 1
        else:
            first_failure = first_failure or ("assertion", f"test {index}: wrong output")
    if first_failure is None and not (done and result.exit_code == 0 and result.signal is None):
        first_failure = ("timeout" if _ran_out_of_time(result) else "test_error", "the child did not finish cleanly")
    stage, error = first_failure or ("passed", None)
    return HarnessResult(stage, "io", passed, len(tests), error, result)


def run_assert(
    sandbox: Sandbox,
    prelude: str,
    solution: str,
    entry_point: str,
    test_source: str,
    limits: Limits | None = None,
) -> HarnessResult:
    """Assert mode: `check(candidate)` runs in the child; weaker, see the module docstring. Counts one test."""
    if error := _syntax_error(solution):
        return HarnessResult("syntax", "assert", 0, 1, error)
    program = _program(prelude, solution, _ASSERT_MAIN, entry=entry_point, test=test_source)
    result = sandbox.run(program, limits=limits)
    try:
        messages = _messages(result.channel)
    except (ValueError, RecursionError) as error:
        return HarnessResult("test_error", "assert", 0, 1, f"protocol: {error}", result)
    early = _early_stage(result, messages)
    if early:
        return HarnessResult(early[0], "assert", 0, 1, early[1], result)
    last = messages[-1] if messages else {}
    clean = result.exit_code == 0 and result.signal is None and not result.timed_out
    if clean and last.get("done") is True:
        return HarnessResult("passed", "assert", 1, 1, None, result)
    if _ran_out_of_time(result):
        return HarnessResult("timeout", "assert", 0, 1, "time limit exceeded", result)
    if "assertion" in last:
        return HarnessResult("assertion", "assert", 0, 1, str(last["assertion"]), result)
    detail = last.get("error") or f"no completion message (exit {result.exit_code}, signal {result.signal})"
    return HarnessResult("test_error", "assert", 0, 1, str(detail), result)
