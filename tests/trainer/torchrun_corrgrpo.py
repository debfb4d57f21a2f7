"""Train the tiny policy 2 CorrGRPO steps and check the advantages TRL trains on; one or more processes.

`torchrun --nproc_per_node 2 tests/trainer/torchrun_corrgrpo.py MODEL_DIR OUTPUT_DIR [ESTIMATOR]` runs it
on CPU with gloo; test_trl_trainer.py imports the same setup for the single-process test. Every rank
checks its own slice against the estimator applied to the rewards of all ranks (gathered independently
of TRL with all_gather_object) and exits non-zero on a mismatch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from datasets import Dataset

from corrgrpo_trainer.advantages import ESTIMATORS
from corrgrpo_trainer.trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

NUM_GENERATIONS = 4
REWARD_WEIGHTS = [1.0, 0.5, 2.0]
STEPS = 2
RECORDED: dict[str, list[list[float | None]]] = {}  # reward function name -> one list of values per call


def _record(name: str, values: list[float | None]) -> list[float | None]:
    RECORDED.setdefault(name, []).append(values)
    return values


def length_reward(completions: list[str], **_: Any) -> list[float | None]:
    """Scale ~1."""
    return _record("length_reward", [len(c) / 8 for c in completions])


def vowel_reward(completions: list[str], **_: Any) -> list[float | None]:
    """Scale ~100."""
    return _record(
        "vowel_reward", [100 * sum(ch in "aeiou" for ch in c) / max(len(c), 1) for c in completions]
    )


def space_reward(completions: list[str], **_: Any) -> list[float | None]:
    """Binary; None (missing) for an empty completion."""
    return _record("space_reward", [(1.0 if " " in c else 0.0) if c else None for c in completions])


REWARD_FUNCS = [length_reward, vowel_reward, space_reward]


class RecordingTrainer(CorrGRPOTrainer):
    """Keeps the advantages handed to TRL after scoring and those the loss receives."""

    scored: list[torch.Tensor]
    trained: list[torch.Tensor]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.scored.append(out["advantages"].clone())
        return out

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        self.trained.append(inputs["advantages"].clone())
        return super()._compute_loss(model, inputs)


def build_trainer(
    model_dir: str, output_dir: str, estimator: str = "corrgrpo", per_device: int = 8
) -> RecordingTrainer:
    """A CPU trainer on 4 prompts repeated, `per_device` rollouts per process and step (groups of 4)."""
    config = CorrGRPOConfig(
        output_dir=output_dir,
        advantage_estimator=estimator,
        use_cpu=True,
        bf16=False,
        report_to="none",
        max_steps=STEPS,
        per_device_train_batch_size=per_device,
        num_generations=NUM_GENERATIONS,
        max_completion_length=12,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        reward_weights=REWARD_WEIGHTS,
        seed=0,
        dataloader_num_workers=0,
    )
    dataset = Dataset.from_dict(
        {"prompt": ["def add(a, b):", "Write a function", "class Solution:", "return"] * 8}
    )
    trainer = RecordingTrainer(model=model_dir, reward_funcs=REWARD_FUNCS, args=config, train_dataset=dataset)
    trainer.scored, trainer.trained = [], []
    return trainer


def recorded_rewards(step: int) -> torch.Tensor:
    """This process's rewards [n_local, K] of one step, unweighted, NaN for None."""
    columns = [[torch.nan if v is None else v for v in RECORDED[f.__name__][step]] for f in REWARD_FUNCS]
    return torch.tensor(columns, dtype=torch.float32).T


def expected_advantages(all_rewards: torch.Tensor, estimator: str) -> torch.Tensor:
    """The estimator on the gathered rewards [N, K], independent of the trainer's plumbing."""
    grouped = all_rewards.view(-1, NUM_GENERATIONS, all_rewards.shape[1])
    return ESTIMATORS[estimator](grouped, torch.tensor(REWARD_WEIGHTS)).flatten()


def main(model_dir: str, output_dir: str, estimator: str = "corrgrpo") -> int:
    import torch.distributed as dist

    trainer = build_trainer(model_dir, output_dir, estimator, per_device=4)
    trainer.train()
    rank, world = dist.get_rank(), dist.get_world_size()
    failures = []
    for step in range(STEPS):
        parts: list[Any] = [None] * world
        dist.all_gather_object(parts, recorded_rewards(step))
        expected = expected_advantages(torch.cat(parts), estimator)
        local = expected[rank * 4 : (rank + 1) * 4]
        if not torch.allclose(trainer.scored[step], local, atol=1e-6):
            failures.append(
                f"rank {rank} step {step}: trained on {trainer.scored[step].tolist()}, expected "
                f"{local.tolist()}"
            )
        if not torch.equal(trainer.trained[step].sort().values, trainer.scored[step].sort().values):
            failures.append(f"rank {rank} step {step}: the loss saw other advantages than scoring produced")
    print("\n".join(failures) or f"rank {rank}/{world}: advantages match over {STEPS} steps", flush=True)
    dist.barrier()  # every rank is past its last collective
    return 1 if failures else 0


if __name__ == "__main__":
    status = main(*sys.argv[1:])
    # Not a normal exit: tearing down DDP's reducer at interpreter exit destroys the gloo process group, whose
    # thread may still need the GIL to free a finished work's tensors; that aborted a rank in CI ("terminate
    # called without an active exception") and hung one here (pytorch/pytorch#179291 describes the race).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
