"""Code scoring throughput: HumanEval's 164 canonical solutions through `POST /v1/score`, in-process scoring, and
the unsandboxed fork floor (`bench_sandbox.fork_floor`: warm interpreters forking per program, no isolation).

All use the same settings (warm fork pool, `CORRGRPO_CODE_WORKERS` = CPU count, efficiency on) and
concurrency. A warm-up pass measures and caches every reference time first, so the timed pass is what
training sees for a known problem: all seven components, one sandbox execution per item (plus a judge
run for the few problems whose checks are not literal comparisons). Run verdicts are not shared across
batches here (`CORRGRPO_CODE_RUN_TTL_S=0`): each timed batch runs all 164 programs, as the floor does.
The HTTP path and the fork floor run in interleaved rounds, the order alternating, so a shared machine's
load weighs on both alike; the ratio floor time / HTTP time is the one to quote (issue 14: ≥ 0.85). That service
runs the `paper` efficiency mode (the speed targets are for it); a second one, `calibrated`, scores the same batch
once in the first round (each correct program then also runs in timing pairs with its reference: its cost).
Also prints the cost of the scorer's AST similarity per item (reference prepared, candidate parsed already): all 164
canonical solutions against themselves (what the HTTP path computes here: equal structures, no block search),
against another problem's reference, the same again (answered by the reference's memo), and that block search alone:
`matched` (cydifflib, where the pair cannot exceed the budget) and the pure-Python `search` (kept for the others).

Run: `.venv/bin/python bench/bench_code.py` (part of `make bench`; well under two minutes).
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
from bench_sandbox import fork_floor

from corrgrpo_code.config import ScoringConfig
from corrgrpo_code.harness import CHILD_FILE
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.similarity import MATCH_BUDGET, Reference, matched, search, structure
from corrgrpo_common import MemoryStore
from corrgrpo_proto.code import CodeItem, CodeProblem
from corrgrpo_sandbox import Sandbox
from corrgrpo_testing.servers import start_service  # the test helper: starts a service exactly as its container does

WORKERS = os.cpu_count() or 1
ROUNDS = 8
# Every timed pass runs every program, as the fork floor does: the service's verdict cache across batches
# (`CORRGRPO_CODE_RUN_TTL_S`) would answer the repeated batches from the store without running anything.
NO_RUN_CACHE = {"CORRGRPO_CODE_RUN_TTL_S": "0"}
MODE = "CORRGRPO_CODE_EFFICIENCY_MODE"


def in_process(items: list[CodeItem]) -> tuple[float, int]:
    with Sandbox(workers=WORKERS, preload=[CHILD_FILE]) as sandbox:
        scorer = CodeScorer(sandbox, MemoryStore(), {}, ScoringConfig(run_ttl_s=0, efficiency_mode="paper"), WORKERS)
        asyncio.run(scorer.score(items))  # warm-up: reference times
        start = time.perf_counter()
        results = asyncio.run(scorer.score(items))
        seconds = time.perf_counter() - start
        scorer.close()
    return seconds, sum(getattr(r, "components", {}).get("correct", 0) == 1 for r in results)


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
        "in Python (`search`)": per_item(lambda i, r: search(candidates[i], r.tokens or [], r.where, MATCH_BUDGET)),
    }


def floor_program(problem: CodeProblem) -> str:
    return f"{problem.reference}\n{problem.test}\ncheck({problem.entry_point})\n"


def http_vs_floor(items: list[CodeItem], rounds: int = ROUNDS) -> tuple[dict[str, float], int]:
    """Seconds per path (HTTP, fork floor, bare sandboxed pool) summed over interleaved rounds, and of one
    `calibrated` batch; HTTP items correct."""
    body = {"items": [item.model_dump(exclude_none=True) for item in items]}
    programs = [floor_program(item.problem) for item in items if item.problem]
    totals, correct = {"http": 0.0, "floor": 0.0, "pool": 0.0, "calibrated": 0.0}, 0
    env = {"CORRGRPO_CODE_WORKERS": str(WORKERS), "CORRGRPO_LOG_LEVEL": "WARNING", **NO_RUN_CACHE}
    with (
        start_service("code", env={**env, MODE: "paper"}) as service,
        start_service("code", env={**env, MODE: "calibrated"}) as calibrated,
        fork_floor(WORKERS) as floor,
        Sandbox(workers=WORKERS, preload=[CHILD_FILE]) as pool,
        httpx.Client(timeout=600) as client,
    ):
        client.post(f"{service.url}/v1/score", json=body).raise_for_status()  # warm-up: every t_ref measured

        def over_http(url: str = service.url) -> None:
            nonlocal correct
            results = client.post(f"{url}/v1/score", json=body).json()["results"]
            correct = sum((r.get("components") or {}).get("correct") == 1 for r in results)

        def on_the_floor() -> None:
            with ThreadPoolExecutor(WORKERS) as pool:
                failed = [status for status in pool.map(floor, programs) if status != 0]
            assert not failed, f"{len(failed)} canonical solutions failed on the fork floor"

        def in_the_pool() -> None:  # the sandbox alone: what the HTTP path adds on top of it is the service's own cost
            with ThreadPoolExecutor(WORKERS) as threads:
                failed = [r for r in threads.map(pool.run, programs) if r.exit_code != 0]
            why = [(r.exit_code, r.signal, r.timed_out, r.anomaly, r.stderr[-200:]) for r in failed]
            assert not failed, f"{len(failed)} canonical solutions failed in the sandboxed pool: {why}"

        for round_number in range(rounds):
            order = [("http", over_http), ("floor", on_the_floor), ("pool", in_the_pool)]
            if round_number == 0:
                order.append(("calibrated", functools.partial(over_http, calibrated.url)))
            for name, run in order if round_number % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                run()
                totals[name] += time.perf_counter() - start
    return totals, correct


def main() -> None:
    problems = list(humaneval_problems())
    items = [CodeItem(problem=p, completion=f"```python\n{p.reference}\n```") for p in problems]
    similarity = similarity_ms(problems)
    started = os.getloadavg()
    local_s, local_ok = in_process(items)
    totals, http_ok = http_vs_floor(items)
    http_s, floor_s, pool_s, calibrated_s = totals["http"], totals["floor"], totals["pool"], totals["calibrated"]
    n, runs = len(items), len(items) * ROUNDS
    loads = " -> ".join(" ".join(f"{value:.2f}" for value in load) for load in (started, os.getloadavg()))
    print(f"HumanEval canonical solutions, {n} items, {WORKERS} sandbox workers, load average {loads}\n")
    print("| path | seconds | solutions/s | correct |")
    print("|---|---|---|---|")
    print(f"| in-process `CodeScorer.score` (one pass) | {local_s:.2f} | {n / local_s:.0f} | {local_ok}/{n} |")
    print(f"| HTTP `POST /v1/score`, `paper` ({ROUNDS} batches) | {http_s:.2f} | {runs / http_s:.0f} | {http_ok}/{n} |")
    print(f"| fork floor, no sandbox ({ROUNDS} rounds, interleaved) | {floor_s:.2f} | {runs / floor_s:.0f} | {n}/{n} |")
    print(
        f"| bare sandboxed pool, program + check ({ROUNDS} rounds, interleaved) | {pool_s:.2f} | {runs / pool_s:.0f} | {n}/{n} |"
    )
    print(f"| HTTP `POST /v1/score`, `calibrated` (1 batch, round 1) | {calibrated_s:.2f} | {n / calibrated_s:.1f} | - |")
    print(f"\nHTTP / in-process throughput ratio: {local_s * ROUNDS / http_s:.2f}")
    print(f"efficiency `calibrated` / `paper` throughput over HTTP: {http_s / ROUNDS / calibrated_s:.3f}")
    print(f"HTTP path / unsandboxed fork floor (throughput, same run): {floor_s / http_s:.2f}")
    print(f"bare sandboxed pool / fork floor: {floor_s / pool_s:.2f}; HTTP path / bare pool: {pool_s / http_s:.2f}")
    print("ast_similarity, ms per item: " + ", ".join(f"{name} {ms:.3f}" for name, ms in similarity.items()))


if __name__ == "__main__":
    main()
