"""`python -m corrgrpo_trainer preflight`: one generation batch of the configured policy scored by the real
services, and what it says about the config before a run spends hours on it.

The batch is made by the run's own trainer (train.build_trainer), so TRL's own sampling settings. One group of
it is trained on for real (TRL's loss, backward, no optimizer step) to time the update. The report: truncation
rate, per-component zero-variance share and reward range, seconds per item per service, a step's time split
into generation / scoring / update, and advice drawn from those numbers. `run` prints the same lines before
step 1.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import resource
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .config import InputError
from .config_shape import RLConfig, SingleTurnRL, ToolcallWarmup, WarmupConfig
from .rundir import RUN
from .train import build_trainer

TRUNCATION_ADVICE = 0.1  # above this share of truncated completions the report says how long answers are
PERCENTILE = 0.95
ONE_PASS_ENOUGH_S = 2.0  # a timed update pass this long is not timed a second time (update_seconds)


@dataclass
class Report:
    """One preflight batch and what it says; `lines()` is what is printed."""

    model: str
    max_completion_length: int
    group: int
    names: list[str]
    completion_ids: list[
        list[int]
    ]  # each completion's tokens up to and including its EOS (truncated: all of them)
    truncated: list[bool]
    rewards: list[list[float]]  # [N][K] unweighted, NaN = missing
    service_seconds: dict[str, tuple[int, float]]  # service -> items, seconds
    generation_s: float
    scoring_s: float
    update_s: float  # the estimated update of one step
    update_how: str
    warmup_p95: int | None = (
        None  # tokens of the warm-up's answers (95th percentile), when the config has a warm-up
    )
    max_steps: int = 0
    peak: dict[str, float] = field(default_factory=dict)  # peak_memory() after the batch and its update
    took_s: float = 0.0  # the preflight itself, policy load included
    notes: list[str] = field(default_factory=list)

    @property
    def truncation_rate(self) -> float:
        return sum(self.truncated) / len(self.truncated)

    def zero_variance_share(self) -> dict[str, float]:
        """Per component, the share of groups whose scored values are all equal (a group with none scored
        counts)."""
        groups = [
            self.rewards[start : start + self.group] for start in range(0, len(self.rewards), self.group)
        ]
        shares = {}
        for k, name in enumerate(self.names):
            constant = [len({row[k] for row in group if not math.isnan(row[k])}) <= 1 for group in groups]
            shares[name] = sum(constant) / len(constant)
        return shares

    def reward_range(self) -> dict[str, tuple[float, float] | None]:
        """Per component, the lowest and highest scored value (None: nothing scored)."""
        ranges: dict[str, tuple[float, float] | None] = {}
        for k, name in enumerate(self.names):
            values = [row[k] for row in self.rewards if not math.isnan(row[k])]
            ranges[name] = (min(values), max(values)) if values else None
        return ranges

    @property
    def step_s(self) -> float:
        return self.generation_s + self.scoring_s + self.update_s

    def advice(self) -> list[str]:
        """What to change, from the numbers. Empty when nothing stands out."""
        advice = []
        if self.truncation_rate > TRUNCATION_ADVICE:
            lengths = [
                len(ids) for ids, cut in zip(self.completion_ids, self.truncated, strict=True) if not cut
            ]
            known = (
                f"warm-up answers have p95 {self.warmup_p95} tokens"
                if self.warmup_p95 is not None
                else f"finished completions here have p95 {percentile(lengths)} tokens"
                if lengths
                else "no completion here finished"
            )
            advice.append(
                f"max_completion_length {self.max_completion_length} truncates {self.truncation_rate:.0%} of "
                f"completions ({sum(self.truncated)} of {len(self.truncated)}); {known}: raise "
                f"trl.max_completion_length (a truncated answer scores as malformed)"
            )
        shares = self.zero_variance_share()
        if shares and all(share == 1.0 for share in shares.values()):
            advice.append(
                "no group's reward varied in any component: every advantage is 0 and nothing is learned; "
                "warm the policy up (`warmup:`) or raise trl.temperature / trl.num_generations"
            )
        else:
            advice.extend(
                f"{name} did not vary in any group: it adds nothing to the advantages yet"
                for name, share in shares.items()
                if share == 1.0
            )
        return advice

    def lines(self) -> list[str]:
        n, tokens = len(self.truncated), [len(ids) for ids in self.completion_ids]
        lines = [
            f"[preflight] {n} completions ({n // self.group} groups of {self.group}) of {self.model}, "
            f"scored by the services",
            f"[preflight] truncated: {self.truncation_rate:.0%} at max_completion_length "
            f"{self.max_completion_length} "
            f"(completion tokens: median {percentile(tokens, 0.5)}, p95 {percentile(tokens)})",
        ]
        for name, share in self.zero_variance_share().items():
            span = self.reward_range()[name]
            shown = f"{span[0]:.3g}..{span[1]:.3g}" if span else "nothing scored"
            lines.append(f"[preflight] {name}: zero-variance groups {share:.0%}, rewards {shown}")
        lines += [
            f"[preflight] {service}: {seconds / max(items, 1):.3f} s per item ({items} items in "
            f"{seconds:.1f} s)"
            for service, (items, seconds) in self.service_seconds.items()
        ]
        total = (
            f"; {self.max_steps} steps ~{clock(self.step_s * self.max_steps)}" if self.max_steps > 0 else ""
        )
        lines.append(
            f"[preflight] a step ~{self.step_s:.1f} s: generation {self.generation_s:.1f} s, scoring "
            f"{self.scoring_s:.1f} s, update {self.update_s:.1f} s ({self.update_how}){total}"
        )
        lines += (
            [f"[preflight] peak memory: {', '.join(f'{k} {v}' for k, v in self.peak.items())}"]
            if self.peak
            else []
        )
        lines += [f"[preflight] note: {note}" for note in self.notes]
        lines.append(f"[preflight] took {self.took_s:.1f} s")
        lines += [f"[preflight] advice: {advice}" for advice in self.advice()] or ["[preflight] advice: none"]
        return lines


def percentile(values: Sequence[int], q: float = PERCENTILE) -> int:
    """The nearest-rank q-quantile (0 of nothing)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else 0


def clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


def starting_model(config: SingleTurnRL, checkpoint: Path | None) -> tuple[SingleTurnRL, str | None]:
    """The config with the policy step 1 would train: the warm-up `checkpoint` (`pipeline.warmup_checkpoint`)
    when it is there; and a note when it is not (the batch is then the unwarmed model's)."""
    if checkpoint is None:
        return config, None
    if (checkpoint / "config.json").is_file():
        return config.model_copy(update={"model": str(checkpoint)}), None
    return config, f"no warm-up checkpoint yet ({checkpoint}): this is {config.model} before its warm-up"


def warmup_answer_tokens(warmup: WarmupConfig, tokenizer: Any) -> int | None:
    """The 95th percentile of the tool-call warm-up's answers in the policy's tokens (with the EOS that ends
    one)."""
    if not isinstance(warmup, ToolcallWarmup):  # episodes: no answer of one turn
        return None
    from .sft import rlla_rows

    with contextlib.redirect_stdout(io.StringIO()):  # its row count line belongs to the warm-up
        rows = rlla_rows(warmup.dataset)
    answers = [row["completion"][0]["content"] for row in rows]
    return percentile([len(ids) + 1 for ids in tokenizer(answers, add_special_tokens=False)["input_ids"]])


def preflight(
    config: RLConfig, warmup: WarmupConfig | None = None, note: str | None = None, show: bool = True
) -> Report:
    """Generate and score one batch of `config`'s policy, time the update on a slice of it, and report
    (printed when `show`). `config.model` is the policy as given (`starting_model` picks the warm-up's
    checkpoint); `warmup` gives the answer lengths the advice compares with, `note` is one more line."""
    if config.domain.episodes:
        raise InputError(
            f"preflight covers the single-turn domains, not {config.domain}: its rollouts are episodes"
        )
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="corrgrpo-preflight-") as scratch:
        with contextlib.redirect_stdout(io.StringIO()):  # the phase lines of a step that is not one
            trainer = build_trainer(config, output_dir=scratch, report_to="none", keep_rollouts=False)
            batch, update_s, update_how = first_batch(trainer)
        phases, args, tokenizer = trainer.phases, trainer.args, trainer.processing_class
        seconds = {phase: s for phase, _, s in phases.done}
        completion_ids, truncated = completions(batch["completion_ids"].tolist(), tokenizer.eos_token_id)
        report = Report(
            model=config.model,
            max_completion_length=args.max_completion_length,
            group=args.num_generations,
            names=list(trainer.reward_func_names),
            completion_ids=completion_ids,
            truncated=truncated,
            rewards=trainer._gathered_rewards.tolist(),
            service_seconds=dict(phases.services),
            generation_s=seconds.get("generating", 0.0) + seconds.get("log-probs", 0.0),
            scoring_s=seconds.get("scoring", 0.0),
            update_s=update_s,
            update_how=update_how,
            warmup_p95=warmup_answer_tokens(warmup, tokenizer) if warmup else None,
            max_steps=args.max_steps,
            peak=peak_memory(),
            notes=[note] if note else [],
            took_s=time.monotonic() - start,
        )
    if show:
        print("\n".join(report.lines()), flush=True)
    return report


