"""CorrGRPO as a verl advantage estimator: `algorithm.adv_estimator=corrgrpo` (verl 0.9).

verl imports every `verl.plugins` entry point when `verl` is imported; this package declares this module
as one, and importing it registers `corrgrpo` with `register_adv_est`.

Per-component rewards: verl 0.9 hands `non_tensor_batch` (where `compute_score`'s extra keys land) only to
its `gdpo` estimator, and only in the legacy trainer (`trainer.use_v1=false`); the v1 trainer hands no
estimator any per-component data. So this module also makes the legacy trainer's `compute_advantage`
(`verl.trainer.ppo.ray_trainer`, patched when it is imported) call `corrgrpo` with `non_tensor_batch`.
List the components in `+algorithm.corrgrpo_reward_keys=[...]` (weights in
`+algorithm.corrgrpo_reward_weights=[...]`, default 1). Without keys the estimator sees only the summed
token-level reward, K = 1, where Σρ = 1 and CorrGRPO gives the centered reward unscaled: it warns. With
keys but no components (the v1 trainer) it raises.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch

from .advantages import corrgrpo

NAME = "corrgrpo"
CONFIG_KEYS = "corrgrpo_reward_keys"
CONFIG_WEIGHTS = "corrgrpo_reward_weights"
LEGACY_TRAINER = "verl.trainer.ppo.ray_trainer"


def _components(
    token_level_rewards: torch.Tensor, config: Any, non_tensor_batch: dict[str, Any] | None
) -> tuple[torch.Tensor, list[float] | None]:
    """[N, K] rewards and their weights: the configured per-component columns, else the summed token-level reward."""
    keys = list(config.get(CONFIG_KEYS, None) or []) if config is not None else []
    if not keys:
        warnings.warn(
            "corrgrpo: no per-component rewards (set +algorithm.corrgrpo_reward_keys=[...]); with only the summed "
            "reward (K = 1, Σρ = 1) the advantage is the centered reward, unscaled",
            stacklevel=3,
        )
        return token_level_rewards.sum(dim=-1, keepdim=True), None
    present = non_tensor_batch or {}
    if missing := [key for key in keys if key not in present]:
        raise KeyError(
            f"corrgrpo: reward keys {missing} not in non_tensor_batch ({sorted(present)}); verl 0.9 hands them to "
            "estimators only in the legacy trainer: set trainer.use_v1=false"
        )
    columns = np.stack([np.asarray(present[key], dtype=np.float32) for key in keys], axis=-1)
    weights = config.get(CONFIG_WEIGHTS, None)
    return torch.as_tensor(columns, device=token_level_rewards.device), None if weights is None else [float(w) for w in weights]


def compute_corrgrpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-4,
    config: Any = None,
    non_tensor_batch: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's estimator signature: rollouts grouped by `index` (uid), one outcome advantage per response.

    Groups may differ in size (verl can filter rollouts); each size is computed as one vectorised batch.
    """
    rewards, weights = _components(token_level_rewards, config, non_tensor_batch)
    _, group_of = np.unique(np.asarray(index), return_inverse=True)
    group_of_t = torch.as_tensor(group_of, device=rewards.device)
    sizes = torch.bincount(group_of_t)
    scalars = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    by_group = torch.argsort(group_of_t, stable=True)  # rows of one group are contiguous
    for size in sizes.unique().tolist():
        rows = by_group[sizes[group_of_t[by_group]] == size]
        scalars[rows] = corrgrpo(rewards[rows].view(-1, size, rewards.shape[-1]), weights, eps=epsilon).flatten()
    advantages = scalars.unsqueeze(-1) * response_mask
    return advantages, advantages


def pass_components(module: ModuleType) -> None:
    """Make `module.compute_advantage` (verl's legacy trainer) give corrgrpo the batch's `non_tensor_batch`."""
    original = module.compute_advantage
    if getattr(original, "corrgrpo_passes_components", False):
        return
    signature = inspect.signature(original)

    def compute_advantage(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        data, estimator = call.arguments["data"], call.arguments["adv_estimator"]
        if estimator != NAME:
            return original(*args, **kwargs)
        if "response_mask" not in data.batch:
            data.batch["response_mask"] = module.compute_response_mask(data)
        advantages, returns = compute_corrgrpo_outcome_advantage(
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=call.arguments["config"],
            non_tensor_batch=data.non_tensor_batch,
        )
        data.batch["advantages"], data.batch["returns"] = advantages, returns
        return data

    compute_advantage.corrgrpo_passes_components = True  # type: ignore[attr-defined]
    module.compute_advantage = compute_advantage


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after the module `name` is first executed."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module: ModuleType) -> None:
                execute(module)
                self.then(module)

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


try:  # registered only inside verl; importing this module elsewhere is harmless
    from verl.trainer.ppo.core_algos import register_adv_est
except ImportError:
    register_adv_est = None
if register_adv_est is not None:
    register_adv_est(NAME)(compute_corrgrpo_outcome_advantage)
    if LEGACY_TRAINER in sys.modules:
        pass_components(sys.modules[LEGACY_TRAINER])
    else:
        sys.meta_path.insert(0, _AfterImport(LEGACY_TRAINER, pass_components))
