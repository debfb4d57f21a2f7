"""CorrGRPO as a verl advantage estimator: `algorithm.adv_estimator=corrgrpo` (verl 0.9).

verl imports every `verl.plugins` entry point when `verl` is imported; corrgrpo-adapters declares this module
as one, and importing it registers `corrgrpo` with `register_adv_est`. It needs corrgrpo-trainer (the `verl`
extra): the advantages are `corrgrpo_trainer.advantages.corrgrpo`.

Per-component rewards: verl 0.9 hands `non_tensor_batch` (where `compute_score`'s extra keys land) only to
its `gdpo` estimator, and only in the legacy trainer (`trainer.use_v1=false`). verl's default, the v1 trainer,
keeps each rollout's `reward_extra_info` in its TransferQueue (the `extra_fields` field), but its
`PPOTrainer._compute_advantage` fetches only uid, masks, scores and log-probs, and no option adds a field (a
registered trainer, `register_trainer`, would need its own `trainer_mode`, which the replay buffer reads as
"not sync"). So this module patches, when each is imported and only for `adv_estimator=corrgrpo`:
- v1 (`verl.trainer.ppo.v1.trainer_base`): `PPOTrainer._compute_advantage` also fetches the batch's
  `extra_fields` from the TransferQueue, by the batch's own keys and partition;
- both: the legacy trainer's `compute_advantage` (`verl.trainer.ppo.ray_trainer`, which v1 calls too) gives
  `corrgrpo` the components. On v1 a multi-turn agent loop's session (keys `{uid}_{session}_{index}`) counts
  once in its group, by its final output, whose advantage every output of the session gets: verl's GRPO rule.

Weights: `verl_reward.compute_score` hands each rollout its service's weights (`corrgrpo_weights`: the
declared ones with `reward_kwargs.corrgrpo_weights` applied, the weights of the `score` verl logs), and each
rollout's components are weighed by its own. The components are those weights' keys, or
`+algorithm.corrgrpo_reward_keys=[...]` (leaving out one that weighs in the score warns). Another reward
function's batch needs both the keys and `+algorithm.corrgrpo_reward_weights=[...]`. Given with ours, they
must agree. A rollout the service could not score (`corrgrpo_on_error=zero`) is missing: out of its group's
statistics, advantage 0. Without keys the estimator sees only the summed token-level reward, K = 1, where Σρ =
1 and CorrGRPO gives the centered reward unscaled: it warns. With keys but no components it raises.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import torch

from corrgrpo_trainer.advantages import CORRGRPO_EPS, corrgrpo

from .verl_reward import ERROR_KEY, WEIGHTS_KEY

NAME = "corrgrpo"
CONFIG_KEYS = "corrgrpo_reward_keys"
CONFIG_WEIGHTS = "corrgrpo_reward_weights"
LEGACY_TRAINER = "verl.trainer.ppo.ray_trainer"
V1_TRAINER = "verl.trainer.ppo.v1.trainer_base"


def _carried_weights(present: dict[str, Any]) -> list[dict[str, float]] | None:
    """Each rollout's weights as `compute_score` handed them over, or None when the batch has none."""
    if WEIGHTS_KEY not in present:
        return None
    parsed = {text: json.loads(text) for text in set(present[WEIGHTS_KEY])}
    return [parsed[text] for text in present[WEIGHTS_KEY]]


