"""`python -m corrgrpo_trainer run`: warm-up, RL and the held-out evaluation of one RL config, into its run directory.

1. warm-up: the config's `warmup` (an SFT config) trains the RL config's `model` unless the warm-up's checkpoint
   (its `trl.output_dir`) is there already; RL then starts from that checkpoint.
2. RL (train.py); the policy is saved to `<run_dir>/policy`.
3. the `evaluation` section: code and tool-call rows get one greedy completion each, scored by the services
   (per-component means); AgentDojo episodes run through agentdojo/episode_metrics.py. Written to `<run_dir>/evaluation.json`.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import yaml

from .config import check_services
from .data import load_rows
from .policy import load_policy
from .rewards import service_rewards
from .row_check import checked_rows
from .sft import generate, sft
from .train import train

RESOLVED = "config.resolved.yaml"


def write_resolved(config: dict[str, Any], name: str = RESOLVED) -> None:
    """The config as checked, defaults filled in and paths absolute, into its run directory."""
    run_dir = Path(config["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / name).write_text(yaml.safe_dump(config, sort_keys=False))


def run(config: dict[str, Any], warmup: dict[str, Any] | None) -> dict[str, Any] | None:
    """Warm up (when needed), train, save the policy and evaluate it; the held-out metrics (None without
    an `evaluation` section)."""
    check_services(config)  # before the warm-up: a down service should not cost a warm-up first
    write_resolved(config)
    if warmup is not None:
        checkpoint = Path(warmup["trl"]["output_dir"])
        if (checkpoint / "config.json").is_file():
            print(f"[run] warm-up checkpoint {checkpoint} exists: no warm-up (delete it to warm up again)", flush=True)
        else:
            write_resolved(warmup | {"run_dir": config["run_dir"]}, "warmup.resolved.yaml")
            sft(warmup)
        config = config | {"model": str(checkpoint)}
    trainer = train(config)
    policy = Path(config["run_dir"]) / "policy"
    trainer.save_model(str(policy))
    if "evaluation" not in config:
        return None
    held_out = config | {"model": str(policy), "dataset": config["evaluation"]}
    output = Path(config["run_dir"]) / "evaluation.json"
    if config["domain"] == "agentdojo":
        from .agentdojo.episode_metrics import evaluate

        return evaluate(held_out, str(output))
    metrics = score_held_out(held_out)
    output.write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"[run] evaluation: {output}")
    return metrics


def score_held_out(config: dict[str, Any]) -> dict[str, float]:
    """The mean of each reward column, and of the weighted total, over one greedy completion per `dataset` row."""
    rows = checked_rows(load_rows(config), config, "evaluation")
    model, tokenizer = load_policy(config["model"], config["run_dir"])
    max_new_tokens = config["trl"].get("max_completion_length", 256)
    prompts = [row["prompt"] for row in rows]
    completions = list(generate(model.eval(), tokenizer, prompts, max_new_tokens))
    columns, weights = service_rewards(config)
    fields = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}

    async def score() -> list[list[float | None]]:
        return await asyncio.gather(*(column(prompts, completions, **fields) for column in columns))

    values = asyncio.run(score())
    means = {
        column.__name__: mean(v for v in column_values if v is not None)
        for column, column_values in zip(columns, values, strict=True)
    }
    scored = [item for item in zip(*values, strict=True) if any(v is not None for v in item)]  # a failed item: no total
    totals = [sum(w * v for w, v in zip(weights, item, strict=True) if v is not None) for item in scored]
    metrics = means | {"reward": mean(totals)}
    print(f"[eval] {len(rows)} held-out rows: {', '.join(f'{k}={v:.3f}' for k, v in metrics.items())}")
    return metrics


def mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan
