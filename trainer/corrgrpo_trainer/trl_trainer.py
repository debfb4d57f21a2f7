"""TRL's GRPOTrainer with the advantage estimator of corrgrpo_trainer.advantages (CorrGRPO, GRPO or GDPO).

TRL computes advantages inline in `_generate_and_score_completions`. There is no hook. So:
1. `_calculate_rewards` is wrapped to keep the [N, K] reward tensor TRL gathers from all processes;
2. after `super()._generate_and_score_completions` the advantages of all N rollouts are recomputed
   (groups of `num_generations` consecutive rows, as TRL groups them) and this process's slice replaces
   `out["advantages"]` — the slice TRL takes: process_index · n_local … (process_index + 1) · n_local.
TRL's own reward metrics (`rewards/<name>/mean`, `reward`, `reward_std`) are left as TRL logs them: they
describe the rewards, not the advantages. The estimator's diagnostics go to `self._metrics[mode]`.

The main process also keeps every training rollout in the run directory (rundir.py: rollouts with their
components, total, advantage and `info.stage`) and shows each step's phases in place of TRL's progress bar
(progress.StepPhases).

At exit the trainer ends what still runs on TRL's reward loop on that loop (`finish_event_loop`), before TRL
stops it.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import math
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from packaging.version import Version

try:
    import trl
    from accelerate.utils import gather_object
    from transformers import ProgressCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.kernels import chunked_logprob
    from trl.trainer import utils as trl_utils
    from trl.trainer.utils import is_async_callable
except (
    ImportError
) as error:  # TRL is an extra: advantages.py (and verl's estimator, which imports it) needs torch only
    raise ImportError(
        f"corrgrpo_trainer.trl_trainer needs TRL: pip install 'corrgrpo-trainer[trl]' ({error})"
    ) from error

from corrgrpo_trainer.advantages import ESTIMATORS, corrgrpo, diagnostics
from corrgrpo_trainer.progress import ABS_ADVANTAGE, StepPhases
from corrgrpo_trainer.rundir import RolloutWriter

SUPPORTED_TRL = (Version("1.14"), Version("1.17"))  # the pyproject pin. Tested with 1.16

# The private methods this subclass relies on, with the parameters it passes through.
_HOOKS = {
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_and_score_completions": ["self", "inputs"],
    "_generate": ["self", "prompts"],
}


def check_trl_version(version: str = trl.__version__) -> None:
    """Raise ImportError outside the supported TRL range or when the private methods changed shape."""
    low, high = SUPPORTED_TRL
    if not low <= Version(version) < high:
        raise ImportError(
            f"corrgrpo_trainer supports trl>={low},<{high} (found {version}): its advantage hook is private "
            f"TRL API"
        )
    for name, parameters in _HOOKS.items():
        method = getattr(GRPOTrainer, name, None)
        if method is None or list(inspect.signature(method).parameters) != parameters:
            raise ImportError(
                f"trl {version}: GRPOTrainer.{name}({', '.join(parameters[1:])}) is missing or changed"
            )


check_trl_version()
# TRL 1.16 calls transformers 5's deprecated checkpointing names (`model.is_gradient_checkpointing` at every
# generation).
CHECKPOINTING_WARNING = r"`(is_gradient_checkpointing|gradient_checkpointing_(en|dis)able)` is deprecated"
warnings.filterwarnings("ignore", message=CHECKPOINTING_WARNING, category=FutureWarning)
# AgentDojo episodes use TRL's experimental `environment_factory` knowingly (check_trl_version pins the TRL
# releases it was built against): its warning at every trainer says nothing new.
ENVIRONMENT_FACTORY_WARNING = "You are using 'environment_factory'"
warnings.filterwarnings("ignore", message=ENVIRONMENT_FACTORY_WARNING, category=UserWarning)
if not torch.cuda.is_available():
    # Without Triton, TRL's fused LM head runs [4096 x 32768] fp32 tiles in torch: 4.3 GB at peak for
    # SmolLM2's head. [1024 x 8192] tiles need 0.5 GB and are no slower.
    chunked_logprob.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = 1024, 8192


@dataclass
class CorrGRPOConfig(GRPOConfig):
    """GRPOConfig plus the advantage estimator; TRL's `scale_rewards` / `multi_objective_aggregation` must
    stay default."""

    advantage_estimator: str = field(default=corrgrpo.__name__, metadata={"help": " | ".join(ESTIMATORS)})
    advantage_floor: float | None = field(
        default=None,
        metadata={"help": "CorrGRPO only: lower bound on sqrt(Σρ) (off by default, as in the paper)"},
    )
    keep_rollouts: bool = field(
        default=True, metadata={"help": "write every training rollout to the run directory"}
    )
    run_dir: str | None = field(
        default=None, metadata={"help": "where rollouts.jsonl goes (default: output_dir)"}
    )
    show_phases: bool = field(
        default=True, metadata={"help": "print each step's phases and times instead of TRL's progress bar"}
    )

    def __post_init__(self) -> None:
        if (
            self.activation_checkpointing is None
        ):  # TRL sets the deprecated alias. Pass it on under its new name (no warning)
            self.activation_checkpointing = self.gradient_checkpointing
        super().__post_init__()
        if self.advantage_estimator not in ESTIMATORS:
            raise ValueError(
                f"advantage_estimator must be one of {sorted(ESTIMATORS)}, got {self.advantage_estimator!r}"
            )
        if self.advantage_floor is not None and self.advantage_estimator != corrgrpo.__name__:
            raise ValueError(f"advantage_floor applies to advantage_estimator={corrgrpo.__name__!r} only")
        if self.scale_rewards != "group" or self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "advantage_estimator replaces TRL's advantages: leave scale_rewards='group' and "
                "multi_objective_aggregation='sum_then_normalize' (use advantage_estimator='gdpo' for "
                "normalize_then_sum)"
            )


class CorrGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose advantages come from `args.advantage_estimator`. Logs `corrgrpo/*` and `grpo/*`
    diagnostics."""

    args: CorrGRPOConfig

    def __init__(
        self, *args: Any, start: dict[str, Any] | None = None, resume: bool = False, **kwargs: Any
    ) -> None:
        """`start` (the starting weights) goes to run.json; `resume` appends to the run directory's files."""
        super().__init__(*args, **kwargs)
        if getattr(self, "async_loop", None) is not None:  # TRL's daemon loop of async reward functions
            # runs before TRL's stop
            atexit.register(finish_event_loop, self.async_loop_thread, self.async_loop)
        main = self.accelerator.is_main_process
        self.phases = StepPhases() if self.args.show_phases and main else None
        if self.phases is not None:
            self.remove_callback(ProgressCallback)  # the phase lines say the step and more
            self.add_callback(PhaseCallback(self.phases))
            self.reward_funcs = [timed(func, self.phases) for func in self.reward_funcs]
        self.rollouts = None
        if self.args.keep_rollouts and main:
            names, weights = self.reward_func_names, self.reward_weights.tolist()
            run_dir = self.args.run_dir or self.args.output_dir
            estimator, group = self.args.advantage_estimator, self.num_generations
            self.rollouts = RolloutWriter(run_dir, names, weights, estimator, group, start, resume)

    def _generate(self, prompts: list[Any]) -> Any:
        if self.phases is not None:
            self.phases.begin("generating", f"{len(prompts)} completions")
        out = super()._generate(prompts)
        if self.phases is not None:
            self.phases.begin("log-probs")  # TRL's old and reference log-probabilities of the completions
        return out

    def _calculate_rewards(
        self,
        inputs: list[dict[str, Any]],
        prompts: list[Any],
        completions: list[Any],
        completion_ids_list: list[Any],
    ) -> torch.Tensor:
        if self.phases is not None:
            self.phases.begin("scoring")
        self._gathered_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._gathered_rewards

    def advantages_of(self, rewards_per_func: torch.Tensor, num_generations: int) -> torch.Tensor:
        """Advantages [N] of the gathered rewards [N, K] (unweighted, NaN = missing), grouped as TRL groups
        them."""
        grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
        weights = self.reward_weights.to(rewards_per_func.device)
        # CorrGRPO's
        floor = {} if self.args.advantage_floor is None else {"floor": self.args.advantage_floor}
        return ESTIMATORS[self.args.advantage_estimator](grouped, weights, **floor).flatten()

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._gathered_rewards
        advantages = self.advantages_of(rewards, num_generations)
        local = out["advantages"].shape[0]
        start = self.accelerator.process_index * local
        out["advantages"] = advantages[start : start + local].to(out["advantages"].dtype)
        # TRL logged its own advantages of all rollouts for the completions table. Show ours instead.
        logged = self._logs["advantages"]
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        self._metrics[mode][ABS_ADVANTAGE].append(advantages.abs().mean().item())
        grouped = rewards.view(-1, num_generations, rewards.shape[1])
        for name, value in diagnostics(
            grouped, self.reward_weights.to(rewards.device), names=self.reward_func_names
        ).items():
            self._metrics[mode][name].append(value)
        if mode == "train" and self.args.keep_rollouts:
            self._keep_rollouts(gather_object(inputs), rewards, advantages)
        if self.phases is not None:
            self.phases.begin("updating")
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """A diagnostic undefined at every step since the last log (no group varied) is left out, not logged
        as None: TensorBoard would warn about each such key and bury "nothing is learned"."""
        metrics = self._metrics["train" if self.model.training else "eval"]
        for name in [name for name, values in metrics.items() if values and all(map(math.isnan, values))]:
            del metrics[name]
        super().log(logs, start_time)

    def _keep_rollouts(
        self, rows: list[dict[str, Any]], rewards: torch.Tensor, advantages: torch.Tensor
    ) -> None:
        """The generation's rollouts into the run directory. Completions and extra columns as TRL logged
        them."""
        if self.rollouts is None:  # not the main process: it only took part in the gather
            return
        count = len(rows)
        self.rollouts.write(
            self.state.global_step
            + 1,  # the step these rollouts are trained in, as metrics.jsonl counts steps
            rows,
            list(self._logs["completion"])[-count:],
            rewards.tolist(),
            advantages.tolist(),
            {name: list(values)[-count:] for name, values in self._logs["extra"].items()},
        )