def _components(
    token_level_rewards: torch.Tensor, config: Any, non_tensor_batch: dict[str, Any] | None
) -> tuple[torch.Tensor, list[float] | None]:
    """[N, K] rewards and their weights (None: already weighed, row by row), else the summed token-level
    reward."""
    present = non_tensor_batch or {}
    carried = _carried_weights(present)
    keys = list(config.get(CONFIG_KEYS, None) or []) if config is not None else []
    keys = keys or list(dict.fromkeys(key for weights in carried or [] for key in weights))
    if not keys:
        warnings.warn(
            "corrgrpo: no per-component rewards (set +algorithm.corrgrpo_reward_keys=[...]); with only the "
            "summed "
            "reward (K = 1, Σρ = 1) the advantage is the centered reward, unscaled",
            stacklevel=3,
        )
        return token_level_rewards.sum(dim=-1, keepdim=True), None
    if missing := [key for key in keys if key not in present]:
        raise KeyError(
            f"corrgrpo: reward keys {missing} not among the batch's reward_extra_info ({sorted(present)}): "
            "the reward function must return them (corrgrpo_adapters.verl_reward does)"
        )
    columns = np.stack([np.asarray(present[key], dtype=np.float64) for key in keys], axis=-1)
    configured = config.get(CONFIG_WEIGHTS, None) if config is not None else None
    if carried is None:
        if configured is None:
            raise ValueError(f"corrgrpo: no weights for {keys}: set +algorithm.{CONFIG_WEIGHTS}=[...]")
        return torch.as_tensor(columns, dtype=torch.float32, device=token_level_rewards.device), [
            float(w) for w in configured
        ]
    weights = np.array([[row.get(key, 0.0) for key in keys] for row in carried])
    if configured is not None and not np.allclose(weights, np.asarray(configured, dtype=np.float64)):
        raise ValueError(
            f"corrgrpo: {CONFIG_WEIGHTS} {list(configured)} differ from the weights the services scored with "
            f"({present[WEIGHTS_KEY][0]}): set them once, in reward_kwargs.corrgrpo_weights"
        )
    if left_out := sorted(
        {key for row in carried for key, weight in row.items() if weight and key not in keys}
    ):
        warnings.warn(f"corrgrpo: {left_out} weigh in the score but are not in {CONFIG_KEYS}", stacklevel=3)
    weighed = columns * weights
    if ERROR_KEY in present:  # unscored: missing, as TRL's None (the rule of corrgrpo_proto.common)
        weighed[np.asarray(present[ERROR_KEY], dtype=str) != ""] = np.nan
    return torch.as_tensor(weighed, dtype=torch.float32, device=token_level_rewards.device), None


def _scalars(
    token_level_rewards: torch.Tensor,
    index: np.ndarray,
    epsilon: float,
    config: Any,
    non_tensor_batch: dict[str, Any] | None,
) -> torch.Tensor:
    """One advantage per rollout, rollouts grouped by `index`. Each group size is one vectorised batch."""
    rewards, weights = _components(token_level_rewards, config, non_tensor_batch)
    _, group_of = np.unique(np.asarray(index), return_inverse=True)
    group_of_t = torch.as_tensor(group_of, device=rewards.device)
    sizes = torch.bincount(group_of_t)
    scalars = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    by_group = torch.argsort(group_of_t, stable=True)  # rows of one group are contiguous
    for size in sizes.unique().tolist():
        rows = by_group[sizes[group_of_t[by_group]] == size]
        scalars[rows] = corrgrpo(
            rewards[rows].view(-1, size, rewards.shape[-1]), weights, eps=epsilon
        ).flatten()
    return scalars


def compute_corrgrpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = CORRGRPO_EPS,
    config: Any = None,
    non_tensor_batch: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's estimator signature: rollouts grouped by `index` (uid), one outcome advantage per response.

    Groups may differ in size (verl can filter rollouts).
    """
    advantages = (
        _scalars(token_level_rewards, index, epsilon, config, non_tensor_batch).unsqueeze(-1) * response_mask
    )
    return advantages, advantages


class Sessions(NamedTuple):
    """A v1 batch's rows as the estimator needs them: their reward_extra_info as columns, and their
    sessions."""

    columns: dict[str, np.ndarray]  # reward_extra_info key -> one value per row (None where a row lacks it)
    final: np.ndarray  # the row of each session's final output
    session_of: np.ndarray  # each row's session, an index into `final`


def sessions_of(keys: Sequence[str], extra_fields: Sequence[Any]) -> Sessions:
    """From the v1 TransferQueue's keys (`{uid}_{session}_{index}`) and `extra_fields` of the same rows."""
    infos = [(getattr(fields, "data", fields) or {}).get("reward_extra_info", {}) for fields in extra_fields]
    names = dict.fromkeys(name for info in infos for name in info)
    columns = {name: np.array([info.get(name) for info in infos], dtype=object) for name in names}
    last: dict[str, tuple[int, int]] = {}  # session -> (output index, row)
    sessions = []
    for row, key in enumerate(keys):
        session, output = key.rsplit("_", 1)
        sessions.append(session)
        if session not in last or last[session][0] < int(output):
            last[session] = (int(output), row)
    order = {session: position for position, session in enumerate(last)}
    final = np.array([row for _, row in last.values()], dtype=np.int64)
    return Sessions(columns, final, np.array([order[session] for session in sessions], dtype=np.int64))


