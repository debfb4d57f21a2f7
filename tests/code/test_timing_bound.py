"""Timing has a hard bound: the sandbox CPU that timing spends on one correct program (`calibrated`: its pairs, both
sides, every stdin case; `paper`: its problem's t_ref runs) is at most `CORRGRPO_CODE_TIMING_BUDGET_S`, whatever the
program costs, and a run the budget cuts pays efficiency 0, never an item error.

The CPU is counted here, from every sandbox run's `cpu_s`, not taken from the service's own account."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from corrgrpo_code.efficiency import Calibration, PairedTimes
from corrgrpo_code.extract import extract
from corrgrpo_code.harness import CHILD_FILE, HarnessResult
from corrgrpo_code.prepared import PreparedProblem
from corrgrpo_code.runs import dump, run_key
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_code.timing_budget import BudgetedSandbox, OverBudget, TimingBudget
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_proto.code import AnyProblem, CodeItem, CodeProblem, StdinProblem
from corrgrpo_sandbox import ExecResult, Limits, Sandbox

BUDGET_S = 4.0
SLOW_S = 1.5  # a slow side's CPU per run: three pairs of it, or four reference runs, are over the budget
CASES = 12
SLACK_S = 0.05  # the kernel's CPU accounting ticks


class CountingSandbox(Sandbox):
    """The real sandbox, which adds up the CPU of every run it makes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lock, self.cpu_s = threading.Lock(), 0.0

    def run(self, source: str, **kwargs: Any) -> ExecResult:
        result = super().run(source, **kwargs)
        with self.lock:
            self.cpu_s += result.cpu_s
        return result


@pytest.fixture(scope="module")
def sandbox() -> Iterator[CountingSandbox]:
    with CountingSandbox(workers=2, preload=[CHILD_FILE]) as box:
        yield box


def burn(seconds: float, indent: str = "") -> str:
    """Code that spends `seconds` of its own CPU, whatever the machine's speed."""
    lines = ["import time", f"_end = time.process_time() + {seconds}", "while time.process_time() < _end:", "    pass"]
    return "".join(f"{indent}{line}\n" for line in lines)


def square_problem(slow: str) -> tuple[AnyProblem, str, str]:
    """A check problem, and a slow and a fast solution of it."""
    problem = CodeProblem(
        task_id="square", entry_point="square", test="def check(candidate):\n    assert candidate(3) == 9\n", reference=""
    )
    return problem, f"def square(x):\n{slow}    return x * x\n", "def square(x):\n    return x * x\n"


def stdin_problem(slow: str) -> tuple[AnyProblem, str, str]:
    cases = [{"input": f"{i}\n", "output": f"{i * i}\n"} for i in range(CASES)]
    problem = StdinProblem(task_id="squares", stdin_cases=cases, reference="")  # type: ignore[arg-type]
    return problem, f"{slow}print(int(input()) ** 2)\n", "print(int(input()) ** 2)\n"


def scored(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch, mode: str, problem: AnyProblem, candidate: str, store: Any = None
) -> tuple[Scored, float]:
    """One item scored with the timing budget `BUDGET_S`, and the sandbox CPU spent on it beyond its verdict run."""
    monkeypatch.setenv("CORRGRPO_CODE_EFFICIENCY_MODE", mode)
    monkeypatch.setenv("CORRGRPO_CODE_TIMING_BUDGET_S", str(BUDGET_S))
    monkeypatch.setenv("CORRGRPO_CODE_WALL_S", "60")  # CPU is what is bounded; a loaded machine must not time out
    config = CodeSettings().scoring_config()
    scorer = CodeScorer(sandbox, store or MemoryStore(), {}, config, workers=2)
    before = sandbox.cpu_s
    try:
        [result] = asyncio.run(scorer.score([CodeItem(problem=problem, completion=f"```python\n{candidate}```")]))
    finally:
        scorer.close()
    assert isinstance(result, Scored) and result.components["correct"] == 1, result
    verdict_s = result.info["t"] if result.info["run"] == "run" else 0.0
    return result, sandbox.cpu_s - before - verdict_s


