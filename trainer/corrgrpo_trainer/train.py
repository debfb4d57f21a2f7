"""`python -m corrgrpo_trainer train`: one RL run, read top-down as it happens: config → data → policy → trainer.

1. config (config.py): the YAML with the command line's overrides; every configured service must answer first.
2. data and rewards: single-turn domains read their dataset (data.py) and score it with one reward column per
   service component (rewards.py); AgentDojo's episodes bring rows, columns and environments (agentdojo/).
3. policy (policy.py): the config's `model`.
4. trainer (trl_trainer.py): TRL's GRPOTrainer with the configured advantage estimator; each logged step is a
   progress line and a line of `<output_dir>/metrics.jsonl`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .agentdojo.episodes import agentdojo_episodes
from .config import check_services
from .data import load_rows
from .policy import bf16, config_policy
from .rewards import service_rewards


def train(config: dict[str, Any], rows: list[dict[str, Any]] | None = None, progress: bool = True) -> Any:
    """Build the policy, the reward columns and a CorrGRPOTrainer from `config`, train, and return the trainer.

    `rows` (prompt plus the columns the item builder reads) replace the config's dataset when given.
    Every logged step is appended to `<output_dir>/metrics.jsonl` (TRL's metrics, the estimator's
    diagnostics, `model/params`). Every configured service is checked first (ServicesDown), before the heavy imports.
    """
    # 1. config
    check_services(config)
    from datasets import Dataset
    from transformers import PrinterCallback

    from .trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

    trl_args = dict(config.get("trl", {}))
    trl_args.setdefault("output_dir", f"trainer_out/{config['domain']}")

    # 2. data and rewards
    episodes = agentdojo_episodes(config)  # None unless the domain is agentdojo (multi-turn)
    if episodes is not None:
        columns, weights, default_rows = episodes.columns, episodes.weights, episodes.rows
    else:
        (columns, weights), default_rows = service_rewards(config), None
    if rows is None:
        rows = default_rows if default_rows is not None else load_rows(config)

    # 3. policy
    name, model, tokenizer = config_policy(config, trl_args["output_dir"])

    # 4. trainer
    args = CorrGRPOConfig(
        advantage_estimator=config.get("estimator", "corrgrpo"),
        advantage_floor=config.get("advantage_floor"),
        reward_weights=weights,
        bf16=bf16(name),
        **trl_args,
    )
    names = [c.__name__ for c in columns]
    params = sum(p.numel() for p in model.parameters())
    step_log = metrics_callback(Path(args.output_dir) / "metrics.jsonl", params, names, progress)
    trainer = CorrGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=columns,
        args=args,
        train_dataset=Dataset.from_list(rows),
        **(episodes.trainer_kwargs(tokenizer) if episodes else {}),
        callbacks=[step_log],
    )
    if progress:
        trainer.remove_callback(PrinterCallback)  # its raw log dicts would drown the progress lines
    trainer.train()
    if progress:
        print(component_table(trainer.state.log_history, names))
        print(f"[train] metrics of every step: {args.output_dir}/metrics.jsonl")
    return trainer


def metrics_callback(path: Path, params: int, names: Sequence[str], progress: bool) -> Any:
    """A TrainerCallback appending each logged step to `path` (emptied now) and, with `progress`, printing its line."""
    from transformers import TrainerCallback

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")

    class StepLog(TrainerCallback):
        def on_log(self, _args: Any, state: Any, _control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if not logs or "reward" not in logs or not state.is_world_process_zero:
                return
            with path.open("a") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs, "model/params": params}) + "\n")
            if progress:
                print(progress_line(state.global_step, state.max_steps, logs, names), flush=True)

    return StepLog()


def progress_line(step: int, max_steps: int, logs: dict[str, float], names: Sequence[str]) -> str:
    """One step: total reward, each component's mean, the zero-variance group fraction and mean |advantage|."""
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
