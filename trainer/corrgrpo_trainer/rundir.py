"""A run directory: what a training run leaves behind to be looked at later, written and read back here.

    config.resolved.yaml   the config as checked (pipeline.py) metrics.jsonl          one line per logged
    step: TRL's metrics and the estimator's diagnostics (progress.py) run.json               the reward
    columns, their weights, the estimator and the group size rollouts.jsonl         one line per rollout:
    step, group, prompt id, completion, each component (null: missing),
                           the weighted total, the advantage trained on, each service's `info.stage`
    prompts.jsonl          one line per distinct prompt: its id, the prompt and the row's other columns (the
    item
                           fields `rescore` sends again)

Only the main process writes. Nothing here imports torch: `report` and `rescore` read runs without it. A run
never overwrites another: it starts in an empty (or new) directory, or continues one with `--resume` from its
last checkpoint, the records of steps after that checkpoint dropped and the new ones appended.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import InputError
from .rewards import STAGE_COLUMN

RESOLVED_CONFIG = "config.resolved.yaml"
METRICS, RUN, ROLLOUTS, PROMPTS = "metrics.jsonl", "run.json", "rollouts.jsonl", "prompts.jsonl"
EVALUATION, START_EVALUATION = "evaluation.json", "evaluation_start.json"  # held out: trained, start


class Interrupted(Exception):
    """A run stopped by Ctrl-C. The message is one line, which `cli.main` completes with the resume
    command."""


def claim(run_dir: str | Path, output_dir: str | Path, resume: bool) -> None:
    """A run starts only where no run is: both directories new or empty. A resumed one needs a checkpoint in
    `output_dir` unless it kept no step yet (starting over would drop the steps it kept)."""
    for directory in dict.fromkeys((Path(run_dir), Path(output_dir))):
        if not resume and directory.is_dir() and any(directory.iterdir()):
            raise InputError(
                f"{directory} is not empty (a run is there): --resume continues it, --output-dir DIR starts "
                f"another"
            )
    metrics = Path(run_dir) / METRICS
    if resume and last_checkpoint(output_dir) is None and metrics.is_file() and metrics.read_text().strip():
        raise InputError(
            f"--resume: {output_dir} has no checkpoint, and starting over would drop the steps the run kept "
            "(trl.save_strategy saves checkpoints); --output-dir DIR starts another run"
        )


def last_checkpoint(output_dir: str | Path) -> str | None:
    """The `checkpoint-N` folder of the highest N in `output_dir` (TRL's), or None."""
    found = [
        p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and p.name.partition("-")[2].isdigit()
    ]
    return str(max(found, key=checkpoint_step)) if found else None


def checkpoint_step(checkpoint: str | Path | None) -> int:
    """The step a `checkpoint-N` folder was saved at (0: none, a run resumed from its start)."""
    return int(Path(checkpoint).name.rpartition("-")[2]) if checkpoint else 0


def keep_steps(path: Path, last: int) -> None:
    """Drop the records of steps after `last` from a JSONL file (a resumed run trains them again)."""
    if path.is_file():
        kept = [
            line
            for line in path.read_text().splitlines(keepends=True)
            if json.loads(line).get("step", 0) <= last
        ]
        path.write_text("".join(kept))


def prompt_id(prompt: Any, columns: Mapping[str, Any]) -> str:
    """A short stable id of a dataset row: the same prompt and item fields give the same id in every run."""
    text = json.dumps([prompt, columns], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def number(value: float) -> float | None:
    """A reward as JSON: NaN (missing) is null."""
    return None if math.isnan(value) else value


class RolloutWriter:
    """Appends each generation's rollouts to `rollouts.jsonl`, each new prompt to `prompts.jsonl`."""

    def __init__(
        self,
        run_dir: str | Path,
        names: Sequence[str],
        weights: Sequence[float],
        estimator: str,
        group: int,
        start: Mapping[str, Any] | None = None,
        resume: bool = False,
    ) -> None:
        """`start` (the starting weights, `model.starting_weights`) goes to run.json; `resume` appends to the
        files."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.names, self.weights, self.group = list(names), list(weights), group
        meta = {
            "components": self.names,
            "weights": self.weights,
            "estimator": estimator,
            "num_generations": group,
        }
        (self.run_dir / RUN).write_text(
            json.dumps(meta | ({"start": dict(start)} if start else {}), indent=2) + "\n"
        )
        for name in (ROLLOUTS, PROMPTS):
            if not resume or not (self.run_dir / name).is_file():
                (self.run_dir / name).write_text("")
        self.seen: set[str] = {prompt["prompt_id"] for prompt in read_jsonl(self.run_dir / PROMPTS)}

    def write(
        self,
        step: int,
        rows: Sequence[Mapping[str, Any]],
        completions: Sequence[Any],
        rewards: Sequence[Sequence[float]],
        advantages: Sequence[float],
        extra: Mapping[str, Sequence[Any]],
    ) -> None:
        """One generation batch: `rows` are the dataset rows (prompt and item fields), `rewards` [N][K]
        unweighted (NaN = missing), `extra` TRL's logged extra columns (the `stage/<service>` ones are
        kept)."""
        stages = {
            name.removeprefix(STAGE_COLUMN): values
            for name, values in extra.items()
            if name.startswith(STAGE_COLUMN)
        }
        rollouts, prompts = [], []
        for index, (row, completion, values, advantage) in enumerate(
            zip(rows, completions, rewards, advantages, strict=True)
        ):
            columns = {key: value for key, value in row.items() if key != "prompt"}
            pid = prompt_id(row.get("prompt"), columns)
            if pid not in self.seen:
                self.seen.add(pid)
                prompts.append({"prompt_id": pid, "prompt": row.get("prompt"), "columns": columns})
            scored = [v for v in values if not math.isnan(v)]
            total = (
                sum(w * v for w, v in zip(self.weights, values, strict=True) if not math.isnan(v))
                if scored
                else None
            )
            rollouts.append(
                {
                    "step": step,
                    "group": index // self.group,
                    "prompt_id": pid,
                    "completion": completion,
                    "components": {name: number(v) for name, v in zip(self.names, values, strict=True)},
                    "total": total,
                    "advantage": advantage,
                    "stage": {service: values[index] for service, values in stages.items()},
                }
            )
        append_jsonl(self.run_dir / PROMPTS, prompts)
        append_jsonl(self.run_dir / ROLLOUTS, rollouts)


def append_jsonl(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    with path.open("a") as handle:
        handle.writelines(json.dumps(record, default=str) + "\n" for record in records)


@dataclass(frozen=True)
class Run:
    """A run directory read back."""

    path: Path
    components: list[str]
    weights: list[float]
    estimator: str
    num_generations: int
    rollouts: list[dict[str, Any]]
    prompts: dict[str, dict[str, Any]]

    def file(self, name: str) -> Path:
        return self.path / name


def read_run(run_dir: str | Path) -> Run:
    """The run's rollouts and their prompts, or an InputError saying what is missing."""
    path = Path(run_dir)
    if not (path / RUN).is_file() or not (path / ROLLOUTS).is_file():
        raise InputError(
            f"{run_dir}: no {RUN} and {ROLLOUTS} here; give the run directory of `train` or `run` "
            "(the config's run_dir, default trl.output_dir)"
        )
    try:
        meta = json.loads((path / RUN).read_text())
        rollouts = read_jsonl(path / ROLLOUTS)
        prompts = {p["prompt_id"]: p for p in read_jsonl(path / PROMPTS)}
        return Run(
            path,
            meta["components"],
            meta["weights"],
            meta["estimator"],
            meta["num_generations"],
            rollouts,
            prompts,
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{run_dir}: cannot read the run ({type(error).__name__}: {error})") from None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]