@pytest.mark.parametrize("make", [square_problem, stdin_problem], ids=["check", "stdin"])
def test_a_slow_correct_program_costs_at_most_the_budget(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """`calibrated`: the candidate is slow (its stdin cases together); no pair of it could pay within the budget."""
    slow = burn(SLOW_S / CASES) if make is stdin_problem else burn(SLOW_S, "    ")
    problem, candidate, reference = make(slow)
    result, timing_s = scored(sandbox, monkeypatch, "calibrated", problem.model_copy(update={"reference": reference}), candidate)
    assert timing_s <= BUDGET_S + SLACK_S, (timing_s, result.info)
    assert result.components["efficiency"] == 0 and result.info["timing_pairs"] < Calibration().min_pairs, result.info
    assert result.info["timing_cpu_s"] == pytest.approx(timing_s, abs=1e-6)


@pytest.mark.parametrize("make", [square_problem, stdin_problem], ids=["check", "stdin"])
def test_a_slow_reference_costs_paper_at_most_the_budget(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """`paper`: t_ref from the reference's runs that fit in the budget (one here), so a fast candidate is still paid;
    a stdin run's last case must find 2 s left (its limit 1 s, its cap 2 s)."""
    slow = burn(SLOW_S / CASES) if make is stdin_problem else burn(SLOW_S, "    ")
    problem, reference, candidate = make(slow)
    result, timing_s = scored(sandbox, monkeypatch, "paper", problem.model_copy(update={"reference": reference}), candidate)
    assert timing_s <= BUDGET_S + SLACK_S, (timing_s, result.info)
    assert result.info["t_ref"] >= SLOW_S * 0.9 and result.components["efficiency"] > 0.5, result.info


def test_a_run_the_budget_cuts_pays_nothing(sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored verdict says the program is fast (another replica, a quieter hour); its first timing run is far
    slower: the budget's limit ends that run, and the item is scored with efficiency 0, not an error."""
    problem, candidate, reference = square_problem(burn(4.0, "    "))
    problem = problem.model_copy(update={"reference": reference})
    store, config = MemoryStore(), CodeSettings().scoring_config()
    prepared = PreparedProblem.of(problem)
    limits = replace(config.limits, wall_s=60.0)  # what `scored` configures
    key = run_key(extract(f"```python\n{candidate}```", prepared.marker).code, prepared.judged_key, limits, sandbox.isolation)
    fast = ExecResult(0, None, b"", b"", b"", False, False, 0.01, 0.01, 0, sandbox.isolation, None)
    stored = dump(HarnessResult("passed", "io", 1, 1, exec=fast, compiled=True))
    asyncio.run(store.set(f"{config.cache_prefix}run:{key}", stored, 60.0))
    result, timing_s = scored(sandbox, monkeypatch, "calibrated", problem, candidate, store)
    assert timing_s <= BUDGET_S + SLACK_S, (timing_s, result.info)
    assert result.info["run"] == "store" and "timing_budget" in result.info, result.info
    assert result.components["efficiency"] == 0 and result.info["timing_cpu_s"] == pytest.approx(timing_s, abs=1e-6)


def test_a_run_starts_only_within_the_budget_and_a_wall_timeout_is_its_own(sandbox: CountingSandbox) -> None:
    """Under 2 s left no run starts; a run that sleeps past its wall limit is returned as it is (the harness calls it
    a timeout), not taken for the budget's cut, and its CPU is charged."""
    spent = TimingBudget(4.0, spent_s=2.5)
    before = sandbox.cpu_s
    with pytest.raises(OverBudget, match="no run fits"):
        BudgetedSandbox(sandbox, spent).run("pass\n", limits=Limits(cpu_s=5))
    assert sandbox.cpu_s == before
    budgeted = BudgetedSandbox(sandbox, TimingBudget(4.0))
    result = budgeted.run("import time\ntime.sleep(30)\n", limits=Limits(cpu_s=5, wall_s=0.5))
    assert result.timed_out and result.cpu_s < 1 and budgeted.budget.spent_s == result.cpu_s


@pytest.mark.parametrize("left_s", [0.0, 1.0, 1.99, 2.0, 2.5, 3.0, 4.7, 9.99, 10.0])
@pytest.mark.parametrize("own_s", [0.5, 1.0, 2.5, 5.0, 6.0])
def test_a_runs_limit_keeps_its_sandbox_cap_within_what_is_left(left_s: float, own_s: float) -> None:
    """The sandbox lets a run spend `max(1, ceil(cpu_s)) + 1` s (its README): that must fit in what is left, and the
    limit is the highest whole-second one that does (or the run's own)."""
    limit = TimingBudget(10.0, spent_s=10.0 - left_s).limit(own_s)
    if left_s < 2:
        assert limit is None
        return
    assert limit is not None and limit <= own_s
    assert max(1, math.ceil(limit)) + 1 <= left_s + 1e-9
    assert limit == own_s or max(1, math.ceil(limit + 1)) + 1 > left_s


def test_pairs_stop_from_the_first_when_no_outcome_could_pay() -> None:
    calibration, budget = Calibration(min_pairs=12, max_pairs=24), TimingBudget(100.0)
    assert PairedTimes([0.5] * 2, [1.0] * 2).efficiency(calibration) == 0  # two pairs have no spread to trust
    assert PairedTimes([0.5] * 3, [1.0] * 3).efficiency(calibration) == pytest.approx(0.5)
    assert PairedTimes([1.0], [0.01]).done(calibration, budget)  # even at 3/4 and 4/3 of its costs: 56 times slower
    assert not PairedTimes([1.0], [0.9]).done(calibration, budget)  # within the costs' spread of a speed-up
    assert PairedTimes([1.0], [0.9]).done(calibration, TimingBudget(4.0, spent_s=1.9))  # no room for three pairs
    assert PairedTimes(verdict_s=2.0).done(calibration, TimingBudget(5.0))  # its verdict run: two pairs fit at most
    assert not PairedTimes(verdict_s=0.5).done(calibration, TimingBudget(5.0))
    parity = PairedTimes([1.0] * 6 + [1.01] * 7, [1.0] * 13)  # never faster; 11 more pairs cannot move the median
    assert not parity.could_pay(calibration, budget) and parity.done(calibration, budget)
    once_faster = PairedTimes([0.5] + [1.0] * 5 + [1.01] * 7, [1.0] * 13)
    assert once_faster.could_pay(calibration, budget)
    assert not PairedTimes([1.0] * 13, [0.99] * 13).could_pay(calibration, budget)
    assert PairedTimes([1.0] * 12, [0.99] * 12).could_pay(calibration, budget)  # 12 more could be the lower half
