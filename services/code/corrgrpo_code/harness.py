"""Test-harness mode: run a program in the sandbox, then tests against it, and report the stage reached.

Knows nothing of rewards. Two modes, because a verdict must not rest on what the child says about itself
(everything in the child is the candidate's once its code runs):

* I/O mode (`run_io`, preferred): the child receives the program and only the *call expressions* of the tests
  (e.g. ``candidate(n=7, queries=[[0, 5]])``). It evaluates each one and writes the output to fd 3 as tagged
  JSON (builtin data only: no object can carry its own ``__eq__`` across). The expected values never enter the
  child. Each output is judged outside the candidate's process: by the parent on data alone when the test's
  check is `Expect` (equality with a literal, identity with True/False/None, truthiness), else by a *judge*: a
  second sandboxed run that receives the outputs as data on stdin and evaluates the test's check expressions.
  The parent never evaluates test text, and compares outputs without building hash containers of
  candidate-chosen keys.
* Assert mode (`run_assert`): the test's ``check(candidate)`` runs in a *judge*, the run's own process, in the
  prelude's namespace; ``candidate`` is a stand-in that sends each call's arguments to the candidate's process
  and returns the answer, both as data (`harness_child.pack`: builtin data, and instances of classes the
  prelude defines, such as LeetCode's ``ListNode``, rebuilt with the judge's own class; shared nodes and
  cycles kept; the arguments come back after each call, so a test sees what the candidate mutated in place).
  The judge forks the candidate's process before anything of the candidate runs and before it reads the test
  source from stdin: the candidate keeps only stdout, stderr and its two pipes (stdin is /dev/null, no fd 3),
  and no object in its process holds the test's text. The judge is non-dumpable (no ptrace, no
  ``/proc/<judge>/fd`` or ``mem`` for the same uid) and alone writes fd 3: whatever the candidate writes,
  exits with or returns, only the judge's ``done`` passes. A candidate that kills or stops the judge, never
  answers or answers garbage fails (``test_error`` or ``timeout``). The worker's child splices stdin into its
  memfd without reading it, so the heap the candidate inherits holds no copy of the test either. What cannot
  be judged this way fails with ``test_error`` (syntax and compile 1, runtime 0): a test that hands the
  candidate something that is not data (a function, an instance of a class the prelude does not define),
  expects such a thing back (an object of the solution's own class: LeetCode's design problems), inspects the
  function object itself, or names the solution's definitions other than a plain entry point's name. Of the
  problems split sends here (6 of HumanEval, 46 of the LeetCodeDataset train file) none does: every canonical
  solution passes, as do all 164 and all 1,890 when every problem is forced into assert mode.

Stages, in order: ``syntax`` (the solution does not parse, or the assembled program ``prelude + "\n" +
solution`` does not compile in the sandbox: `HarnessResult.compiled` is False), ``toplevel`` (its module body
raised), ``test_error`` (a test raised something other than a failed assertion, or the child died mid-way),
``assertion`` (a test's check failed), ``timeout`` (during the tests, or a run that finished but was measured
over its CPU limit: `out_of_time`; a top level that runs out of time is ``toplevel``), ``passed``; plus
``anomaly`` when the sandbox reports the execution untrustworthy (`ExecResult.anomaly`), or the harness
stopped before compiling the program.

What runs in the child is `harness_child.py`: a sandbox made with `Sandbox(preload=[CHILD_FILE])` imports it
once per worker, so a run's program is one call.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from corrgrpo_code.extract import syntax_error
from corrgrpo_sandbox import ExecResult

if TYPE_CHECKING:  # the harness only calls `sandbox.run`: any runner with that method will do
    from corrgrpo_sandbox import Limits, Sandbox


class ChannelError(ValueError):
    """The channel carried something the harness never writes."""


_unencodable_ids = itertools.count()


def canonical(tagged: Any) -> Any:
    """Tagged JSON → a hash-free form whose `==` is Python's `==` of the decoded data.


    Numbers that compare equal get one form (`1 == 1.0 == True`). Sets and dicts become sorted
    tuples, so no hash container of candidate-chosen keys is built (colliding hashes cost nothing).
    An unencodable value is equal to nothing. Raises ChannelError on tags the harness never writes.
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
        raise ChannelError(f"unexpected JSON value of type {kind.__name__}")
    tag, items = tagged.get("__t"), tagged.get("v")
    if tag == "unencodable":
        return ("u", next(_unencodable_ids))
    if tag == "bytes" and type(items) is str:
        return ("b", bytes.fromhex(items))
    if tag == "int" and type(items) is str:
        return ("n", int(items, 16))  # `harness_child.INT_BITS`: linear, and no digit limit in base 16
    if type(items) is not list:
        raise ChannelError(f"tag {tag!r} without a list of items")
    if tag == "tuple":
        return ("t", tuple(map(canonical, items)))
    if tag in ("set", "frozenset"):
        return ("S", tuple(sorted(map(canonical, items))))
    if tag == "dict":
        return ("d", tuple(sorted((canonical(k), canonical(v)) for k, v in map(_pair, items))))
    raise ChannelError(f"unknown tag {tag!r}")


