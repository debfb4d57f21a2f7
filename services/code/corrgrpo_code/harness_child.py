"""The harness's half that runs in the sandbox (stdlib only, Python >= 3.10; see `harness` for the protocol).

Every worker of a `Sandbox(preload=[harness.CHILD_FILE])` imports this module once, before its first run, so
each forked child inherits it compiled and initialised and a run's whole program is one call with the problem
as literals (assert mode's test source comes on stdin): compiling and executing this code in every child cost
about 1.5 ms a run, as much as a typical HumanEval test.

One module over 300 lines on purpose: the sandbox preloads each file under its own name, so a second file
would be imported by its bare name inside the sandbox but as `corrgrpo_code.<name>` here (the tests import
this one), and the half that runs next to hostile code is easier to audit whole.

I/O mode (`run_io`): the child is the candidate's process. The parent trusts none of it beyond the data it
writes to fd 3, and the judge (`judge`) never sees the candidate's code. Assert mode (`run_assert`): the run's
process is the *judge*. It forks the candidate's process (`serve`) before it reads the test from stdin, so no
object in the candidate's process holds the test's text. The two talk over two pipes in the `pack` format
(data and instances of the prelude's classes, never code). Only the judge holds fd 3.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import gc
import json
import math
import operator
import os
import resource
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

CHANNEL = 3  # the fd only the parent reads
CALLS, REPLIES = 4, 5  # assert mode: the candidate's ends of its pipes from and to the judge (it has no fd 3)
SCALARS = (type(None), bool, int, float, str)
SCALAR_TYPES = frozenset(SCALARS)
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
# for prctl: opened once with the preload, not by every assert-mode run
LIBC = ctypes.CDLL(None, use_errno=True)
LINE_CAP = 1 << 28  # the longest message the judge reads from the candidate
LONG_LINE = 1 << 14  # a message this long is decoded with the collector paused
COMPILED = b'{"compiled": true}\n'
# A longer int (about 4,200 digits) crosses as hex: JSON writes ints in decimal, and Python's int/str
# conversion refuses over 4,300 digits (sys.get_int_max_str_digits), where hex() and int(..., 16) never do.
INT_BITS = 14_000


def send(message: Any, fd: int = CHANNEL) -> None:
    """`message` as one line of JSON, in one write when the pipe takes it whole."""
    data = encoded(message)
    while data:
        data = data[os.write(fd, data) :]


def encoded(message: Any) -> bytes:
    """Ints of any size cross (assert mode: a right answer over 4,300 digits must), but the int/str limit is
    lifted only for a message that hits it: the common one pays no switch, and the candidate's own code keeps
    the limit."""
    try:
        return (json.dumps(message) + "\n").encode()
    except ValueError:  # an int over the limit (anything else fails again)
        with any_int_size():
            return (json.dumps(message) + "\n").encode()


def decoded(line: bytes) -> Any:
    """A line from the other side of assert mode's pipes, its ints of any size as in `encoded`. A long one is
    read with the collector paused (see `collector_paused`). No short one holds enough containers to need it.
    """
    text = line.decode()  # `encoded` writes ASCII; json.loads of bytes would first guess their encoding
    if len(text) >= LONG_LINE:
        with collector_paused(), any_int_size():
            return json.loads(text)
    try:
        return json.loads(text)
    except ValueError:  # an int over the limit, or not JSON (then it fails again)
        with any_int_size():
            return json.loads(text)


def describe(error: BaseException) -> str:
    return (type(error).__name__ + ": " + str(error))[:300]


def encode(x: Any) -> Any:
    """Builtin data → tagged JSON. Exact `type(x) is T` checks: a subclass of a builtin (an int whose `__eq__`
    is always True) is not data, so no object carries its own `__eq__` across."""
    t = type(x)
    if t is int and x.bit_length() > INT_BITS:
        return {"__t": "int", "v": hex(x)}
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


def compiled(source: str, fd: int = CHANNEL) -> Any:
    """`source` compiled, reported on `fd` before any of it runs (the one line the parent trusts). Exits if it
    fails."""
    try:
        code = compile(source, "<program>", "exec")
    except (
        BaseException
    ) as error:  # things the parser accepts but the compiler does not: `return` outside a function
        send({"compiled": False, "error": describe(error)}, fd)
        os._exit(1)
    os.write(fd, COMPILED)  # one short write, no encoder: the child's every touched object costs a page copy
    return code


def load(prelude: str, solution: str, fd: int = CHANNEL) -> dict[str, Any]:
    """Compile the assembled program (prelude + "\n" + solution) and report it before anything runs, then run
    it as `__main__` and report its top level. Exits when either failed. Nothing here needs the prelude kept
    apart from the solution: the tests' checks run outside this process (the parent, or assert mode's judge,
    use their own)."""
    code = compiled(prelude + "\n" + solution, fd)
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(code, ns)
    except BaseException as error:
        send({"toplevel": describe(error)}, fd)
        os._exit(1)
    send({"toplevel": "ok"}, fd)
    return ns


def run_main(solution: str) -> None:
    """A stdin/stdout program: compiled and reported, then run as a script runs (its `SystemExit` ends the run
    with its code, anything else it raises is its crash). What it prints is judged outside this process."""
    exec(compiled(solution), {"__name__": "__main__", "__builtins__": builtins})


def run_io(prelude: str, solution: str, entry: str, calls: list[str], independent: bool = False) -> None:
    """Evaluate each call expression with `candidate` bound. Write each output (or the error) as it comes. The
    first error ends the run (the tests are one check function's lines), unless the calls are `independent`
    cases."""
    ns = load(prelude, solution)
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
            if not independent:
                os._exit(1)
            continue
        send({"i": index, "out": out})
    send({"done": True})
    os._exit(0)


# Assert mode's channel between judge and candidate. Tagged JSON (`encode`) has no identity, so it cannot
# carry a linked list, a tree with shared nodes, or an argument the candidate mutates in place. `pack` writes
# an object graph instead: scalars inline, every container and instance an entry of `objects`, referenced as
# {"@": index}, and a value that is not data as {"!": its type's name}. Instances travel as their class's name
# and attributes, and only classes the prelude defines are accepted (rebuilt with the receiver's own class,
# without running __init__).

KINDS = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset", dict: "dict", bytes: "bytes"}
MUTABLE = ("obj", "list", "dict", "set")  # rebuilt as empty shells first, filled once every entry exists
UNCHANGED = 0  # in a reply, the entry of an object the receiver sent and the call left as it was


class PackError(Exception):
    """The other side sent something `pack` never writes."""


class NotData(TypeError):
    """A value that cannot cross: the candidate returned (or the test passed) something other than data."""


def program_classes(ns: dict[str, Any]) -> dict[str, type]:
    """The classes a program defines (not those it imports), by name. In the judge: the prelude's, the only
    ones it rebuilds. In the candidate's process: the prelude's and the solution's (a class the judge lacks
    stays refused)."""
    return {n: v for n, v in ns.items() if isinstance(v, type) and v.__module__ == ns["__name__"]}


@contextlib.contextmanager
def any_int_size() -> Iterator[None]:
    """Assert mode's JSON between judge and candidate (both sandboxed) with ints of any size: a right answer
    over 4,300 digits must cross. Only around the codec: the candidate's own code keeps Python's default
    limit."""
    # no limit before 3.10.7
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    if limit:
        sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        if limit:
            sys.set_int_max_str_digits(limit)


class collector_paused:
    """Building or reading a big graph allocates containers by the thousand: each allocation burst set off a
    full collection that walked every one built so far (20,000 linked nodes: most of the time went there). A
    class, not a `contextlib.contextmanager`: it wraps every call's graph on both sides, and a generator's
    costs about 4x this."""

    __slots__ = ("enabled",)

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *_: object) -> None:
        if self.enabled:
            gc.enable()


def type_kinds(classes: dict[str, type]) -> dict[type, str]:
    """How each type that may cross is written: builtin containers by kind, the prelude's classes as "obj"."""
    # instances with a __dict__
    return {**KINDS, **{cls: "obj" for cls in classes.values() if cls.__dictoffset__}}


