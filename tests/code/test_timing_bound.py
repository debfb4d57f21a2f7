"""Timing has a hard bound: the sandbox CPU that timing spends on one correct program (`calibrated`: its
pairs, both sides, every stdin case; `paper`: its problem's t_ref runs) is at most
`CORRGRPO_CODE_TIMING_BUDGET_S`, whatever the program costs, and a run the budget cuts pays efficiency 0,
never an item error. So has a stdin verdict, all its cases together (`CORRGRPO_CODE_VERDICT_BUDGET_S`): a
program it cuts is a `timeout`, whatever the cases.

The CPU is counted here, from every sandbox run's `cpu_s`, not taken from the service's own account."""

from __future__ import annotations

import asyncio
import collections
import math
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from corrgrpo_code.budget import BudgetedSandbox, OverBudget, TimingBudget
from corrgrpo_code.cache import store_key
from corrgrpo_code.efficiency import Calibration, PairedTimes
from corrgrpo_code.extract import extract
from corrgrpo_code.harness import CHILD_FILE, HarnessResult, main_program
from corrgrpo_code.problem_tests import ProblemTests
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_code.stdio import CaseRuns, run_stdin
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_proto import ItemError
from corrgrpo_proto.code import AnyProblem, CodeItem, CodeProblem, StdinCase, StdinProblem
from corrgrpo_sandbox import ExecResult, Limits, Sandbox

BUDGET_S = 4.0
SLOW_S = 1.5  # a slow side's CPU per run: three pairs of it, or four reference runs, are over the budget
CASES = 12
MANY_CASES = 40  # of 0.3 s each: far from a case's limit (6 s of CPU, 13 s of wall) on a loaded host
SLACK_S = 0.05  # the kernel's CPU accounting ticks


class CountingSandbox(Sandbox):
    """The real sandbox, which adds up the CPU of every run it makes, and of those of each program."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lock, self.cpu_s, self.by_source = threading.Lock(), 0.0, collections.Counter[str]()

    def run(self, source: str, **kwargs: Any) -> ExecResult:
        result = super().run(source, **kwargs)
        with self.lock:
            self.cpu_s += result.cpu_s
            self.by_source[source] += result.cpu_s
        return result


@pytest.fixture(scope="module")
def sandbox() -> Iterator[CountingSandbox]:
    with CountingSandbox(workers=2, preload=[CHILD_FILE]) as box:
        yield box


def burn(seconds: float, indent: str = "") -> str:
    """Code that spends `seconds` of its own CPU, whatever the machine's speed."""
    lines = [
        "import time",
        f"_end = time.process_time() + {seconds}",
        "while time.process_time() < _end:",
        "    pass",
    ]
    return "".join(f"{indent}{line}\n" for line in lines)


def square_problem(slow: str) -> tuple[AnyProblem, str, str]:
    """A check problem, and a slow and a fast solution of it."""
    problem = CodeProblem(
        task_id="square",
        entry_point="square",
        test="def check(candidate):\n    assert candidate(3) == 9\n",
        reference="",
    )
    return problem, f"def square(x):\n{slow}    return x * x\n", "def square(x):\n    return x * x\n"


def stdin_problem(slow: str, count: int = CASES) -> tuple[AnyProblem, str, str]:
    cases = [{"input": f"{i}\n", "output": f"{i * i}\n"} for i in range(count)]
    problem = StdinProblem(task_id="squares", stdin_cases=cases, reference="")  # type: ignore[arg-type]
    return problem, f"{slow}print(int(input()) ** 2)\n", "print(int(input()) ** 2)\n"