def completions(ids: list[list[int]], eos: int) -> tuple[list[list[int]], list[bool]]:
    """Each completion's tokens up to and including its EOS, and whether it was cut (no EOS: all its
    tokens)."""
    kept, cut = [], []
    for row in ids:
        cut.append(eos not in row)
        kept.append(row if cut[-1] else row[: row.index(eos) + 1])
    return kept, cut


def first_batch(trainer: Any) -> tuple[dict[str, Any], float, str]:
    """Step 1's generation batch, generated and scored as `Trainer.train` would, and the estimated seconds of
    its update with how they were estimated (`update_seconds`)."""
    args = trainer.args
    trainer.model.train()
    if args.activation_checkpointing:  # as Trainer.train does: the update is timed as it will run
        trainer.model.activation_checkpointing_enable(
            activation_checkpointing_kwargs=args.activation_checkpointing_kwargs
        )
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # Trainer.train sets it
    trainer.phases.start_step(1, 1)
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    update_s, update_how = update_seconds(trainer, batch)
    trainer.phases.end_step()
    trainer.phases.close()
    return batch, update_s, update_how


def update_seconds(trainer: Any, batch: dict[str, Any]) -> tuple[float, str]:
    """A step's update time, from TRL's loss and backward (no optimizer step) on one rollout of the first
    micro-batch, times the rollouts a step trains on. Every rollout of a step is padded to the batch's widths,
    so each costs about the same: the update grows with their number."""
    from trl.trainer.utils import split_tensor_dict

    args = trainer.args
    micro = split_tensor_dict(batch, args.steps_per_generation)[0]
    rows = micro["completion_ids"].shape[0]
    one = split_tensor_dict(micro, rows)[0]
    times: list[float] = []
    # A first pass may pay one-time costs (kernel compilation, allocator growth): while a pass is short a
    # second one costs little and the faster counts; a long pass is mostly the work itself.
    while len(times) < 2 and (not times or times[0] < ONE_PASS_ENOUGH_S):
        start = time.monotonic()
        trainer.accelerator.backward(trainer.compute_loss(trainer.model, one))
        times.append(time.monotonic() - start)
        trainer.model.zero_grad(set_to_none=True)
    passes = args.gradient_accumulation_steps * args.num_iterations
    timed = (
        f"the faster of two real forward+backward passes ({min(times):.1f} s, {max(times):.1f} s)"
        if len(times) == 2
        else f"one real forward+backward pass ({times[0]:.1f} s)"
    )
    how = (
        f"{timed} of 1 of the {rows} rollouts of a micro-batch x {rows} x {args.gradient_accumulation_steps} "
        f"accumulation x {args.num_iterations} iteration"
    )
    return min(times) * rows * passes, how


def peak_memory() -> dict[str, float]:
    """This process's peak memory so far in GB: `rss_max_gb` (the OS's maximum resident set), and
    `cuda_max_allocated_gb` when torch has been using CUDA."""
    peak = {"rss_max_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}  # Linux: KiB
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["cuda_max_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
    return peak


def record_peak_memory(run_dir: str | Path) -> None:
    """Add the process's peak memory (`peak_memory`) to the run's run.json."""
    path = Path(run_dir) / RUN
    if path.is_file():
        path.write_text(
            json.dumps(json.loads(path.read_text()) | {"peak_memory": peak_memory()}, indent=2) + "\n"
        )