def scalars(items: Any) -> bool:
    """Whether every item is a scalar, at C speed (a list of 10^5 numbers crosses without a Python loop over
    it)."""
    return set(map(type, items)) <= SCALAR_TYPES


def pack(
    roots: list[Any],
    classes: dict[str, type],
    sent: list[Any] | None = None,
    changed: list[bool] | None = None,
    *,
    strict: bool = False,
) -> tuple[dict[str, Any], list[Any]]:
    """`roots` as a graph message, and its objects by index. `sent` (with `changed`, from `changes`): the
    objects received before a call keep their indices, and those the call did not change are sent as
    `UNCHANGED`. `strict` (the judge's arguments): a value that is not data raises `NotData` instead of
    crossing as {"!": ...}."""
    kinds = type_kinds(classes)
    objects: list[Any] = []
    packed: list[Any] = []
    index: dict[int, int] = {}
    queue: list[int] = []

    def add(x: Any, pending: bool = True) -> int:
        at = len(objects)
        index.setdefault(id(x), at)
        objects.append(x)
        packed.append(None if pending else UNCHANGED)
        if pending:
            queue.append(at)
        return at

    def ref(x: Any) -> Any:
        if type(x) in SCALAR_TYPES:
            return x
        if type(x) not in kinds:
            if strict:
                raise NotData(f"the test passed the candidate a {type(x).__name__}, which is not data")
            return {"!": type(x).__name__}
        at = index.get(id(x))
        return {"@": add(x) if at is None else at}

    for at, x in enumerate(sent or ()):
        add(x, changed is None or changed[at])
    out = [ref(x) for x in roots]
    while queue:  # no recursion: a linked list of 10^5 nodes is 10^5 entries, not 10^5 frames
        at = queue.pop()
        x = objects[at]
        k = kinds[type(x)]
        if k == "dict":
            plain = scalars(x) and scalars(x.values())
            entry = [k, list(map(list, x.items())) if plain else [[ref(key), ref(v)] for key, v in x.items()]]
        elif k == "bytes":
            entry = [k, x.hex()]
        elif k == "obj":
            entry = [k, type(x).__name__, [[name, ref(v)] for name, v in vars(x).items()]]
        else:
            entry = [k, list(x) if scalars(x) else [ref(v) for v in x]]
        packed[at] = entry
    return {"roots": out, "objects": packed}, objects


