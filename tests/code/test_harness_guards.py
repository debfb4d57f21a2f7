"""The harness's `done` guard: a run passes only when the harness itself reached its end marker and exited
cleanly.

A program may write the right outputs to the result channel (fd 3) and exit before the harness's end: every
output is there, but the harness never finished, so it is `test_error`, never `passed`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from corrgrpo_code.harness import CHILD_FILE, Expect, IOTest, run_assert, run_io
from corrgrpo_sandbox import ExecResult, Limits, Sandbox

LIMITS = Limits(cpu_s=2, wall_s=4, output_bytes=1 << 20)
TESTS = [
    IOTest("candidate(3)", "_out == 9", Expect.equals(9)),
    IOTest("candidate(4)", "_out == 16", Expect.equals(16)),
]
RIGHT_OUTPUTS = [{"i": 0, "out": 9}, {"i": 1, "out": 16}]
WRITE_AND_EXIT = "os.write(3, b''.join(json.dumps(m).encode() + b'\\n' for m in {messages}))\nos._exit(0)\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(workers=1, limits=LIMITS, preload=[CHILD_FILE]) as box:
        yield box


def test_the_right_program_passes(sandbox: Sandbox) -> None:
    """The control: the same outputs from a program the harness runs to its end pass."""
    result = run_io(sandbox, "", "def f(x):\n    return x * x\n", "f", TESTS, LIMITS)
    assert (result.stage, result.passed) == ("passed", 2), result.error


def test_right_outputs_written_at_top_level_then_exit_is_a_test_error(sandbox: Sandbox) -> None:
    messages = [{"toplevel": "ok"}, *RIGHT_OUTPUTS]
    solution = (
        "import json, os\n" + WRITE_AND_EXIT.format(messages=messages) + "def f(x):\n    return x * x\n"
    )
    result = run_io(sandbox, "", solution, "f", TESTS, LIMITS)
    # it did exit cleanly, before the harness's end
    assert result.exec is not None and result.exec.exit_code == 0
    assert (result.stage, result.ok) == ("test_error", False), result.error
    assert "did not finish" in str(result.error)


def test_right_outputs_written_in_the_first_call_then_exit_is_a_test_error(sandbox: Sandbox) -> None:
    body = WRITE_AND_EXIT.format(messages=RIGHT_OUTPUTS).replace("\n", "\n    ")
    solution = f"import json, os\ndef f(x):\n    {body}"
    result = run_io(sandbox, "", solution, "f", TESTS, LIMITS)
    assert (result.stage, result.ok) == ("test_error", False), result.error


class ChannelOnly:
    """Stands in for the sandbox in a unit test of the parent's reading: every run 'exits 0' with `channel`,
    and with `anomaly` when one is given (what the sandbox reports of a run it cannot vouch for)."""

    def __init__(self, *messages: dict[str, object], anomaly: str | None = None) -> None:
        self.channel = b"".join(json.dumps(message).encode() + b"\n" for message in messages)
        self.limits, self.anomaly = LIMITS, anomaly

    def run(self, program: str, stdin: bytes = b"", limits: Limits | None = None) -> ExecResult:
        return ExecResult(0, None, b"", b"", self.channel, False, False, 0.01, 0.01, 0, "bwrap", self.anomaly)


STARTED = ({"compiled": True}, {"toplevel": "ok"})
CHECK = "def check(candidate):\n    assert candidate(3) == 9\n"
SQUARE = "def f(x):\n    return x * x\n"


def test_assert_mode_passes_only_on_the_judges_end_marker() -> None:
    """A judge that exits 0 without its `done` (only the judge writes fd 3 in assert mode) has not passed."""
    ended = run_assert(ChannelOnly(*STARTED, {"done": True}), "", SQUARE, "f", CHECK, LIMITS)  # type: ignore[arg-type]
    assert ended.stage == "passed"
    cut = run_assert(ChannelOnly(*STARTED), "", SQUARE, "f", CHECK, LIMITS)  # type: ignore[arg-type]
    assert (cut.stage, cut.passed) == ("test_error", 0), cut.error


def test_a_run_the_sandbox_cannot_vouch_for_is_an_anomaly_whatever_its_channel_says() -> None:
    complete = (*STARTED, *RIGHT_OUTPUTS, {"done": True})
    assert run_io(ChannelOnly(*complete), "", SQUARE, "f", TESTS, LIMITS).stage == "passed"  # type: ignore[arg-type]
    broken = ChannelOnly(*complete, anomaly="the worker died mid-run")
    for result in (
        run_io(broken, "", SQUARE, "f", TESTS, LIMITS),  # type: ignore[arg-type]
        run_assert(broken, "", SQUARE, "f", CHECK, LIMITS),  # type: ignore[arg-type]
    ):
        assert (result.stage, result.passed, result.compiled) == ("anomaly", 0, None), result.mode
        assert "the worker died" in str(result.error)
