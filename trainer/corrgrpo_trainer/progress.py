"""What a TRL run shows while it runs: a line per logged step, `<output_dir>/metrics.jsonl`, a final table."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def metrics_callback(
    path: Path, key: str, line: Callable[[Any, dict[str, float]], str] | None, extra: dict[str, Any] | None = None
) -> Any:
    """A TrainerCallback that appends every logged step carrying `key` ("reward", "loss") to `path` (emptied now)
    as one JSON object (with `extra`) and, given `line`, prints `line(state, logs)`."""
    from transformers import TrainerCallback

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")

    class StepLog(TrainerCallback):
        def on_log(self, _args: Any, state: Any, _control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if not logs or key not in logs or not state.is_world_process_zero:
                return
            with path.open("a") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs, **(extra or {})}) + "\n")
            if line is not None:
                print(line(state, logs), flush=True)

    return StepLog()


def progress_line(step: int, max_steps: int, logs: dict[str, float], names: Sequence[str]) -> str:
    """One RL step: total reward, each component's mean, the zero-variance group fraction and mean |advantage|."""
    from .trl_trainer import ABS_ADVANTAGE

    parts = "  ".join(f"{name}={logs.get(f'rewards/{name}/mean', math.nan):.3f}" for name in names)
    return (
        f"[train] step {step}/{max_steps}  reward={logs['reward']:.3f}  {parts}  "
        f"zero_std_groups={logs.get('frac_reward_zero_std', math.nan):.2f}  |A|={logs.get(ABS_ADVANTAGE, math.nan):.3f}"
    )


def component_table(log_history: list[dict[str, Any]], names: Sequence[str]) -> str:
    """Steps × components of TRL's `rewards/<name>/mean`, plus the total reward."""
    header = ["step", *names, "reward"]
    lines = ["  ".join(f"{h:>12s}" for h in header)]
    for entry in log_history:
        if "reward" not in entry:
            continue
        values = [entry.get(f"rewards/{n}/mean", math.nan) for n in names] + [entry["reward"]]
        lines.append(f"{entry.get('step', 0):>12d}  " + "  ".join(f"{v:12.4f}" for v in values))
    return "\n".join(lines)