def _pair(item: Any) -> tuple[Any, Any]:
    if type(item) is not list or len(item) != 2:
        raise ChannelError("dict item is not a [key, value] pair")
    return item[0], item[1]


def encode(value: Any) -> Any:
    """Builtin data → the tagged JSON the child writes (the parent's twin of `harness_child.encode`, for
    literals)."""
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
    """A check the parent decides on data alone: `_out == <literal>`, `_out is True/False/None`, `_out`, `not
    _out` (and the subclasses' forms)."""

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


# the JSON numbers the child writes (a long int crosses tagged: left to the judge)
_NUMBERS = (int, float, bool)


@dataclass(frozen=True)
class Near(Expect):
    """`abs(_out - value) < tolerance` (`<=` unless `strict`), or with `relative` set `math.isclose(_out,
    value, rel_tol=relative, abs_tol=tolerance)`: the same arithmetic on the same numbers as the judge's.
    Decided when the output is a number. Anything else (and an overflow) is left to the judge, whose error it
    is."""

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
    """`tuple(_out) == tuple(<literal>)` or `list(_out) == list(<literal>)`: `value` holds the literal's items
    in `canonical` form. Decided when the output is a list or a tuple (item by item, as `==` compares).
    Another iterable (a str, a set, a dict) is left to the judge."""

    def holds(self, tagged: Any) -> bool | None:
        if type(tagged) is dict and tagged.get("__t") == "tuple":
            tagged = tagged.get("v")
        if type(tagged) is not list:
            return None
        return len(tagged) == len(self.value) and tuple(map(canonical, tagged)) == self.value


def channel_messages(channel: bytes) -> list[dict[str, Any]]:
    """The channel's JSON lines, parsed as one array (one parse). Anything but JSON objects is a protocol
    error."""
    messages = json.loads(b"[" + b",".join(channel.splitlines()) + b"]")
    if not all(type(message) is dict for message in messages):
        raise ChannelError("message is not an object")
    return messages


def by_test_index(messages: list[dict[str, Any]], total: int) -> list[dict[str, Any] | None]:
    """Messages by test index. An index the harness never writes is a protocol error (no candidate-keyed
    dict)."""
    by_index: list[dict[str, Any] | None] = [None] * total
    for message in messages:
        if "i" in message:
            index = message["i"]
            if type(index) is not int or not 0 <= index < total:
                raise ChannelError(f"test index {index!r} out of range")
            by_index[index] = message
    return by_index


def first_message(channel: bytes) -> dict[str, Any]:
    """The channel's first line: written by the harness before anything of the program runs, so what a
    candidate writes after it (garbage included) cannot change it."""
    try:
        first = json.loads(channel.split(b"\n", 1)[0])
    except ValueError:
        return {}
    return first if type(first) is dict else {}


Stage = Literal["syntax", "toplevel", "test_error", "assertion", "timeout", "passed", "anomaly"]
Mode = Literal["io", "assert"]


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
    # the assembled program passed compile() in the sandbox before any of it ran (False: it did not, stage
    # syntax); None when the run never got that far (the parent's parse decided `syntax`, or an anomaly)
    compiled: bool | None = None
    budget_cut: bool = False  # a verdict's budget, not the run's own limit, ended it (`stdio.run_stdin`)

    @property
    def ok(self) -> bool:
        return self.stage == "passed"

    def dump(self) -> bytes:
        """What a stored verdict keeps: the stage and counts, and of `exec` only its times and isolation."""
        run = self.exec
        timing = {"cpu_s": run.cpu_s, "wall_s": run.wall_s, "isolation": run.isolation} if run else None
        fields = ("stage", "mode", "passed", "total", "error", "compiled")
        return json.dumps({**{name: getattr(self, name) for name in fields}, "exec": timing}).encode()

    @classmethod
    def load(cls, data: bytes) -> HarnessResult:
        saved: dict[str, Any] = json.loads(data)
        timing = saved.pop("exec")
        run = None
        if timing is not None:
            cpu_s, wall_s, isolation = timing["cpu_s"], timing["wall_s"], timing["isolation"]
            run = ExecResult(0, None, b"", b"", b"", False, False, cpu_s, wall_s, 0, isolation, None)
        return cls(**saved, exec=run)


