"""Test-harness mode: run a program in the sandbox, then tests against it, and report the stage reached.

Knows nothing of rewards. Two modes, because a verdict must not rest on what the child says about
itself (everything in the child is the candidate's once its code runs):

* I/O mode (`run_io`, preferred): the child receives the program and only the *call expressions*
  of the tests (e.g. ``candidate(n=7, queries=[[0, 5]])``). It evaluates each one and writes the
  output to fd 3 as tagged JSON (builtin data only: no object can carry its own ``__eq__`` across).
  The expected values never enter the child. Each output is judged outside the candidate's process:
  by the parent on data alone when the test's check is `Expect` (equality with a literal, identity
  with True/False/None, truthiness), else by a *judge*: a second sandboxed run that receives the
  outputs as data on stdin and evaluates the test's check expressions. The parent never evaluates
  test text, and compares outputs without building hash containers of candidate-chosen keys.
* Assert mode (`run_assert`, weaker): the child runs the test source's ``check(candidate)``.
  The test runs in the prelude's own namespace (the solution's top level runs in a copy of it), so
  a solution that redefines a prelude helper the test calls does not change what the test sees;
  only the names of the entry point (the function under test) are taken from the solution.
  A pass needs a clean exit status, no timeout or signal, and the harness's completion message on
  fd 3. The candidate shares the process, so it *can* forge that message (write it and
  ``os._exit(0)``), find expected values in memory or patch live objects; the return-value guard
  (plain data or instances of prelude classes only) stops the common ``__eq__`` trick, not a
  determined attacker.

Stages, in order: ``syntax`` (the solution does not parse), ``toplevel`` (its module body raised),
``test_error`` (a test raised something other than a failed assertion, or the child died mid-way),
``assertion`` (a test's check failed), ``timeout`` (during the tests; a top level that runs out of
time is ``toplevel``), ``passed``; plus ``anomaly`` when the sandbox
reports the execution untrustworthy (`ExecResult.anomaly`).
"""

from __future__ import annotations

import ast
import base64
import itertools
import json
import marshal
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the harness only calls `sandbox.run`; importing lazily keeps it usable with any runner
    from . import ExecResult, Limits, Sandbox

Stage = Literal["syntax", "toplevel", "test_error", "assertion", "timeout", "passed", "anomaly"]
Mode = Literal["io", "assert"]


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
    """Builtin data → the tagged JSON the child writes (the parent's twin of `_CHILD_ENCODER`, for literals)."""
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
    """A check the parent decides on data alone: `_out == <literal>`, `_out is True/False/None`, `_out`, `not _out`."""

    kind: Literal["equals", "is", "truthy", "falsy"]
    value: Any = None  # equals: the literal's `canonical` form; is: True, False or None

    @classmethod
    def equals(cls, literal: Any) -> Expect:
        return cls("equals", canonical(encode(literal)))

    def holds(self, tagged: Any) -> bool:
        if self.kind == "equals":
            return canonical(tagged) == self.value
        if self.kind == "is":
            return type(tagged) is type(self.value) and tagged == self.value
        truth = _truth(tagged)
        return truth is (self.kind == "truthy")


@dataclass(frozen=True)
class IOTest:
    """One I/O-mode test: `call` runs in the child (with `candidate` bound); `check`, an expression over
    `_out`, is judged outside it: by the parent when `expect` is set, else by the sandboxed judge."""

    call: str
    check: str
    expect: Expect | None = field(default=None)


@dataclass
class HarnessResult:
    stage: Stage
    mode: Mode
    passed: int
    total: int
    error: str | None = None
    exec: ExecResult | None = None
    judge: ExecResult | None = None  # the judge run, when one was needed

    @property
    def ok(self) -> bool:
        return self.stage == "passed"


# Tagged JSON back to builtin data, in the judge (a sandboxed run: hash containers cost only its limits).
_DECODER = r"""
class _Unencodable:
    def __init__(self, type_name):
        self.type_name = type_name
    def __repr__(self):
        return "<unencodable " + self.type_name + ">"
def _decode(value):
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag, items = value.get("__t"), value.get("v")
    if tag == "tuple":
        return tuple(_decode(v) for v in items)
    if tag == "set":
        return {_decode(v) for v in items}
    if tag == "frozenset":
        return frozenset(_decode(v) for v in items)
    if tag == "dict":
        return {_decode(k): _decode(v) for k, v in items}
    if tag == "bytes":
        return bytes.fromhex(items)
    if tag == "unencodable":
        return _Unencodable(str(items))
    raise ValueError("unknown tag " + repr(tag))
"""

