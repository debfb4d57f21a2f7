"""Settings of the code service (`CORRGRPO_CODE_*`, on top of the kit's `CORRGRPO_*`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from corrgrpo_sandbox import Limits
from corrgrpo_service import ServiceSettings

from .extract import ExtractMode


class CodeSettings(ServiceSettings):
    code_datasets: str = Field("humaneval", description="Problems loaded at start-up: humaneval, leetcode:<path or hub id>, ...")
    code_extract: ExtractMode = Field("last", description="Which fenced python block is the code: last, first, only")
    code_fence_languages: str = Field("python,py,python3", description="Fence tags that mark a Python block")
    code_sandbox_mode: Literal["pool", "fresh"] = Field("pool", description="Warm fork pool or one interpreter per run")
    code_allow_fallback: bool = Field(True, description="Run without bwrap (rlimits + process group only) when it is missing")
    code_cpu_s: float = Field(5.0, description="CPU seconds per execution (program + all tests)")
    code_wall_s: float = Field(10.0, description="Wall-clock seconds per execution")
    code_memory_mb: int = Field(1024, description="Address-space limit per execution")
    code_cache_prefix: str = Field("corrgrpo:code:", description="Store key prefix of the reference-time cache")
    code_reference_runs: int = Field(4, ge=1, description="Runs of the reference averaged into t_ref")
    code_efficiency: bool = Field(True, description="Measure efficiency (false: t_ref is never measured; the component is 0)")
    code_max_chars: int = Field(100_000, gt=0, description="Extracted code longer than this scores 0 (stage too_long), unrun")
    code_efficiency_cap: float = Field(2.0, gt=0, description="efficiency = min(t_ref / t, cap)")

    def limits(self) -> Limits:
        return Limits(
            cpu_s=self.code_cpu_s, wall_s=self.code_wall_s, memory_mb=self.code_memory_mb, output_bytes=1 << 20
        )  # the channel carries every output

    def languages(self) -> tuple[str, ...]:
        return tuple(part.strip().lower() for part in self.code_fence_languages.split(",") if part.strip())