def score_one(
    sandbox: CountingSandbox,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    problem: AnyProblem,
    candidate: str,
    store: Any = None,
) -> Scored | ItemError:
    """One item scored with the timing budget `BUDGET_S` (and the verdict budget `BUDGET_S`)."""
    monkeypatch.setenv("CORRGRPO_CODE_EFFICIENCY_MODE", mode)
    monkeypatch.setenv("CORRGRPO_CODE_TIMING_BUDGET_S", str(BUDGET_S))
    monkeypatch.setenv("CORRGRPO_CODE_VERDICT_BUDGET_S", str(BUDGET_S))
    # CPU is what is bounded; a loaded machine must not time out
    monkeypatch.setenv("CORRGRPO_CODE_WALL_S", "60")
    scorer = CodeScorer(sandbox, store or MemoryStore(), {}, CodeSettings(code_workers=2))
    try:
        [result] = asyncio.run(
            scorer.score([CodeItem(problem=problem, completion=f"```python\n{candidate}```")])
        )
    finally:
        scorer.close()
    return result


def scored(sandbox: CountingSandbox, *args: Any) -> tuple[Scored, float]:
    """`score_one(sandbox, *args)`, a correct item, and the sandbox CPU spent on it beyond its verdict run."""
    before = sandbox.cpu_s
    result = score_one(sandbox, *args)
    assert isinstance(result, Scored) and result.components["correct"] == 1, result
    verdict_s = result.info["t"] if result.info["run"] == "run" else 0.0
    return result, sandbox.cpu_s - before - verdict_s