# Runs in the child before any candidate code; exact `type(x) is T` checks, so subclasses of builtins
# (an int whose __eq__ is always True) are not sent as data. The solution's top level runs in a copy
# of the prelude's namespace: the prelude's own functions keep theirs (assert mode's test runs there).
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
_prelude_ns = {"__name__": "__main__", "__builtins__": __builtins__}
try:
    exec(compile(_PRELUDE, "<prelude>", "exec"), _prelude_ns)
    _prelude_types = frozenset(v for v in _prelude_ns.values() if isinstance(v, type))
    _ns = dict(_prelude_ns)
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
    for _name in compile(_ENTRY, "<entry>", "eval").co_names:  # the function under test is the solution's
        if _name in _ns:
            _prelude_ns[_name] = _ns[_name]
    exec(compile(_TEST, "<test>", "exec"), _prelude_ns)
    _candidate = _guard(eval(_ENTRY, _ns))
    _prelude_ns["check"](_candidate)
except AssertionError as _error:
    _send({"assertion": _describe(_error)})
    _os._exit(1)
except BaseException as _error:
    _send({"error": _describe(_error)})
    _os._exit(1)
_send({"done": True})
_os._exit(0)
"""

# The judge: never the candidate's process, never sees its code; gets `[[index, tagged output], ...]` on stdin.
_JUDGE_MAIN = r"""
import json as _json, math, os as _os, sys as _sys
from math import inf, nan
_chan = _os.fdopen(3, "wb")
for _i, _tagged in _json.loads(_sys.stdin.buffer.read()):
    try:
        _scope = {"math": math, "inf": inf, "nan": nan, "_out": _decode(_tagged)}
        _message = {"i": _i, "ok": bool(eval(_CHECKS[str(_i)], _scope))}
    except BaseException as _error:
        _message = {"i": _i, "error": (type(_error).__name__ + ": " + str(_error))[:300]}
    _chan.write((_json.dumps(_message) + "\n").encode())
_chan.write(b'{"done": true}\n')
_chan.flush()
_os._exit(0)
"""


class _Precompiled:
    """The harness's own (constant) code, compiled once here and shipped marshalled: compiling ~100 lines in
    every child cost ~2 ms a run. A child whose interpreter differs (another image) compiles the text instead."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.code = base64.b64encode(marshal.dumps(compile(text, "<harness>", "exec")))  # 1/3 the size of a bytes repr

    def program(self, constants: dict[str, object]) -> str:
        header = "".join(f"_{name.upper()} = {value!r}\n" for name, value in constants.items())
        return (
            f"{header}import binascii as _binascii, marshal as _marshal, sys as _sys_\n"
            f"exec(_marshal.loads(_binascii.a2b_base64({self.code!r}))"
            f" if _sys_.implementation.cache_tag == {sys.implementation.cache_tag!r}"
            f" else compile({self.text!r}, '<harness>', 'exec'))\n"
        )


_IO_PROGRAM = _Precompiled(_CHILD_ENCODER + _IO_MAIN)
_ASSERT_PROGRAM = _Precompiled(_CHILD_ENCODER + _ASSERT_MAIN)
_JUDGE_PROGRAM = _Precompiled(_DECODER + _JUDGE_MAIN)


def _program(prelude: str, solution: str, body: _Precompiled, **constants: object) -> str:
    return body.program({"prelude": prelude, "solution": solution, **constants})


def _messages(channel: bytes) -> list[dict[str, Any]]:
    messages = []
    for line in channel.splitlines():
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ProtocolError("message is not an object")
        messages.append(message)
    return messages


def _indexed(messages: list[dict[str, Any]], total: int) -> list[dict[str, Any] | None]:
    """Messages by test index; an index the harness never writes is a protocol error (no candidate-keyed dict)."""
    by_index: list[dict[str, Any] | None] = [None] * total
    for message in messages:
        if "i" in message:
            index = message["i"]
            if type(index) is not int or not 0 <= index < total:
                raise ProtocolError(f"test index {index!r} out of range")
            by_index[index] = message
    return by_index


_CPU_SIGNALS = {signal.SIGXCPU, signal.SIGKILL}


def _ran_out_of_time(result: ExecResult) -> bool:
    return result.timed_out or result.signal in _CPU_SIGNALS


def parse_solution(solution: str) -> ast.Module | str:
    """The solution's syntax tree, or why it cannot be compiled. Absurd nesting is the solution's failure, never a crash."""
    if not solution.strip():
        return "no code"
    try:
        return ast.parse(solution)
    except (SyntaxError, ValueError) as error:  # ValueError: null bytes
        return f"{type(error).__name__}: {error}"
    except (RecursionError, MemoryError) as error:  # the parser's own stack: deeply nested expressions
        return f"{type(error).__name__}: nested too deeply to compile"