# the child's half: hand it to `Sandbox(preload=...)`
CHILD_FILE = Path(__file__).with_name("harness_child.py")
CHILD_MODULE = CHILD_FILE.stem  # the name the sandbox's worker imports it under
# What a program may import beyond the standard library: LeetCodeDataset's prelude imports sortedcontainers.
RUN_PACKAGES = ("sortedcontainers",)


def _program(function: str, *arguments: object) -> str:
    """A run's whole program: one call into the preloaded child half, with the arguments as literals."""
    return f"from {CHILD_MODULE} import {function}\n{function}({', '.join(map(repr, arguments))})\n"


def main_program(solution: str) -> str:
    """A run of `solution` as a script (`harness_child.run_main`): fd 3's first line says if it compiled."""
    return _program("run_main", solution)


_CPU_SIGNALS = {signal.SIGXCPU, signal.SIGKILL}


def out_of_time(result: ExecResult, limits: Limits) -> bool:
    """Killed by a limit, or measured over `limits.cpu_s` of CPU: RLIMIT_CPU counts whole seconds, and a
    program that ignores SIGXCPU runs on to the hard limit a second later, so a run that finished may still be
    too slow."""
    return result.timed_out or result.signal in _CPU_SIGNALS or result.cpu_s > limits.cpu_s


def _over_time(result: ExecResult, limits: Limits) -> str:
    return f"time limit exceeded ({result.cpu_s:.2f} s of CPU, limit {limits.cpu_s:g} s)"


def _early_stage(
    result: ExecResult, limits: Limits, first: dict[str, Any], messages: list[dict[str, Any]]
) -> tuple[Stage, str | None] | None:
    """The stage when the program did not compile or its top level did not finish (or the run is
    untrustworthy)."""
    if result.anomaly:
        return "anomaly", result.anomaly
    if first.get("compiled") is False:
        return "syntax", str(first.get("error"))
    if first.get("compiled") is not True:
        if out_of_time(result, limits):
            return "toplevel", "time limit exceeded before the program compiled"
        return (
            "anomaly",
            "the harness stopped before compiling the program "
            f"(exit {result.exit_code}, signal {result.signal})",
        )
    toplevel = next((m["toplevel"] for m in messages if "toplevel" in m), None)
    if toplevel == "ok":
        return None
    if out_of_time(result, limits):  # still `toplevel`: the stage that did not finish
        return "toplevel", "time limit exceeded at top level"
    return "toplevel", str(toplevel) if toplevel else f"exit {result.exit_code}, signal {result.signal}"


def _compiled(first: dict[str, Any], stage: Stage) -> bool | None:
    compiled = first.get("compiled")
    return compiled if type(compiled) is bool and stage != "anomaly" else None


def run_io(
    sandbox: Sandbox,
    prelude: str,
    solution: str,
    entry_point: str,
    tests: Sequence[IOTest],
    limits: Limits | None = None,
    *,
    parsed: bool = False,
    independent: bool = False,
) -> HarnessResult:
    """I/O mode: the child returns outputs as data. The parent or the judge decides (see module docstring).
    `parsed`: the caller has parsed `solution` with `parse_solution` already. It is not parsed twice.
    `independent`: the tests are separate cases, not the lines of one check function: every case runs, and one
    that raised or ran out of time decides the stage even after a wrong output in an earlier one."""
    total = len(tests)
    if not parsed and (error := syntax_error(solution)):
        return HarnessResult("syntax", "io", 0, total, error)
    limits = limits or sandbox.limits
    program = _program("run_io", prelude, solution, entry_point, [t.call for t in tests], independent)
    result = sandbox.run(program, limits=limits)
    first = first_message(result.channel)
    try:
        messages = channel_messages(result.channel)
        early = _early_stage(result, limits, first, messages)
        if early:
            return HarnessResult(
                early[0], "io", 0, total, early[1], result, compiled=_compiled(first, early[0])
            )
        outputs = by_test_index(messages, total)
        done = any(m.get("done") is True for m in messages)
        verdicts = _parent_verdicts(tests, outputs)
    except (ValueError, KeyError, TypeError, RecursionError, MemoryError) as error:
        cause = "outputs over the output cap" if result.truncated else f"protocol: {error}"
        return HarnessResult(
            "test_error", "io", 0, total, cause, result, compiled=_compiled(first, "test_error")
        )
    judge = _judge(sandbox, tests, outputs, verdicts, limits)
    if judge is not None and judge.anomaly:
        return HarnessResult("anomaly", "io", 0, total, f"judge: {judge.anomaly}", result, judge)
    verdict = _verdict(tests, outputs, verdicts, done, result, limits, judge, independent)
    return dataclasses.replace(verdict, compiled=True)


Verdict = bool | str  # accepted, or why the check itself failed on this output