def held(x: Any) -> list[Any] | None:
    """What a received object holds, by reference (so nothing is freed and its address reused); None if
    immutable."""
    t = type(x)
    if t is list or t is set:
        return list(x)
    if t is dict or t not in KINDS:
        items = x if t is dict else vars(x)
        return [*items.keys(), *items.values()]
    return None


def changes(objects: list[Any], before: list[list[Any] | None]) -> list[bool]:
    """Which of the objects a call received it changed: any item replaced, added or removed (by identity)."""
    changed = []
    for x, was in zip(objects, before, strict=True):
        now = held(x)
        changed.append(now is not None and (len(now) != len(was) or not all(map(operator.is_, now, was))))  # type: ignore[arg-type]
    return changed


def unpack(message: Any, classes: dict[str, type], sent: list[Any] = ()) -> tuple[list[Any], list[Any]]:  # type: ignore[assignment]
    """A graph message back to values, and its objects by index. The objects in `sent` (what this side packed
    before the call) are updated in place where the other side changed them, so a test sees the candidate's
    mutations."""
    if (
        type(message) is not dict
        or type(message.get("roots")) is not list
        or type(message.get("objects")) is not list
    ):
        raise PackError("not a graph message")
    entries: list[Any] = message["objects"]
    kinds = type_kinds(classes)
    pending, building = object(), object()
    made: list[Any] = [pending] * len(entries)
    for at, entry in enumerate(entries):
        if at < len(sent):
            if entry != UNCHANGED and (type(entry) is not list or entry[:1] != [kinds.get(type(sent[at]))]):
                raise PackError(f"object {at} changed its type")
            if entry != UNCHANGED and entry[0] == "obj" and entry[1:2] != [type(sent[at]).__name__]:
                raise PackError(f"object {at} changed its class")
            made[at] = sent[at]
        elif type(entry) is not list or not entry:
            raise PackError(f"object {at} is not an entry")
        elif entry[0] == "obj":
            if type(entry[1]) is not str:
                raise PackError(f"object {at} has no class name")
            if entry[1] not in classes:
                raise NotData(f"{entry[1][:80]} is not data (not a class the prelude defines)")
            made[at] = object.__new__(classes[entry[1]])
        elif entry[0] in MUTABLE:
            made[at] = {"list": list, "dict": dict, "set": set}[entry[0]]()

    def value(v: Any) -> Any:
        if type(v) in SCALAR_TYPES:
            return v
        at = v.get("@") if type(v) is dict else None
        if type(at) is int and 0 <= at < len(made):
            made_at = made[at]
            return made_at if made_at is not pending and made_at is not building else resolve(at)
        if type(v) is dict and type(v.get("!")) is str:
            raise NotData(f"{v['!']} is not data")
        raise PackError("not a value")

    def resolve(at: int) -> Any:  # immutable entries are built on first use, from the shells
        if made[at] is building:
            raise PackError(f"object {at} contains itself")
        if made[at] is pending:
            made[at] = building
            k, items = entries[at][0], entries[at][1]
            if k == "tuple":
                made[at] = tuple(items) if scalars(items) else tuple(map(value, items))
            elif k == "frozenset":
                made[at] = frozenset(items) if scalars(items) else frozenset(map(value, items))
            elif k == "bytes" and type(items) is str:
                made[at] = bytes.fromhex(items)
            else:
                raise PackError(f"object {at}: unknown entry {k!r}")
        return made[at]

    roots = [value(v) for v in message["roots"]]
    # instances and lists first: a dict or set hashes its members, which may be instances filled here
    for kinds in (("obj", "list"), ("dict", "set")):
        for at, entry in enumerate(entries):
            if entry == UNCHANGED or entry[0] not in kinds:
                continue
            target = made[at]
            if entry[0] == "list":
                target[:] = entry[1] if scalars(entry[1]) else [value(v) for v in entry[1]]
            elif entry[0] == "set":
                items = entry[1] if scalars(entry[1]) else [value(v) for v in entry[1]]
                target.clear()
                target.update(items)
            elif entry[0] == "dict":
                pairs = [(value(k), value(v)) for k, v in entry[1]]
                target.clear()
                target.update(pairs)
            else:
                attributes = [(name, value(v)) for name, v in entry[2]]
                if not all(type(name) is str for name, _ in attributes):
                    raise PackError(f"object {at}: an attribute name is not a string")
                vars(target).clear()
                vars(target).update(attributes)
    return roots, made


