"""The sandbox CPU that timing costs for one correct item: every run's `cpu_s` summed, less the item's verdict
run (`timing_cpu_s`), and all of it (`item_cpu_s`: a stdin verdict over many slow cases shows its own bound).

`calibrated`: the candidate is the slow side (its timing pairs are what is bounded); `paper`: the reference is
(its t_ref runs are). The slow side spends SECONDS of CPU per run in a `time.process_time()` loop (over CASES
stdin cases for `stdin`), the other side OTHER_SECONDS (default: nothing), so the figures do not depend on the
machine's speed. The wall limit is raised to 120 s: CPU is what is bounded, and a loaded host must not turn
the item into a timeout.

Run: `.venv/bin/python bench/bench_timing_bound.py MODE KIND SECONDS [CASES [OTHER_SECONDS]]`, MODE `paper` or
`calibrated`, KIND `check` or `stdin`; one JSON line. The README's table (services/code, Efficiency) comes
from it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from corrgrpo_code.harness import CHILD_FILE
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_common import MemoryStore
from corrgrpo_proto.code import AnyProblem, CodeItem, CodeProblem, StdinCase, StdinProblem
from corrgrpo_sandbox import ExecResult, Sandbox

SHOWN = ("stage", "t", "t_ref", "timing_pairs", "t_ratio", "timing_error", "t_ref_error", "timing_budget")


class CountingSandbox(Sandbox):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lock, self.runs, self.cpu_s = threading.Lock(), 0, 0.0

    def run(self, source: str, **kwargs: Any) -> ExecResult:
        result = super().run(source, **kwargs)
        with self.lock:
            self.runs, self.cpu_s = self.runs + 1, self.cpu_s + result.cpu_s
        return result


def burn(seconds: float, indent: str) -> str:
    if not seconds:
        return ""
    lines = [
        "import time",
        f"_end = time.process_time() + {seconds}",
        "while time.process_time() < _end:",
        "    pass",
    ]
    return "".join(f"{indent}{line}\n" for line in lines)


def problem_and_programs(kind: str, slow_s: float, other_s: float, cases: int) -> tuple[AnyProblem, str, str]:
    """The problem (its reference unset), the slow program and the other one."""
    if kind == "check":
        test = "def check(candidate):\n    assert candidate(3) == 9\n"
        problem: AnyProblem = CodeProblem(task_id="square", entry_point="square", test=test, reference="")
        slow, other = (f"def square(x):\n{burn(s, '    ')}    return x * x\n" for s in (slow_s, other_s))
        return problem, slow, other
    stdin = [StdinCase(input=f"{i}\n", output=f"{i * i}\n") for i in range(cases)]
    problem = StdinProblem(task_id="squares", stdin_cases=stdin, reference="")
    slow, other = (f"{burn(s / cases, '')}print(int(input()) ** 2)\n" for s in (slow_s, other_s))
    return problem, slow, other


def main() -> None:
    mode, kind, slow_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    cases = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    other_s = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    problem, slow, other = problem_and_programs(kind, slow_s, other_s, cases)
    candidate, reference = (slow, other) if mode == "calibrated" else (other, slow)
    problem = problem.model_copy(update={"reference": reference})
    settings = CodeSettings(code_efficiency_mode=mode, code_run_ttl_s=0, code_wall_s=120.0, code_workers=2)
    with CountingSandbox(workers=2, preload=[CHILD_FILE]) as sandbox:
        scorer = CodeScorer(sandbox, MemoryStore(), {}, settings)
        [result] = asyncio.run(
            scorer.score([CodeItem(problem=problem, completion=f"```python\n{candidate}```")])
        )
        scorer.close()
    info = getattr(result, "info", {})
    timing_s = sandbox.cpu_s - (info.get("t") or 0.0)
    shown = {
        "mode": mode,
        "kind": kind,
        "slow_s": slow_s,
        "other_s": other_s,
        "cases": cases,
        "runs": sandbox.runs,
    }
    shown["item_cpu_s"] = round(sandbox.cpu_s, 2)  # everything: verdict, reference check, timing
    efficiency = result.components["efficiency"] if hasattr(result, "components") else None
    print(
        json.dumps(
            {
                **shown,
                "timing_cpu_s": round(timing_s, 2),
                "efficiency": efficiency,
                **{k: info.get(k) for k in SHOWN},
            }
        )
    )


if __name__ == "__main__":
    main()
