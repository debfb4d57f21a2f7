"""`python -m corrgrpo_trainer train`: one RL run, read top-down as it happens: config → data → policy →
trainer.

1. config (config.py): the YAML with the command line's overrides. Every configured service must answer first.
2. data and rewards: single-turn domains read their dataset (data.py) and score it with one reward column per
   service component (rewards.py); AgentDojo's episodes bring rows, columns and environments (agentdojo/).
3. policy (policy.py): the config's `model`.
4. trainer (trl_trainer.py): TRL's GRPOTrainer with the configured advantage estimator. Each logged step is a
   progress line and a line of `<run_dir>/metrics.jsonl` (progress.py). `preflight` builds the same trainer.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .agentdojo.trl_inputs import agentdojo_episodes
from .config_shape import RLConfig
from .data import load_rows
from .policy import device_args, load_policy, starting_weights
from .progress import component_table, metrics_callback, progress_line
from .rewards import check_services, service_rewards
from .row_check import checked_rows
from .rundir import METRICS, ROLLOUTS, Interrupted, checkpoint_step, keep_steps, last_checkpoint


def build_trainer(
    config: RLConfig,
    rows: list[dict[str, Any]] | None = None,
    progress: bool = True,
    resume: bool = False,
    **settings: Any,
) -> Any:
    """The CorrGRPOTrainer of `config`: its rows (or `rows`), reward columns, policy and TRL arguments, with
    `settings` (CorrGRPOConfig fields) over its `trl` section.

    Every configured service is checked first (ServicesDown), before the heavy imports. Rows a service cannot
    take are dropped with one line (row_check.py).
    """
    # 1. config
    check_services(config.services)
    from datasets import Dataset

    from .trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

    trl_args = config.trl | settings

    # 2. data and rewards
    episodes = agentdojo_episodes(config) if config.domain.episodes else None
    if episodes is not None:
        columns, weights, rows = episodes.columns, episodes.weights, episodes.rows if rows is None else rows
    else:
        columns, weights = service_rewards(config.services)
        rows = checked_rows(
            load_rows(config.dataset) if rows is None else rows, config.services, config.dataset.offset
        )

    # 3. policy
    name = config.model
    model, tokenizer = load_policy(name, trl_args["output_dir"], config.threads)

    # 4. trainer
    args = CorrGRPOConfig(
        advantage_estimator=config.estimator,
        advantage_floor=config.advantage_floor,
        reward_weights=weights,
        run_dir=config.run_dir,  # rollouts.jsonl beside config.resolved.yaml
        show_phases=progress,
        **device_args(name) | trl_args,
    )
    return CorrGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=columns,
        args=args,
        train_dataset=Dataset.from_list(rows),
        **(episodes.trainer_kwargs(tokenizer) if episodes else {}),
        start=starting_weights(name, model) if args.keep_rollouts else None,  # for run.json
        resume=resume,
    )


def train(
    config: RLConfig, rows: list[dict[str, Any]] | None = None, progress: bool = True, resume: bool = False
) -> Any:
    """Train the CorrGRPOTrainer of `config` (`build_trainer`; `rows` replace the config's dataset) and return
    it.

    Every logged step is appended to `<run_dir>/metrics.jsonl` (TRL's metrics, the estimator's diagnostics,
    `model/params`). `resume` continues from the last checkpoint of the output directory (from the start when
    there is none). The first Ctrl-C ends the run after the current step, saved as a resume needs it
    (Interrupted). A second one stops at once.
    """
    from transformers import PrinterCallback

    trainer = build_trainer(config, rows, progress, resume)
    args, names = trainer.args, list(trainer.reward_func_names)
    params = {"model/params": sum(p.numel() for p in trainer.model.parameters())}
    line = (
        (lambda state, logs: step_lines(state.global_step, state.max_steps, logs, names))
        if progress
        else None
    )
    checkpoint = last_checkpoint(args.output_dir) if resume else None
    if resume:  # the steps after the checkpoint are trained again
        for name in (METRICS, ROLLOUTS):
            keep_steps(config.run_path / name, checkpoint_step(checkpoint))
        print(
            f"[train] resuming {config.run_path} from {checkpoint or 'its start (no checkpoint)'}", flush=True
        )
    metrics = config.run_path / METRICS
    stop = StopAfterStep()
    trainer.add_callback(metrics_callback(metrics, "reward", line, params, append=resume))
    trainer.add_callback(stop.callback)
    if progress:
        trainer.remove_callback(PrinterCallback)  # its raw log dicts would drown the progress lines
    with stop.on_interrupt():
        trainer.train(resume_from_checkpoint=checkpoint)
    if stop.requested:
        step = trainer.state.global_step
        raise Interrupted(f"stopped at step {step}, saved in {args.output_dir}/checkpoint-{step}")
    if progress:
        print(component_table(trainer.state.log_history, names))
        print(f"[train] metrics of every step: {metrics}; every rollout: {metrics.parent}/rollouts.jsonl")
    return trainer


def step_lines(step: int, max_steps: int, logs: dict[str, float], names: list[str]) -> str:
    """A step's progress line, and a warning when no group's rewards varied (every advantage is 0)."""
    line = progress_line(step, max_steps, logs, names)
    if logs.get("frac_reward_zero_std") == 1.0:
        line += f"\n{nothing_learned(step)}"
    return line


def nothing_learned(step: int) -> str:
    return (
        f"[train] step {step}: every group had the same reward (zero variance): nothing is learned; warm up "
        f"first "
        "(`warmup:` in the config, run by `python -m corrgrpo_trainer run`) or raise trl.temperature / "
        "trl.num_generations"
    )


class StopAfterStep:
    """Ctrl-C while training: the first ends the run after the current step with a checkpoint (what `--resume`
    needs: weights, optimizer, scheduler, RNG, step), the second raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        owner = self

        class Callback(TrainerCallback):
            def on_step_end(self, _args: Any, _state: Any, control: Any, **_: Any) -> None:
                if owner.requested:
                    control.should_save = control.should_training_stop = True

        self.requested = False
        self.callback = Callback()

    @contextmanager
    def on_interrupt(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = signal.getsignal(signal.SIGINT)

        def handle(_signum: int, _frame: Any) -> None:
            self.requested = True
            signal.signal(signal.SIGINT, previous)
            print(
                "\n[train] Ctrl-C: stopping after this step and saving it for --resume (Ctrl-C again: now, "
                "unsaved)"
            )

        signal.signal(signal.SIGINT, handle)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