def syntax_error(solution: str) -> str | None:
    """Why `solution` cannot be compiled, or None."""
    tree = parse_solution(solution)
    return tree if isinstance(tree, str) else None


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
    *,
    parsed: bool = False,
) -> HarnessResult:
    """I/O mode: the child returns outputs as data; the parent or the judge decides (see module docstring).
    `parsed`: the caller has parsed `solution` with `parse_solution` already; it is not parsed twice."""
    total = len(tests)
    if not parsed and (error := syntax_error(solution)):
        return HarnessResult("syntax", "io", 0, total, error)
    program = _program(prelude, solution, _IO_PROGRAM, entry=entry_point, calls=[t.call for t in tests])
    result = sandbox.run(program, limits=limits)
    try:
        messages = _messages(result.channel)
        early = _early_stage(result, messages)
        if early:
            return HarnessResult(early[0], "io", 0, total, early[1], result)
        outputs = _indexed(messages, total)
        done = any(m.get("done") is True for m in messages)
        verdicts = _parent_verdicts(tests, outputs)
    except (ValueError, KeyError, TypeError, RecursionError, MemoryError) as error:
        cause = "outputs over the output cap" if result.truncated else f"protocol: {error}"
        return HarnessResult("test_error", "io", 0, total, cause, result)
    judge = _judge(sandbox, tests, outputs, verdicts, limits)
    if judge is not None and judge.anomaly:
        return HarnessResult("anomaly", "io", 0, total, f"judge: {judge.anomaly}", result, judge)
    return _verdict(tests, outputs, verdicts, done, result, judge)


Verdict = bool | str  # accepted, or why the check itself failed on this output


def _parent_verdicts(tests: Sequence[IOTest], outputs: list[dict[str, Any] | None]) -> dict[int, Verdict]:
    """Verdicts the parent reaches on data alone (`Expect`); the other outputs go to the judge."""
    verdicts: dict[int, Verdict] = {}
    for index, (test, message) in enumerate(zip(tests, outputs, strict=True)):
        if test.expect is not None and message is not None and "error" not in message:
            verdicts[index] = test.expect.holds(message["out"])
    return verdicts


def _judge(
    sandbox: Sandbox,
    tests: Sequence[IOTest],
    outputs: list[dict[str, Any] | None],
    verdicts: dict[int, Verdict],
    limits: Limits | None,
) -> ExecResult | None:
    """Run the judge over the outputs whose check the parent cannot decide on data; records into `verdicts`."""
    pending = [i for i, m in enumerate(outputs) if m is not None and "error" not in m and i not in verdicts]
    if not pending:
        return None
    checks = {str(i): tests[i].check for i in pending}
    program = _JUDGE_PROGRAM.program({"checks": checks})
    stdin = json.dumps([[i, outputs[i]["out"]] for i in pending]).encode()  # type: ignore[index]
    judge = sandbox.run(program, stdin=stdin, limits=limits)
    if judge.anomaly:
        return judge
    why = "judge ran out of time" if _ran_out_of_time(judge) else f"judge exit {judge.exit_code}"
    try:
        found = {m["i"]: m for m in _messages(judge.channel) if type(m.get("i")) is int}
    except ValueError:
        found = {}
    for index in pending:
        message = found.get(index)
        ok = message.get("ok") if message else None
        verdicts[index] = ok if type(ok) is bool else (str(message.get("error")) if message else why)
    return judge


def _verdict(
    tests: Sequence[IOTest],
    outputs: list[dict[str, Any] | None],
    verdicts: dict[int, Verdict],
    done: bool,
    result: ExecResult,
    judge: ExecResult | None,
) -> HarnessResult:
    passed, first_failure = 0, None
    for index, message in enumerate(outputs):
        if message is None or "error" in message:
            stage: Stage = "timeout" if message is None and _ran_out_of_time(result) else "test_error"
            detail = message["error"] if message else f"no output (exit {result.exit_code}, signal {result.signal})"
            first_failure = first_failure or (stage, f"test {index}: {detail}")
            break
        verdict = verdicts[index]
        if verdict is True:
            passed += 1
        elif verdict is False:
            first_failure = first_failure or ("assertion", f"test {index}: wrong output")
        else:  # the test's own check raised on this output, or the judge could not decide
            first_failure = first_failure or ("test_error", f"test {index}: {verdict}")
    if first_failure is None and not (done and result.exit_code == 0 and result.signal is None):
        first_failure = ("timeout" if _ran_out_of_time(result) else "test_error", "the child did not finish cleanly")
    stage, error = first_failure or ("passed", None)
    return HarnessResult(stage, "io", passed, len(tests), error, result, judge)


def run_assert(
    sandbox: Sandbox,
    prelude: str,
    solution: str,
    entry_point: str,
    test_source: str,
    limits: Limits | None = None,
    *,
    parsed: bool = False,
) -> HarnessResult:
    """Assert mode: `check(candidate)` runs in the child; weaker, see the module docstring. Counts one test.
    `parsed` as in `run_io`."""
    if not parsed and (error := syntax_error(solution)):
        return HarnessResult("syntax", "assert", 0, 1, error)
    program = _program(prelude, solution, _ASSERT_PROGRAM, entry=entry_point, test=test_source)
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
