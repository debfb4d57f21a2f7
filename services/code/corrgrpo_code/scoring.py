"""Pure scoring of code items: extraction, tests in the sandbox, the seven components, shared t_ref.

`CodeScorer.score(items)` is the kit's scorer: one `Scored | ItemError` per item, in order. Sandbox
executions (blocking) run in a thread pool of `workers` threads, so at most that many run at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from corrgrpo_proto import ItemError
from corrgrpo_proto.code import CodeItem, CodeProblem
from corrgrpo_sandbox import Limits, Sandbox
from corrgrpo_sandbox.harness import HarnessResult, IOTest, run_assert, run_io
from corrgrpo_service import Scored, Store, StoreUnavailable

from .extract import FENCE_LANGUAGES, ExtractMode, extract_code, format_score
from .problems import problem_hash
from .similarity import ast_similarity
from .split import split_check

log = logging.getLogger("corrgrpo.code")
LOCK_TTL_S = 120.0  # a replica that died while measuring frees the lock after this
WAIT_POLL_S = 0.05
HARNESS_LIMITS = Limits(output_bytes=1 << 20)  # the channel carries every test's output


class SandboxAnomaly(RuntimeError):
    """The sandbox reported the execution untrustworthy twice in a row."""


@dataclass(frozen=True)
class ScoringConfig:
    limits: Limits = HARNESS_LIMITS
    extract: ExtractMode = "last"
    languages: tuple[str, ...] = FENCE_LANGUAGES
    cache_prefix: str = "corrgrpo:code:"
    reference_runs: int = 4
    efficiency_cap: float = 2.0
    efficiency: bool = True  # False: never measure t_ref; the component is 0
    max_code_chars: int = 100_000  # longer code is not parsed or run: parsing alone grows to seconds


@dataclass(frozen=True)
class PreparedProblem:
    problem: CodeProblem
    key: str
    io_tests: list[IOTest] | None  # None: assert mode

    @classmethod
    def of(cls, problem: CodeProblem) -> PreparedProblem:
        return cls(problem, problem_hash(problem), split_check(problem.test))


def run_tests(sandbox: Sandbox, prepared: PreparedProblem, solution: str, limits: Limits) -> HarnessResult:
    """The harness run for `solution`, retried once on a sandbox anomaly; never returns an anomaly."""
    problem = prepared.problem
    for _ in range(2):
        if prepared.io_tests is not None:
            result = run_io(sandbox, problem.prompt, solution, problem.entry_point, prepared.io_tests, limits)
        else:
            result = run_assert(sandbox, problem.prompt, solution, problem.entry_point, problem.test, limits)
        if result.stage != "anomaly":
            return result
        log.warning("sandbox anomaly, retrying once", extra={"task_id": problem.task_id, "anomaly": result.error})
    raise SandboxAnomaly(str(result.error))


def components(fmt: float, similarity: float, result: HarnessResult, efficiency: float) -> dict[str, float]:
    """The dependency chain: syntax → compile → runtime → correct; efficiency only when correct."""
    syntax = result.stage != "syntax"
    compiled = syntax and result.stage != "toplevel"
    runtime = compiled and result.stage in ("assertion", "passed")
    correct = result.stage == "passed"
    return {
        "format": fmt,
        "syntax": float(syntax),
        "compile": float(compiled),
        "runtime": float(runtime),
        "correct": float(correct),
        "ast_similarity": similarity,
        "efficiency": efficiency if correct else 0.0,
    }


class CodeScorer:
    def __init__(
        self, sandbox: Sandbox, store: Store, problems: dict[str, CodeProblem], config: ScoringConfig, workers: int
    ) -> None:
        self.sandbox, self.store, self.problems, self.config = sandbox, store, problems, config
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="code-sandbox")
        self._prepared: dict[str, PreparedProblem] = {}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def score(self, items: Sequence[CodeItem]) -> list[Scored | ItemError]:
        return list(await asyncio.gather(*(self.score_one(item) for item in items)))

    def prepare(self, problem: CodeProblem) -> PreparedProblem:
        key = problem_hash(problem)
        prepared = self._prepared.get(key)
        if prepared is None:
            if len(self._prepared) > 10_000:  # inline problems could grow it without bound
                self._prepared.clear()
            prepared = self._prepared[key] = PreparedProblem.of(problem)
        return prepared

    async def score_one(self, item: CodeItem) -> Scored | ItemError:
        problem = item.problem or self.problems.get(item.task_id or "")
        if problem is None:
            return ItemError(code="unknown_task", message=f"no loaded problem has task_id {item.task_id!r}")
        try:
            return await self._score(problem, item.completion)
        except SandboxAnomaly as error:
            return ItemError(code="sandbox_anomaly", message=f"execution untrustworthy twice: {error}")
        except Exception as error:  # one item's failure never fails the batch
            log.exception("scoring failed", extra={"task_id": problem.task_id})
            return ItemError(code="internal", message=f"{type(error).__name__}: {error}")

    def _execute(self, problem: CodeProblem, code: str | None) -> tuple[PreparedProblem, HarnessResult, float]:
        """The blocking part (splitting a big LeetCode check, the run, AST similarity), kept off the event loop."""
        prepared = self.prepare(problem)
        result = run_tests(self.sandbox, prepared, code or "", self.config.limits)
        return prepared, result, ast_similarity(code, problem.reference) if code is not None else 0.0

    async def _score(self, problem: CodeProblem, completion: str) -> Scored:
        config = self.config
        code = extract_code(completion, config.extract, config.languages)
        if code is not None and len(code) > config.max_code_chars:
            error = f"code of {len(code)} characters is over the limit of {config.max_code_chars}; not run"
            zeros = dict.fromkeys(("syntax", "compile", "runtime", "correct", "ast_similarity", "efficiency"), 0.0)
            return Scored({"format": format_score(completion, config.languages), **zeros}, {"stage": "too_long", "error": error})
        loop = asyncio.get_running_loop()
        prepared, result, similarity = await loop.run_in_executor(self.pool, self._execute, problem, code)
        info: dict[str, Any] = {
            "stage": result.stage,
            "error": result.error,
            "tests_passed": result.passed,
            "tests_total": result.total,
            "mode": result.mode,
            "isolation": result.exec.isolation if result.exec else self.sandbox.isolation,
            "t": result.exec.cpu_s if result.exec else None,
            "t_wall": result.exec.wall_s if result.exec else None,
        }
        efficiency = 0.0
        if config.efficiency and result.ok and result.exec is not None:
            reference = await self.reference_time(prepared)
            info.update({"t_ref": reference["t_ref"], "t_ref_source": reference["source"], "t_ref_error": reference.get("error")})
            if reference["t_ref"] is not None:
                efficiency = min(reference["t_ref"] / max(result.exec.cpu_s, 1e-6), config.efficiency_cap)
        return Scored(components(format_score(completion, config.languages), similarity, result, efficiency), info)

    def measure_reference(self, prepared: PreparedProblem) -> dict[str, Any]:
        """Mean child CPU time of `reference_runs` runs of the reference through the same harness."""
        times = []
        for _ in range(self.config.reference_runs):
            result = run_tests(self.sandbox, prepared, prepared.problem.reference, self.config.limits)
            if not result.ok or result.exec is None:
                return {"t_ref": None, "error": f"reference fails its tests: {result.stage}: {result.error}"}
            times.append(result.exec.cpu_s)
        return {"t_ref": sum(times) / len(times), "runs": times}

    async def reference_time(self, prepared: PreparedProblem) -> dict[str, Any]:
        """t_ref from the store, else measured once (the store's `add` is the lock between replicas)."""
        key = f"{self.config.cache_prefix}tref:{prepared.key}"
        loop = asyncio.get_running_loop()
        try:
            deadline = loop.time() + LOCK_TTL_S
            while loop.time() < deadline:
                if (cached := await self.store.get(key)) is not None:
                    return {**json.loads(cached), "source": "cache"}
                if await self.store.add(f"{key}:lock", b"1", LOCK_TTL_S):
                    try:
                        measured = await loop.run_in_executor(self.pool, self.measure_reference, prepared)
                        await self.store.set(key, json.dumps(measured).encode())
                    finally:
                        await self.store.delete(f"{key}:lock")
                    return {**measured, "source": "measured"}
                await asyncio.sleep(WAIT_POLL_S)  # another item or replica is measuring it
        except StoreUnavailable as error:
            log.warning("reference-time cache unavailable; measuring without it", extra={"error": str(error)})
        measured = await loop.run_in_executor(self.pool, self.measure_reference, prepared)
        return {**measured, "source": "measured_uncached"}
