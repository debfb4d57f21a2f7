"""TRL's GRPOTrainer with the advantage estimator of corrgrpo_trainer.advantages (CorrGRPO, GRPO or GDPO).

TRL computes advantages inline in `_generate_and_score_completions`; there is no hook. So:
1. `_calculate_rewards` is wrapped to keep the [N, K] reward tensor TRL gathers from all processes;
2. after `super()._generate_and_score_completions` the advantages of all N rollouts are recomputed
   (groups of `num_generations` consecutive rows, as TRL groups them) and this process's slice
   replaces `out["advantages"]` — the slice TRL takes: process_index · n_local … (process_index + 1) · n_local.
TRL's own reward metrics (`rewards/<name>/mean`, `reward`, `reward_std`) are left as TRL logs them: they
describe the rewards, not the advantages. The estimator's diagnostics go to `self._metrics[mode]`.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from packaging.version import Version

try:
    import trl
    from trl import GRPOConfig, GRPOTrainer
except ImportError as error:  # TRL is an extra: advantages.py and the verl plugin need torch only
    raise ImportError(f"corrgrpo_trainer.trl_trainer needs TRL: pip install 'corrgrpo-trainer[trl]' ({error})") from error

from corrgrpo_trainer.advantages import ESTIMATORS, corrgrpo, diagnostics

SUPPORTED_TRL = (Version("1.14"), Version("1.17"))  # the pyproject pin; tested with 1.16
ABS_ADVANTAGE = "advantages/abs_mean"  # mean |advantage| of the step's rollouts, logged beside TRL's metrics

# The private methods this subclass relies on, with the parameters it passes through.
_HOOKS = {
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_and_score_completions": ["self", "inputs"],
}


def check_trl_version(version: str = trl.__version__) -> None:
    """Raise ImportError outside the supported TRL range or when the private methods changed shape."""
    low, high = SUPPORTED_TRL
    if not low <= Version(version) < high:
        raise ImportError(
            f"corrgrpo_trainer supports trl>={low},<{high} (found {version}): its advantage hook is private TRL API"
        )
    for name, parameters in _HOOKS.items():
        method = getattr(GRPOTrainer, name, None)
        if method is None or list(inspect.signature(method).parameters) != parameters:
            raise ImportError(f"trl {version}: GRPOTrainer.{name}({', '.join(parameters[1:])}) is missing or changed")


check_trl_version()
# TRL 1.16 calls transformers 5's deprecated checkpointing names (`model.is_gradient_checkpointing` at every generation).
CHECKPOINTING_WARNING = r"`(is_gradient_checkpointing|gradient_checkpointing_(en|dis)able)` is deprecated"
warnings.filterwarnings("ignore", message=CHECKPOINTING_WARNING, category=FutureWarning)


@dataclass
class CorrGRPOConfig(GRPOConfig):
    """GRPOConfig plus the advantage estimator; TRL's `scale_rewards` / `multi_objective_aggregation` must stay default."""

    advantage_estimator: str = field(default="corrgrpo", metadata={"help": "corrgrpo | grpo | gdpo"})
    advantage_floor: float | None = field(
        default=None, metadata={"help": "CorrGRPO only: lower bound on sqrt(Σρ) (off by default, as in the paper)"}
    )

    def __post_init__(self) -> None:
        if self.activation_checkpointing is None:  # TRL sets the deprecated alias; pass it on under its new name (no warning)
            self.activation_checkpointing = self.gradient_checkpointing
        super().__post_init__()
        if self.advantage_estimator not in ESTIMATORS:
            raise ValueError(f"advantage_estimator must be one of {sorted(ESTIMATORS)}, got {self.advantage_estimator!r}")
        if self.advantage_floor is not None and self.advantage_estimator != "corrgrpo":
            raise ValueError("advantage_floor applies to advantage_estimator='corrgrpo' only")
        if self.scale_rewards != "group" or self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "advantage_estimator replaces TRL's advantages: leave scale_rewards='group' and "
                "multi_objective_aggregation='sum_then_normalize' (use advantage_estimator='gdpo' for normalize_then_sum)"
            )


class CorrGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose advantages come from `args.advantage_estimator`; logs `corrgrpo/*` and `grpo/*` diagnostics."""

    args: CorrGRPOConfig

    def _calculate_rewards(
        self, inputs: list[dict[str, Any]], prompts: list[Any], completions: list[Any], completion_ids_list: list[Any]
    ) -> torch.Tensor:
        self._gathered_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._gathered_rewards

    def compute_advantages(self, rewards_per_func: torch.Tensor, num_generations: int) -> torch.Tensor:
        """Advantages [N] of the gathered rewards [N, K] (unweighted, NaN = missing), grouped as TRL groups them."""
        grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
        weights = self.reward_weights.to(rewards_per_func.device)
        if self.args.advantage_estimator == "corrgrpo":
            return corrgrpo(grouped, weights, floor=self.args.advantage_floor).flatten()
        return ESTIMATORS[self.args.advantage_estimator](grouped, weights).flatten()

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._gathered_rewards
        advantages = self.compute_advantages(rewards, num_generations)
        local = out["advantages"].shape[0]
        start = self.accelerator.process_index * local
        out["advantages"] = advantages[start : start + local].to(out["advantages"].dtype)
        # TRL logged its own advantages of all rollouts for the completions table; show ours instead.
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        self._metrics[mode][ABS_ADVANTAGE].append(advantages.abs().mean().item())
        grouped = rewards.view(-1, num_generations, rewards.shape[1])
        for name, value in diagnostics(grouped, self.reward_weights.to(rewards.device), names=self.reward_func_names).items():
            self._metrics[mode][name].append(value)
        return out