def finish_event_loop(
    thread: threading.Thread, loop: asyncio.AbstractEventLoop, timeout_s: float = 30.0
) -> None:
    """Cancel what still runs on TRL's reward loop, on that loop, wait for it to end, then stop the loop.

    TRL's exit hook only stops the loop, so a request still in flight would be closed outside any loop, where
    anyio's cleanup raises `NoEventLoopError`. Cancelled on its loop, it closes its connection there. A loop
    already stopped is finished in this thread.
    """
    if loop.is_closed():
        return
    if loop.is_running():
        asyncio.run_coroutine_threadsafe(cancel_pending(), loop).result(timeout_s)
        loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout_s)
    if not loop.is_running():  # stopped from outside, maybe with requests frozen in it: finished here
        loop.run_until_complete(cancel_pending())


async def cancel_pending() -> None:
    """Cancel every other task of the running loop and wait until each has ended (their cleanup runs on the
    loop)."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


class PhaseCallback(TrainerCallback):
    """Starts and ends each step's phase display."""

    def __init__(self, phases: StepPhases) -> None:
        self.phases = phases

    def on_step_begin(self, _args: Any, state: Any, _control: Any, **_: Any) -> None:
        self.phases.start_step(state.global_step + 1, state.max_steps)

    def on_step_end(self, _args: Any, _state: Any, _control: Any, **_: Any) -> None:
        self.phases.end_step()

    def on_train_end(self, _args: Any, _state: Any, _control: Any, **_: Any) -> None:
        self.phases.close()


def timed(func: Callable[..., Any], phases: StepPhases) -> Callable[..., Any]:
    """A reward function that tells `phases` how long it took for how many items, under its service's name (a
    column's `service` attribute, rewards.py) or its own. Other reward models (nn.Module) are left as they
    are."""
    if isinstance(func, torch.nn.Module):
        return func
    service = getattr(func, "service", getattr(func, "__name__", type(func).__name__))

    def report(kwargs: dict[str, Any], start: float) -> None:
        phases.scored(service, len(kwargs.get("completions", ())), time.monotonic() - start)

    if is_async_callable(func):

        @functools.wraps(func)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return await func(*args, **kwargs)
            finally:
                report(kwargs, start)

        return timed_async

    @functools.wraps(func)
    def timed_sync(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return func(*args, **kwargs)
        finally:
            report(kwargs, start)

    return timed_sync
