"""What scoring is configured by (`settings.py` builds it from the environment)."""

from __future__ import annotations

from dataclasses import dataclass, field

from corrgrpo_sandbox import Limits

from .efficiency import Calibration, EfficiencyMode

HARNESS_LIMITS = Limits(output_bytes=1 << 20)  # the channel carries every test's output
CASE_S = 6.0  # CPU seconds per stdin case (LiveCodeBench's 6 s), and the most a problem's own limit may ask


@dataclass(frozen=True)
class ScoringConfig:
    limits: Limits = HARNESS_LIMITS
    cache_prefix: str = "corrgrpo:code:"
    reference_runs: int = 4
    reference_attempts: int = 3  # a failed or noisy measurement is retried (neighbours may have starved it)
    reference_ttl_s: float = 7 * 24 * 3600.0  # every t_ref key expires
    reference_failure_ttl_s: float = 30.0  # a failed measurement is shared briefly, never kept as final
    efficiency: bool = True  # False: never measure t_ref; the component is 0
    efficiency_mode: EfficiencyMode = "calibrated"  # `efficiency.py`: paired runs, or the authors' single run (`paper`)
    calibration: Calibration = field(default_factory=Calibration)
    # CPU seconds of one program's calibrated pairs, or of one problem's t_ref runs (`timing_budget.py`)
    timing_budget_s: float = 10.0
    # CPU seconds of one stdin verdict, all its cases (`stdio.py`): LeetCodeDataset v0.3.1's dearest passing
    # reference needs 4.6 s for all of its tests, a stdin case 1.4 ms more
    verdict_budget_s: float = 60.0
    max_code_chars: int = 100_000  # longer code is not parsed or run: parsing alone grows to seconds
    case_s: float = CASE_S
    run_ttl_s: float = 3600.0  # a run's verdict is shared through the store this long (`runs`); 0: within a batch only