class Candidate:
    """The judge's stand-in for the function under test: each call a round trip to the candidate's process."""

    def __init__(self, pid: int, calls: int, replies: int, classes: dict[str, type]) -> None:
        self.pid, self.calls, self.classes = pid, calls, classes
        self.replies = os.fdopen(replies, "rb")

    def send(self, message: Any) -> None:
        try:
            send(message, self.calls)
        except BrokenPipeError:
            raise CandidateLost(self.ended()) from None

    def receive(self) -> dict[str, Any]:
        line = self.replies.readline(LINE_CAP)
        if not line.endswith(b"\n"):
            raise CandidateLost(
                self.ended() if len(line) < LINE_CAP else "the candidate's answer is too long"
            )
        message = decoded(line)
        if type(message) is not dict:
            raise PackError("the candidate's answer is not an object")
        return message

    def ended(self) -> str:
        """Why the candidate's process is gone. Raises CandidateOutOfTime when its CPU limit ended it (SIGXCPU
        at the soft limit, or SIGKILL at the hard one when it ignored that)."""
        _, status, usage = os.wait4(self.pid, 0)
        if not os.WIFSIGNALED(status):
            return f"the candidate's process exited with status {os.waitstatus_to_exitcode(status)}"
        number = os.WTERMSIG(status)
        cpu_limit = resource.getrlimit(resource.RLIMIT_CPU)[0]
        out_of_cpu = (
            cpu_limit != resource.RLIM_INFINITY and usage.ru_utime + usage.ru_stime >= cpu_limit - 0.05
        )
        if number == signal.SIGXCPU or (number == signal.SIGKILL and out_of_cpu):
            raise CandidateOutOfTime(f"the candidate's process ran out of CPU time (signal {number})")
        return f"the candidate's process was killed by signal {number}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # the common call, positional scalars only, goes as a plain JSON array, and a scalar answer to any
        # call that changed nothing it received comes back as `value`: the graph's bookkeeping cost ~0.1 ms a
        # call on each side
        sent: list[Any] = []
        if not kwargs and scalars(args):
            self.send(args)
        else:
            with collector_paused():
                message, sent = pack([args, kwargs], self.classes, strict=True)
                self.send({"call": message})
        reply = self.receive()
        if "raised" in reply:
            raise raised(reply.get("raised"), reply.get("message"))
        if "value" in reply:
            # "nothing changed" is the candidate's word here, as UNCHANGED entries are in "returned"
            value = reply["value"]
            if type(value) not in SCALAR_TYPES:
                raise PackError("the candidate's value is not a scalar")
            return value
        with collector_paused():
            (result,), _ = unpack(reply.get("returned"), self.classes, sent)
        return result


