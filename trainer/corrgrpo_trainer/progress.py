"""What a TRL run shows while it runs: each step's phases (StepPhases), a line per logged step,
`<output_dir>/metrics.jsonl`, a final table."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

# mean |advantage| of the step's rollouts, logged beside TRL's metrics (trl_trainer)
ABS_ADVANTAGE = "advantages/abs_mean"


def metrics_callback(
    path: Path,
    key: str,
    line: Callable[[Any, dict[str, float]], str] | None,
    extra: dict[str, Any] | None = None,
    append: bool = False,
) -> Any:
    """A TrainerCallback that appends every logged step carrying `key` ("reward", "loss") to `path` (emptied
    now unless `append`) as one JSON object (with `extra`) and, given `line`, prints `line(state, logs)`."""
    from transformers import TrainerCallback

    path.parent.mkdir(parents=True, exist_ok=True)
    if not append or not path.is_file():
        path.write_text("")

    class StepLog(TrainerCallback):
        def on_log(
            self, _args: Any, state: Any, _control: Any, logs: dict[str, float] | None = None, **_: Any
        ) -> None:
            if not logs or key not in logs or not state.is_world_process_zero:
                return
            with path.open("a") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs, **(extra or {})}) + "\n")
            if line is not None:
                print(line(state, logs), flush=True)

    return StepLog()


def progress_line(step: int, max_steps: int, logs: dict[str, float], names: Sequence[str]) -> str:
    """One RL step: total reward, each component's mean, the zero-variance group fraction and mean
    |advantage|."""
    parts = "  ".join(f"{name}={logs.get(f'rewards/{name}/mean', math.nan):.3f}" for name in names)
    return (
        f"[train] step {step}/{max_steps}  reward={logs['reward']:.3f}  {parts}  "
        f"zero_std_groups={logs.get('frac_reward_zero_std', math.nan):.2f}  "
        f"|A|={logs.get(ABS_ADVANTAGE, math.nan):.3f}"
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


HEARTBEAT_S = 30.0  # off a terminal (a log file, CI), a long phase still says every 30 s that it is running
# a phase shorter than this and without detail is left out of the step's line (log-probs, no ref model)
SHOWN_S = 0.05


class StepPhases:
    """What the current step is doing and for how long: generating, log-probs, scoring (per service, items/s),
    updating. On a terminal one line is rewritten every second. Elsewhere a line is written every HEARTBEAT_S
    while a phase lasts. Each step ends with a summary line of its phases. Thread-safe: scoring runs on TRL's
    event-loop thread."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        self.step = self.max_steps = 0
        self.run_start = self.step_start = time.monotonic()
        self.current: tuple[str, str, float] | None = None  # phase, detail, start
        self.done: list[tuple[str, str, float]] = []  # phase, detail, seconds
        self.services: dict[str, tuple[int, float]] = {}  # service -> items, seconds (its slowest column)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def start_step(self, step: int, max_steps: int) -> None:
        with self._lock:
            self.step, self.max_steps, self.step_start = step, max_steps, time.monotonic()
            self.current, self.done, self.services = None, [], {}
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="step-phases", daemon=True)
            self._ticker.start()

    def begin(self, phase: str, detail: str = "") -> None:
        """End the current phase (if any) and start `phase`."""
        with self._lock:
            self._finish()
            self.current = (phase, detail, time.monotonic())

    def scored(self, service: str, items: int, seconds: float) -> None:
        """One reward column of `service` returned `items` values after `seconds`."""
        with self._lock:
            self.services[service] = (items, max(seconds, self.services.get(service, (0, 0.0))[1]))

    def end_step(self) -> str:
        """End the step: its summary line, printed (the live line cleared first)."""
        with self._lock:
            self._finish()
            line = self.summary_line()
            self._write(("\r\x1b[K" if self.live else "") + line + "\n")
        return line

    def close(self) -> None:
        self._stop.set()

    def _finish(self) -> None:
        if self.current is not None:
            phase, detail, start = self.current
            if phase == "scoring" and self.services:
                detail = ", ".join(
                    rate(name, items, seconds) for name, (items, seconds) in self.services.items()
                )
            self.done.append((phase, detail, time.monotonic() - start))
            self.current = None

    def summary_line(self) -> str:
        phases = ", ".join(
            f"{phase} {seconds:.1f} s" + (f" ({detail})" if detail else "")
            for phase, detail, seconds in self.done
            if seconds >= SHOWN_S
            or detail  # scoring answered from the store in 0.0 s still names its services
        )
        took = time.monotonic() - self.step_start
        return f"[train] step {self.step}/{self.max_steps} took {took:.1f} s: {phases}"

    def status_line(self) -> str:
        """The running phase with its elapsed time, the step's and the run's."""
        now = time.monotonic()
        if self.current is None:
            doing = "starting"
        else:
            phase, detail, start = self.current
            if phase == "scoring" and self.services:
                detail = "done: " + ", ".join(rate(n, i, s) for n, (i, s) in self.services.items())
            doing = f"{phase}{f' {detail}' if detail else ''} {now - start:.0f} s"
        elapsed = f"step {now - self.step_start:.0f} s, run {clock_time(now - self.run_start)}"
        return f"[train] step {self.step}/{self.max_steps} {doing} ({elapsed})"

    def _tick(self) -> None:
        while not self._stop.wait(1.0 if self.live else HEARTBEAT_S):
            with self._lock:
                if self.step:
                    self._write(f"\r\x1b[K{self.status_line()}" if self.live else self.status_line() + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def rate(service: str, items: int, seconds: float) -> str:
    """`code 8 items in 1.1 s, 7.3/s` (no rate for what took under SHOWN_S: a local function)."""
    return f"{service} {items} items in {seconds:.1f} s" + (
        f", {items / seconds:.1f}/s" if seconds >= SHOWN_S else ""
    )


def clock_time(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"