_V1_SESSIONS: ContextVar[Sessions | None] = ContextVar("corrgrpo_v1_sessions", default=None)


def _v1_advantages(data: Any, config: Any, sessions: Sessions) -> torch.Tensor:
    """Advantages of a v1 batch: each session once in its uid's group, broadcast to the session's outputs."""
    if len(sessions.session_of) != len(data):
        raise ValueError(f"corrgrpo: {len(sessions.session_of)} fetched rows for a batch of {len(data)}")
    final = sessions.final
    present = {key: np.asarray(value)[final] for key, value in data.non_tensor_batch.items()}
    present |= {key: value[final] for key, value in sessions.columns.items()}
    rewards = data.batch["token_level_rewards"][torch.as_tensor(final)]
    scalars = _scalars(rewards, present["uid"], CORRGRPO_EPS, config, present)
    return (
        scalars[torch.as_tensor(sessions.session_of, device=scalars.device)].unsqueeze(-1)
        * data.batch["response_mask"]
    )


def pass_components(module: ModuleType) -> None:
    """Make `module.compute_advantage` (verl's legacy trainer) give corrgrpo the batch's
    `non_tensor_batch`."""
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
        sessions = _V1_SESSIONS.get()
        if sessions is not None:
            advantages = _v1_advantages(data, call.arguments["config"], sessions)
        else:
            advantages, _ = compute_corrgrpo_outcome_advantage(
                token_level_rewards=data.batch["token_level_rewards"],
                response_mask=data.batch["response_mask"],
                index=data.non_tensor_batch["uid"],
                config=call.arguments["config"],
                non_tensor_batch=data.non_tensor_batch,
            )
        data.batch["advantages"], data.batch["returns"] = advantages, advantages
        return data

    compute_advantage.corrgrpo_passes_components = True  # type: ignore[attr-defined]
    module.compute_advantage = compute_advantage


def fetch_components(module: ModuleType) -> None:
    """Make the v1 trainer's `PPOTrainer._compute_advantage` fetch the batch's `extra_fields` for corrgrpo."""
    original = module.PPOTrainer._compute_advantage
    if getattr(original, "corrgrpo_fetches_components", False):
        return

    def _compute_advantage(self: Any, batch: Any, metrics: dict[str, Any]) -> Any:
        if self.config.algorithm.adv_estimator != NAME:
            return original(self, batch, metrics)
        fetched = module.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"]
        )
        token = _V1_SESSIONS.set(sessions_of(list(batch.keys), fetched.pop("extra_fields").tolist()))
        try:
            return original(self, batch, metrics)
        finally:
            _V1_SESSIONS.reset(token)

    _compute_advantage.corrgrpo_fetches_components = True  # type: ignore[attr-defined]
    module.PPOTrainer._compute_advantage = _compute_advantage


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


try:  # registered only inside verl. Importing this module elsewhere is harmless
    from verl.trainer.ppo.core_algos import register_adv_est
except ImportError:
    register_adv_est = None
if register_adv_est is not None:
    register_adv_est(NAME)(compute_corrgrpo_outcome_advantage)
    for _name, _patch in ((LEGACY_TRAINER, pass_components), (V1_TRAINER, fetch_components)):
        if _name in sys.modules:
            _patch(sys.modules[_name])
        else:
            sys.meta_path.insert(0, _AfterImport(_name, _patch))
