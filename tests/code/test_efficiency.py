"""Calibrated efficiency (`CORRGRPO_CODE_EFFICIENCY_MODE=calibrated`): reference copies earn ~0, real
speed-ups earn.

The proof runs in the real sandbox; the stopping rule and the bound are also checked on given times."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from corrgrpo_code import extract as parsing
from corrgrpo_code.budget import TimingBudget
from corrgrpo_code.efficiency import Calibration, PairedTimes, TimingRunFailed, time_pairs
from corrgrpo_code.harness import CHILD_FILE, HarnessResult
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_proto.code import CodeItem, CodeProblem
from corrgrpo_sandbox import ExecResult, Sandbox

BURN = "    sum(range(400_000))\n"  # ~10 ms of CPU: far beyond the timer's spread
SQUARE = CodeProblem(
    task_id="square",
    entry_point="square",
    test="def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(-2) == 4\n",
    reference=f"def square(x):\n{BURN}    return x * x\n",
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(workers=2, preload=[CHILD_FILE]) as box:
        yield box


def calibrated(sandbox: Sandbox, items: list[CodeItem]) -> list[Scored]:
    settings = CodeSettings(code_efficiency_mode="calibrated", code_run_ttl_s=0, code_workers=2)
    scorer = CodeScorer(sandbox, MemoryStore(), {}, settings)
    results = asyncio.run(scorer.score(items))
    scorer.close()
    assert all(isinstance(r, Scored) and r.components["correct"] == 1 for r in results), results
    return results  # type: ignore[return-value]


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_reference_copies_earn_nothing_and_a_faster_program_earns(sandbox: Sandbox) -> None:
    """Ten HumanEval references scored as candidates (a comment of their own: no shared run), and SQUARE
    without its burn (a tenth of the reference's CPU or so) in the same batch."""
    problems = list(itertools.islice(humaneval_problems(), 0, 100, 10))
    items = [CodeItem(problem=p, completion=fenced(f"# a copy\n{p.reference}")) for p in problems]
    items.append(CodeItem(problem=SQUARE, completion=fenced("def square(x):\n    return x * x\n")))
    *copies, faster = calibrated(sandbox, items)
    for copy in copies:
        assert copy.components["efficiency"] <= 0.05, copy.info
        assert (
            copy.info["t_ref_source"] == "paired"
            and copy.info["timing_pairs"] >= CodeSettings().code_timing_min_pairs
        )
    assert sum(copy.components["efficiency"] for copy in copies) / len(copies) <= 0.01
    assert faster.components["efficiency"] > 0.5, faster.info
    assert faster.info["t_ratio"] < faster.info["t_ratio_bound"] < 0.5 and faster.info["t_ref"] > 0


def test_copies_in_a_batch_share_one_timing(sandbox: Sandbox) -> None:
    code = fenced("def square(x):\n    return x * x\n")
    first, second = calibrated(sandbox, [CodeItem(problem=SQUARE, completion=code)] * 2)
    assert first.components["efficiency"] == second.components["efficiency"] > 0
    assert first.info["t_ratio"] == second.info["t_ratio"] and first.info["run"] == "run"


def passed(cpu_s: float) -> HarnessResult:
    run = ExecResult(0, None, b"", b"", b"", False, False, cpu_s, cpu_s, 0, "unsafe-none", None)
    return HarnessResult("passed", "io", 1, 1, exec=run)


@pytest.mark.parametrize("mode", ["paper", "calibrated"])
def test_timing_runs_do_not_parse_their_programs_again(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The reference is parsed when its problem is prepared, the candidate when it is scored: t_ref's runs and
    the calibrated pairs (4 to 48 runs a program) run them without parsing them again."""
    parses: list[str] = []
    parse = parsing.parse_python

    def counted(source: str, mode: str = "exec") -> object:
        parses.append(source)
        return parse(source, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(parsing, "parse_python", counted)
    settings = CodeSettings(code_efficiency_mode=mode, code_run_ttl_s=0, code_workers=2)
    scorer = CodeScorer(sandbox, MemoryStore(), {}, settings)
    [result] = asyncio.run(
        scorer.score([CodeItem(problem=SQUARE, completion=fenced("def square(x):\n    return x * x\n"))])
    )
    scorer.close()
    assert isinstance(result, Scored) and result.components["correct"] == 1 and result.info["t_ref"] > 0, (
        result
    )
    assert len(parses) == 1  # the candidate's, when it was scored


def test_pairs_alternate_order_and_stop_early_when_nothing_can_be_paid() -> None:
    order: list[str] = []

    def run(code: str) -> HarnessResult:
        order.append(code)
        return passed(0.002)

    times = time_pairs(run, "c", "r", Calibration(min_pairs=4, max_pairs=20), TimingBudget(10.0))
    assert order[:8] == ["c", "r", "r", "c", "c", "r", "r", "c"]
    assert times.pairs == 4  # equal times: no spread, so the median is precise at once (and at parity)
    assert times.ratio() == 1 and times.efficiency(Calibration(12, 24)) == 0


def test_a_failed_timing_run_names_its_side() -> None:
    results = iter([passed(0.001), HarnessResult("assertion", "io", 0, 1, "wrong")])
    with pytest.raises(TimingRunFailed) as failed:
        time_pairs(
            lambda code: next(results), "c", "r", Calibration(min_pairs=3, max_pairs=24), TimingBudget(10.0)
        )
    assert failed.value.side == "reference"


def test_the_bound_widens_with_the_spread() -> None:
    steady = PairedTimes([0.5] * 12, [1.0] * 12)
    noisy = PairedTimes([0.5, 0.6, 0.4] * 4, [1.0] * 12)
    calibration = Calibration(12, 24)
    assert steady.efficiency(calibration) == pytest.approx(0.5)
    assert noisy.ratio() == pytest.approx(0.5) and noisy.efficiency(calibration) < 0.45
    few = PairedTimes([0.5, 0.6, 0.4], [1.0] * 3)  # the budget ended the pairs early: a wider bound still
    assert few.efficiency(calibration) < noisy.efficiency(calibration)


def test_budget_and_maximum_end_the_pairs() -> None:
    calibration = Calibration(min_pairs=12, max_pairs=16)
    budget = TimingBudget(4.0, spent_s=0.5)  # 3.5 s left: a run's limit is 2 s (its cap, 3 s, fits)
    assert not PairedTimes([0.2] * 3, [0.3] * 3).done(calibration, budget)  # a pair like these fits
    assert PairedTimes([0.2, 2.5, 0.2], [0.3] * 3).done(calibration, budget)  # a 2.5 s run may come: no room
    faster_noisy = PairedTimes([0.001, 0.0015] * 8, [0.002] * 16)
    assert not PairedTimes(faster_noisy.candidate[:12], faster_noisy.reference[:12]).done(
        calibration, TimingBudget(10)
    )
    assert faster_noisy.done(calibration, TimingBudget(10))


def test_the_mode_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRGRPO_CODE_EFFICIENCY_MODE", "paper")
    monkeypatch.setenv("CORRGRPO_CODE_TIMING_MAX_PAIRS", "30")
    settings = CodeSettings()
    assert settings.code_efficiency_mode == "paper" and Calibration.of(settings).max_pairs == 30
    with pytest.raises(ValidationError, match="efficiency_mode"):
        CodeSettings(code_efficiency_mode="fast")
    with pytest.raises(ValidationError, match="MAX_PAIRS must be at least"):
        CodeSettings(code_timing_min_pairs=10, code_timing_max_pairs=5)
