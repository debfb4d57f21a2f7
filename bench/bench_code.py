"""Code scoring throughput: HumanEval's 164 canonical solutions through `POST /v1/score` vs in-process scoring.

Both sides use the same settings (warm fork pool, `CORRGRPO_CODE_WORKERS` = CPU count, efficiency on).
A warm-up pass measures and caches every reference time first, so the timed pass is what training
sees for a known problem: one sandbox execution per item. Also prints the cost of `ast_similarity`
per item (all 164 canonical solutions against themselves).

Run: `.venv/bin/python bench/bench_code.py` (part of `make bench`; well under two minutes).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import httpx

from corrgrpo_code.problems import humaneval_problems
from corrgrpo_code.scoring import CodeScorer, ScoringConfig
from corrgrpo_code.similarity import ast_similarity
from corrgrpo_proto.code import CodeItem
from corrgrpo_sandbox import Sandbox
from corrgrpo_service import MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from servers import start_service  # the test helper: starts a service exactly as its container does

WORKERS = os.cpu_count() or 1


def in_process(items: list[CodeItem]) -> tuple[float, int]:
    with Sandbox(workers=WORKERS) as sandbox:
        scorer = CodeScorer(sandbox, MemoryStore(), {}, ScoringConfig(), WORKERS)
        asyncio.run(scorer.score(items))  # warm-up: reference times
        start = time.perf_counter()
        results = asyncio.run(scorer.score(items))
        seconds = time.perf_counter() - start
        scorer.close()
    return seconds, sum(getattr(r, "components", {}).get("correct", 0) == 1 for r in results)


def over_http(items: list[CodeItem]) -> tuple[float, int]:
    body = {"items": [item.model_dump(exclude_none=True) for item in items]}
    with start_service("code", env={"CORRGRPO_CODE_WORKERS": str(WORKERS), "CORRGRPO_LOG_LEVEL": "WARNING"}) as service:
        httpx.post(f"{service.url}/v1/score", json=body, timeout=300).raise_for_status()  # warm-up
        start = time.perf_counter()
        results = httpx.post(f"{service.url}/v1/score", json=body, timeout=300).json()["results"]
        seconds = time.perf_counter() - start
    return seconds, sum((r.get("components") or {}).get("correct") == 1 for r in results)


def main() -> None:
    problems = list(humaneval_problems())
    items = [CodeItem(problem=p, completion=f"```python\n{p.reference}\n```") for p in problems]
    start = time.perf_counter()
    for p in problems:
        ast_similarity(p.reference, p.reference)
    similarity_ms = (time.perf_counter() - start) * 1e3 / len(problems)
    local_s, local_ok = in_process(items)
    http_s, http_ok = over_http(items)
    n = len(items)
    print(f"HumanEval canonical solutions, {n} items, {WORKERS} sandbox workers, load average {os.getloadavg()[0]:.1f}\n")
    print("| path | seconds | solutions/s | correct |")
    print("|---|---|---|---|")
    print(f"| in-process `CodeScorer.score` | {local_s:.2f} | {n / local_s:.0f} | {local_ok}/{n} |")
    print(f"| HTTP `POST /v1/score` (one batch) | {http_s:.2f} | {n / http_s:.0f} | {http_ok}/{n} |")
    print(f"\nHTTP / in-process throughput ratio: {local_s / http_s:.2f}")
    print(f"ast_similarity: {similarity_ms:.2f} ms per item")


if __name__ == "__main__":
    main()