def _parent_verdicts(tests: Sequence[IOTest], outputs: list[dict[str, Any] | None]) -> dict[int, Verdict]:
    """Verdicts the parent reaches on data alone (`Expect`). The other outputs (and those an `Expect` leaves
    undecided: a string where a number was expected, say) go to the judge."""
    verdicts: dict[int, Verdict] = {}
    for index, (test, message) in enumerate(zip(tests, outputs, strict=True)):
        if test.expect is not None and message is not None and "error" not in message:
            verdict = test.expect.holds(message["out"])
            if verdict is not None:
                verdicts[index] = verdict
    return verdicts


def _judge(
    sandbox: Sandbox,
    tests: Sequence[IOTest],
    outputs: list[dict[str, Any] | None],
    verdicts: dict[int, Verdict],
    limits: Limits,
) -> ExecResult | None:
    """Run the judge over the outputs whose check the parent cannot decide on data. Records in `verdicts`."""
    pending = [i for i, m in enumerate(outputs) if m is not None and "error" not in m and i not in verdicts]
    if not pending:
        return None
    checks = {str(i): tests[i].check for i in pending}
    program = _program("judge", checks)
    stdin = json.dumps([[i, outputs[i]["out"]] for i in pending]).encode()  # type: ignore[index]
    judge = sandbox.run(program, stdin=stdin, limits=limits)
    if judge.anomaly:
        return judge
    why = "judge ran out of time" if out_of_time(judge, limits) else f"judge exit {judge.exit_code}"
    try:
        found = {m["i"]: m for m in channel_messages(judge.channel) if type(m.get("i")) is int}
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
    limits: Limits,
    judge: ExecResult | None,
    independent: bool,
) -> HarnessResult:
    late = out_of_time(result, limits)
    passed, first_failure = 0, None
    for index, message in enumerate(outputs):
        if message is None or "error" in message:
            stage: Stage = "timeout" if message is None and late else "test_error"
            detail = (
                message["error"]
                if message
                else f"no output (exit {result.exit_code}, signal {result.signal})"
            )
            if first_failure is None or (independent and first_failure[0] == "assertion"):
                # independent cases: a crash outranks a wrong output
                first_failure = (stage, f"test {index}: {detail}")
            if message is None or not independent:
                break  # no output follows a missing one. A check function's first error ends it
            continue
        verdict = verdicts[index]
        if verdict is True:
            passed += 1
        elif verdict is False:
            first_failure = first_failure or ("assertion", f"test {index}: wrong output")
        else:  # the test's own check raised on this output, or the judge could not decide
            first_failure = first_failure or ("test_error", f"test {index}: {verdict}")
    if first_failure is None and not (done and result.exit_code == 0 and result.signal is None):
        first_failure = ("timeout" if late else "test_error", "the child did not finish cleanly")
    if late and (first_failure is None or first_failure[0] != "timeout"):  # finished, but over its limit
        first_failure = ("timeout", _over_time(result, limits))
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
    """Assert mode: `check(candidate)` runs in the judge, the candidate in its own process (see the module
    docstring). Counts one test. `parsed` as in `run_io`."""
    if not parsed and (error := syntax_error(solution)):
        return HarnessResult("syntax", "assert", 0, 1, error)
    limits = limits or sandbox.limits
    program = _program("run_assert", prelude, solution, entry_point)
    # read by the judge after its fork
    result = sandbox.run(program, stdin=test_source.encode(), limits=limits)
    try:
        messages = channel_messages(result.channel)  # every line is the judge's
    except (ValueError, RecursionError) as error:
        return HarnessResult("test_error", "assert", 0, 1, f"protocol: {error}", result)
    first = messages[0] if messages else {}
    said = next((m["anomaly"] for m in messages if "anomaly" in m), None)
    early = (
        ("anomaly", f"judge: {said}")
        if said and not result.anomaly
        else _early_stage(result, limits, first, messages)
    )
    compiled = _compiled(first, early[0] if early else "passed")
    if early:
        return HarnessResult(early[0], "assert", 0, 1, early[1], result, compiled=compiled)
    last = messages[-1]
    if out_of_time(result, limits) or "timeout" in last:  # the whole run's limits, or the candidate's alone
        detail = str(last.get("timeout") or _over_time(result, limits))
        return HarnessResult("timeout", "assert", 0, 1, detail, result, compiled=compiled)
    if result.exit_code == 0 and result.signal is None and last.get("done") is True:
        return HarnessResult("passed", "assert", 1, 1, None, result, compiled=compiled)
    if "assertion" in last:
        return HarnessResult("assertion", "assert", 0, 1, str(last["assertion"]), result, compiled=compiled)
    detail = last.get("error") or f"no completion message (exit {result.exit_code}, signal {result.signal})"
    return HarnessResult("test_error", "assert", 0, 1, str(detail), result, compiled=compiled)