class CandidateLost(Exception):
    """The candidate's process ended (or broke the protocol) during a call."""


class CandidateOutOfTime(CandidateLost):
    """The candidate's process was ended by its CPU limit during a call: a timeout, not the test's error."""


class CandidateError(Exception):
    """The candidate raised an exception that is not one of the builtin ones."""


def raised(name: Any, message: Any) -> Exception:
    """The candidate's exception, rebuilt in the judge from its type's name and message (builtins only)."""
    text = str(message)[:300]
    kind = getattr(builtins, name, None) if type(name) is str else None
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(text)
        except Exception:  # a constructor that wants other arguments (UnicodeDecodeError)
            pass
    return CandidateError(f"{str(name)[:80]}: {text}")


def run_assert(prelude: str, solution: str, entry: str) -> None:
    """The judge: fork the candidate's process, then read the test source from stdin and run its `check` in
    the prelude's namespace here, with a `Candidate` standing in for the function under test. Only this
    process writes on fd 3."""
    # no ptrace, no /proc/<judge>/fd or mem for the candidate (same uid)
    LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if LIBC.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        send({"anomaly": "the judge could not make itself non-dumpable"})
        os._exit(1)
    calls_read, calls = os.pipe()
    replies, replies_write = os.pipe()
    gc.freeze()  # the collector of neither process walks (and so copies) the pages the two still share
    pid = os.fork()
    if pid == 0:
        become_candidate(calls_read, replies_write)
        serve(prelude, solution, entry)
    os.close(calls_read)
    os.close(replies_write)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a candidate gone mid-call is an error here, not a signal
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    candidate = Candidate(pid, calls, replies, {})
    try:
        try:  # while the candidate loads
            test = sys.stdin.buffer.read().decode()
            exec(compile(prelude, "<prelude>", "exec"), ns)
            candidate.classes = program_classes(ns)
            if entry.isidentifier():
                # a prelude helper or the test calling the function by name calls the candidate
                ns[entry] = candidate
            exec(compile(test, "<test>", "exec"), ns)
            check: Callable[[Any], Any] | BaseException = ns["check"]
        except BaseException as error:
            check = error
        relay(candidate)
        if isinstance(check, BaseException):
            raise check
        check(candidate)
    except AssertionError as error:
        finish({"assertion": describe(error)}, pid)
    except CandidateOutOfTime as error:
        finish({"timeout": describe(error)}, pid)
    except BaseException as error:
        finish({"error": describe(error)}, pid)
    finish({"done": True}, pid)


