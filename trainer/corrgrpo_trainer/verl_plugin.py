"""CorrGRPO as a verl advantage estimator: `algorithm.adv_estimator=corrgrpo`.

verl (0.9.x) imports every `verl.plugins` entry point when `verl` is imported; this package declares
this module as one, and importing it registers `corrgrpo` with `register_adv_est`.

Per-component rewards: verl passes `non_tensor_batch` (where `compute_score`'s extra keys land) only
to its "gdpo" estimator. The one-line change verl needs, in `verl/trainer/ppo/ray_trainer.py`
`compute_advantage`:

    if adv_estimator in (AdvantageEstimator.GDPO, "gdpo", "corrgrpo"):

With it, list the components in `algorithm.corrgrpo_reward_keys` (weights in
`algorithm.corrgrpo_reward_weights`, default 1). Without it (or without the keys) the estimator sees
only the summed token-level reward, K = 1, where Σρ = 1 and CorrGRPO gives the centered reward
without any scaling: it warns.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from .advantages import corrgrpo

CONFIG_KEYS = "corrgrpo_reward_keys"
CONFIG_WEIGHTS = "corrgrpo_reward_weights"


def _components(token_level_rewards: torch.Tensor, config: Any, non_tensor_batch: dict[str, Any] | None) -> torch.Tensor:
    """[N, K] rewards: the configured per-component columns, else the summed token-level reward."""
    keys = list(config.get(CONFIG_KEYS, None) or []) if config is not None else []
    if not keys or non_tensor_batch is None:
        warnings.warn(
            "corrgrpo: no per-component rewards (set algorithm.corrgrpo_reward_keys and apply the one-line verl "
            "change in corrgrpo_trainer.verl_plugin); with only the summed reward (K = 1, Σρ = 1) the advantage is "
            "the centered reward, unscaled",
            stacklevel=3,
        )
        return token_level_rewards.sum(dim=-1, keepdim=True)
    missing = [key for key in keys if key not in non_tensor_batch]
    if missing:
        raise KeyError(f"corrgrpo: reward keys {missing} not in non_tensor_batch ({sorted(non_tensor_batch)})")
    columns = np.stack([np.asarray(non_tensor_batch[key], dtype=np.float32) for key in keys], axis=-1)
    rewards = torch.as_tensor(columns, device=token_level_rewards.device)
    weights = config.get(CONFIG_WEIGHTS, None)
    if weights is not None:
        rewards = rewards * torch.as_tensor(list(weights), dtype=rewards.dtype, device=rewards.device)
    return rewards


def compute_corrgrpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-4,
    config: Any = None,
    non_tensor_batch: dict[str, Any] | None = None,
    batch: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's estimator signature: rollouts grouped by `index` (uid), one outcome advantage per response.

    Groups may differ in size (verl can filter rollouts); each size is computed as one vectorised batch.
    """
    rewards = _components(token_level_rewards, config, non_tensor_batch)
    _, group_of = np.unique(np.asarray(index), return_inverse=True)
    group_of_t = torch.as_tensor(group_of, device=rewards.device)
    sizes = torch.bincount(group_of_t)
    scalars = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    by_group = torch.argsort(group_of_t, stable=True)  # rows of one group are contiguous
    for size in sizes.unique().tolist():
        rows = by_group[sizes[group_of_t[by_group]] == size]
        scalars[rows] = corrgrpo(rewards[rows].view(-1, size, rewards.shape[-1]), eps=epsilon).flatten()
    advantages = scalars.unsqueeze(-1) * response_mask
    return advantages, advantages


try:  # registered only inside verl; importing this module elsewhere is harmless
    from verl.trainer.ppo.core_algos import register_adv_est
except ImportError:
    register_adv_est = None
if register_adv_est is not None:
    register_adv_est("corrgrpo")(compute_corrgrpo_outcome_advantage)