@pytest.mark.parametrize("make", [square_problem, stdin_problem], ids=["check", "stdin"])
def test_a_slow_correct_program_costs_at_most_the_budget(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """`calibrated`: the candidate is slow (its stdin cases together); no pair of it could pay within the
    budget."""
    slow = burn(SLOW_S / CASES) if make is stdin_problem else burn(SLOW_S, "    ")
    problem, candidate, reference = make(slow)
    result, timing_s = scored(
        sandbox, monkeypatch, "calibrated", problem.model_copy(update={"reference": reference}), candidate
    )
    assert timing_s <= BUDGET_S + SLACK_S, (timing_s, result.info)
    assert (
        result.components["efficiency"] == 0
        and result.info["timing_pairs"] < CodeSettings().code_timing_min_pairs
    ), result.info
    assert result.info["timing_cpu_s"] == pytest.approx(timing_s, abs=1e-6)


@pytest.mark.parametrize("make", [square_problem, stdin_problem], ids=["check", "stdin"])
def test_a_slow_reference_costs_paper_at_most_the_budget(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    """`paper`: t_ref from the reference's runs that fit in the budget (one here), so a fast candidate is
    still paid; a stdin run's last case must find 2 s left (its limit 1 s, its cap 2 s)."""
    slow = burn(SLOW_S / CASES) if make is stdin_problem else burn(SLOW_S, "    ")
    problem, reference, candidate = make(slow)
    result, timing_s = scored(
        sandbox, monkeypatch, "paper", problem.model_copy(update={"reference": reference}), candidate
    )
    assert timing_s <= BUDGET_S + SLACK_S, (timing_s, result.info)
    assert result.info["t_ref"] >= SLOW_S * 0.9 and result.components["efficiency"] > 0.5, result.info


def test_a_run_the_budget_cuts_pays_nothing(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored verdict says the program is fast (another replica, a quieter hour); its first timing run is
    far slower: the budget's limit ends that run, and the item is scored with efficiency 0, not an error."""
    problem, candidate, reference = square_problem(burn(4.0, "    "))
    problem = problem.model_copy(update={"reference": reference})
    store, settings = MemoryStore(), CodeSettings()
    prepared = ProblemTests.of(problem)
    limits = replace(settings.limits(), wall_s=60.0)  # what `scored` configures
    key = store_key(
        extract(f"```python\n{candidate}```", prepared.marker).code,
        prepared.judged_key,
        limits,
        sandbox.isolation,
    )
    fast = ExecResult(0, None, b"", b"", b"", False, False, 0.01, 0.01, 0, sandbox.isolation, None)
    stored = HarnessResult("passed", "io", 1, 1, exec=fast, compiled=True).dump()
    asyncio.run(store.set(f"{settings.code_cache_prefix}run:{key}", stored, 60.0))
    result, timing_s = scored(sandbox, monkeypatch, "calibrated", problem, candidate, store)
    assert timing_s <= BUDGET_S + SLACK_S, (timing_s, result.info)
    assert result.info["run"] == "store" and "timing_budget" in result.info, result.info
    assert result.components["efficiency"] == 0 and result.info["timing_cpu_s"] == pytest.approx(
        timing_s, abs=1e-6
    )


def test_a_run_starts_only_within_the_budget_and_a_wall_timeout_is_its_own(sandbox: CountingSandbox) -> None:
    """Under 2 s left no run starts; a run that sleeps past its wall limit is returned as it is (the harness
    calls it a timeout), not taken for the budget's cut, and its CPU is charged."""
    spent = TimingBudget(4.0, spent_s=2.5)
    before = sandbox.cpu_s
    with pytest.raises(OverBudget, match="no run fits"):
        BudgetedSandbox(sandbox, spent).run("pass\n", limits=Limits(cpu_s=5))
    assert sandbox.cpu_s == before
    budgeted = BudgetedSandbox(sandbox, TimingBudget(4.0))
    result = budgeted.run("import time\ntime.sleep(30)\n", limits=Limits(cpu_s=5, wall_s=0.5))
    assert result.timed_out and result.cpu_s < 1 and budgeted.budget.spent_s == result.cpu_s


def scored_with_spend(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch, problem: AnyProblem, candidate: str
) -> tuple[Scored | ItemError, float, float]:
    """`score_one` in `calibrated`, and the CPU spent by the candidate's runs and by the reference's."""
    prepared = ProblemTests.of(problem)
    candidate_source = main_program(extract(f"```python\n{candidate}```", prepared.marker).code)
    before = collections.Counter(sandbox.by_source)
    result = score_one(sandbox, monkeypatch, "calibrated", problem, candidate)
    after = collections.Counter(sandbox.by_source)
    after.subtract(before)
    return result, after[candidate_source], after[main_program(prepared.reference.code)]


def test_a_slow_correct_stdin_program_over_many_cases_costs_its_verdict_at_most_the_budget(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of its cases well within the case limit, together three times the verdict budget (on the
    cases' pool): the budget ends the verdict, a `timeout` (compile 1, runtime 0); the reference passes."""
    problem, candidate, reference = stdin_problem(burn(3 * BUDGET_S / MANY_CASES), MANY_CASES)
    problem = problem.model_copy(update={"reference": reference})
    result, candidate_s, reference_s = scored_with_spend(sandbox, monkeypatch, problem, candidate)
    assert isinstance(result, Scored) and result.info["stage"] == "timeout", result
    assert "verdict budget" in result.info["error"] and result.info["tests_passed"] < MANY_CASES, result.info
    components = result.components
    assert (components["compile"], components["runtime"], components["correct"]) == (1, 0, 0)
    assert 0 < candidate_s <= BUDGET_S + SLACK_S, (candidate_s, result.info)
    assert reference_s > 0  # checked once, passing: the cut is the candidate's


def test_a_problem_whose_reference_the_verdict_budget_cuts_is_invalid(
    sandbox: CountingSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its reference as slow as the candidate: no program as fast as the reference could pass, so the cut
    is `invalid_problem` naming the setting, each side's verdict within the budget."""
    problem, candidate, _ = stdin_problem(burn(3 * BUDGET_S / MANY_CASES), MANY_CASES)
    slow_reference = candidate.replace("** 2", "* int(1) ** 2")  # as slow, another program
    problem = problem.model_copy(update={"reference": slow_reference})
    result, candidate_s, reference_s = scored_with_spend(sandbox, monkeypatch, problem, candidate)
    assert isinstance(result, ItemError) and result.code == "invalid_problem", result
    assert "CORRGRPO_CODE_VERDICT_BUDGET_S" in result.message
    assert 0 < candidate_s <= BUDGET_S + SLACK_S, candidate_s
    assert 0 < reference_s <= BUDGET_S + SLACK_S, reference_s


def test_runs_on_threads_reserve_their_caps_and_wait_for_what_the_others_leave() -> None:
    """A second run whose limit does not fit beside the first's cap waits for it, then gets its own limit."""
    budget = TimingBudget(10.0, name="verdict")
    assert budget.reserve(5.0) == 5.0 and budget.left_s == 4.0  # its cap: 6 s
    second: list[float | None] = []
    waiter = threading.Thread(target=lambda: second.append(budget.reserve(5.0)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not second
    budget.release(5.0, spent_s=1.0)
    waiter.join(5.0)
    assert second == [5.0] and budget.spent_s == 1.0 and budget.left_s == 3.0
    budget.release(5.0, spent_s=8.5)
    assert budget.reserve(5.0) is None  # nothing in flight, under 2 s left: no run fits


@pytest.mark.parametrize("left_s", [0.0, 1.0, 1.99, 2.0, 2.5, 3.0, 4.7, 9.99, 10.0])
@pytest.mark.parametrize("own_s", [0.5, 1.0, 2.5, 5.0, 6.0])
def test_a_runs_limit_keeps_its_sandbox_cap_within_what_is_left(left_s: float, own_s: float) -> None:
    """The sandbox lets a run spend `max(1, ceil(cpu_s)) + 1` s (its README): that must fit in what is left,
    and the limit is the highest whole-second one that does (or the run's own)."""
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
    # even at 3/4 and 4/3 of its costs: 56 times slower
    assert PairedTimes([1.0], [0.01]).done(calibration, budget)
    assert not PairedTimes([1.0], [0.9]).done(calibration, budget)  # within the costs' spread of a speed-up
    # no room for three pairs
    assert PairedTimes([1.0], [0.9]).done(calibration, TimingBudget(4.0, spent_s=1.9))
    # its verdict run: two pairs fit at most
    assert PairedTimes(verdict_s=2.0).done(calibration, TimingBudget(5.0))
    assert not PairedTimes(verdict_s=0.5).done(calibration, TimingBudget(5.0))
    # never faster; 11 more pairs cannot move the median
    parity = PairedTimes([1.0] * 6 + [1.01] * 7, [1.0] * 13)
    assert not parity.could_pay(calibration, budget) and parity.done(calibration, budget)
    once_faster = PairedTimes([0.5] + [1.0] * 5 + [1.01] * 7, [1.0] * 13)
    assert once_faster.could_pay(calibration, budget)
    assert not PairedTimes([1.0] * 13, [0.99] * 13).could_pay(calibration, budget)
    # 12 more could be the lower half
    assert PairedTimes([1.0] * 12, [0.99] * 12).could_pay(calibration, budget)


def test_a_verdict_says_whether_its_budget_cut_it(sandbox: CountingSandbox) -> None:
    """`budget_cut` is the budget's cut alone: not a case over its own limit, nor text a candidate writes."""
    cases, limits = [StdinCase(input="", output="")] * 3, Limits(output_bytes=1 << 20)
    budgeted = run_stdin(sandbox, burn(1.5), cases, limits, case_s=6, runs=CaseRuns(budget_s=2.0))
    assert budgeted.stage == "timeout" and budgeted.budget_cut, budgeted
    over_case = run_stdin(sandbox, burn(1.5), cases[:1], limits, case_s=1)
    assert over_case.stage == "timeout" and not over_case.budget_cut, over_case
    said = 'import sys\nprint("the verdict budget\'s 2 CPU-s", file=sys.stderr)\nsys.exit(1)\n'
    written = run_stdin(sandbox, said, cases[:1], limits, case_s=1)
    assert written.stage == "test_error" and not written.budget_cut, written