def relay(candidate: Candidate) -> None:
    """Pass on what the candidate's process reports before its first call: compiled (trusted: nothing of the
    candidate has run yet), its top level and its entry point (not trusted, and they need not be)."""
    try:
        first = candidate.receive()
    except (CandidateLost, PackError, ValueError) as error:
        finish({"anomaly": f"the candidate's process ended before compiling: {error}"}, candidate.pid)
    send({k: v for k, v in first.items() if k in ("compiled", "error")})
    if first.get("compiled") is not True:
        finish({}, candidate.pid)
    try:
        toplevel = candidate.receive().get("toplevel")
    except (CandidateLost, PackError, ValueError) as error:
        toplevel = describe(error)
    if toplevel != "ok":
        finish({"toplevel": str(toplevel)[:300]}, candidate.pid)
    send({"toplevel": "ok"})
    ready = candidate.receive()
    if ready.get("ready") is not True:
        raise CandidateError(str(ready.get("error"))[:300])


def finish(message: dict[str, Any], pid: int) -> None:
    if message:
        send(message)
    os.kill(pid, signal.SIGKILL)
    os._exit(0 if message.get("done") is True else 1)


def become_candidate(calls: int, replies: int) -> None:
    """In the judge's fork, before anything of the candidate runs: stdin (the test's text) becomes /dev/null,
    fd 3 and every other fd but stdout, stderr and the two pipes (moved to `CALLS`, `REPLIES`) are closed."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if replies == CALLS:
        replies = os.dup(replies)
    os.dup2(calls, CALLS)
    os.dup2(replies, REPLIES)
    os.closerange(3, CALLS)  # the channel above all
    os.closerange(REPLIES + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def serve(prelude: str, solution: str, entry: str) -> None:
    """The candidate's process: load the program, then answer calls until the judge closes the pipe. Never
    returns."""
    ns = load(prelude, solution, REPLIES)
    try:
        function = eval(entry, ns)
    except BaseException as error:
        send({"error": describe(error)}, REPLIES)
        os._exit(1)
    classes = program_classes(ns)
    send({"ready": True}, REPLIES)
    calls = os.fdopen(CALLS, "rb")
    for line in calls:
        try:
            message = decoded(line)
            if type(message) is list:  # positional scalars (`Candidate.__call__`)
                result, sent, changed = function(*message), [], []
            else:
                with collector_paused():
                    (args, kwargs), sent = unpack(message["call"], classes)
                    before = list(map(held, sent))
                result = function(*args, **kwargs)
                changed = changes(sent, before)
            if type(result) in SCALAR_TYPES and not any(changed):  # nothing to rebuild on the judge's side
                reply: dict[str, Any] = {"value": result}
            else:
                with collector_paused():
                    reply = {"returned": pack([result], classes, sent, changed)[0]}
            send(reply, REPLIES)
        except BaseException as error:
            send({"raised": type(error).__name__, "message": str(error)[:300]}, REPLIES)
    os._exit(0)


class Unencodable:
    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return "<unencodable " + self.type_name + ">"


def decode(value: Any) -> Any:
    """Tagged JSON back to builtin data (in the judge, a sandboxed run: hash containers cost only its own)."""
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
    if tag == "int":
        return int(items, 16)
    if tag == "unencodable":
        return Unencodable(str(items))
    raise ValueError("unknown tag " + repr(tag))


def judge(checks: dict[str, str]) -> None:
    """Never the candidate's process: evaluate each check over `[[index, tagged output], ...]` read from
    stdin."""
    for index, tagged in json.loads(sys.stdin.buffer.read()):
        try:
            scope = {"math": math, "inf": math.inf, "nan": math.nan, "_out": decode(tagged)}
            message = {"i": index, "ok": bool(eval(checks[str(index)], scope))}
        except BaseException as error:
            message = {"i": index, "error": describe(error)}
        send(message)
    send({"done": True})
    os._exit(0)
