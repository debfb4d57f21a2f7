"""GRPO, CorrGRPO and GDPO advantages: vectorised (corrgrpo_trainer.advantages) vs a per-group float64 loop.

The loop is the tests' oracle (`corrgrpo_testing.advantages_oracle`, testing/): one group at a time, float64,
CorrGRPO with the explicit K×K correlation matrix.

Run: `.venv/bin/python bench/bench_advantages.py` (CPU with 1 thread; CUDA too when available).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch

from corrgrpo_testing.advantages_oracle import reference_loop
from corrgrpo_trainer.advantages import ESTIMATORS


def _time(fn: Callable[[], object], sync: Callable[[], None], repeats: int) -> float:
    """Best wall time of `repeats` calls in seconds, after one warm-up call."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def sample_rewards(rollouts: int, group: int, components: int, device: str, seed: int = 0) -> torch.Tensor:
    """Binary, bounded and unbounded components at different scales, as the code domain produces."""
    generator = torch.Generator().manual_seed(seed)
    shape = (rollouts // group, group, components)
    binary = (torch.rand(shape, generator=generator) < 0.5).float()
    continuous = torch.rand(shape, generator=generator) * torch.logspace(-1, 1, components)
    return torch.where(torch.arange(components) < components // 2, binary, continuous).to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--components", type=int, default=7)
    parser.add_argument("--max-rollouts", type=int, default=65_536)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = [1_024 * 2**i for i in range(8) if 1_024 * 2**i <= args.max_rollouts]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(
        f"B·G rollouts, G = {args.group}, K = {args.components}; best of 5; CPU with "
        f"torch.set_num_threads(1);"
        " the loop always runs on the CPU\n"
    )
    print("| device | B·G | estimator | vectorised ms | per-group loop ms | loop / vectorised |")
    print("|---|---:|---|---:|---:|---:|")
    loops: dict[tuple[int, str], float] = {}
    for device in devices:
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        for rollouts in sizes:
            r = sample_rewards(rollouts, args.group, args.components, device)
            for name, estimator in ESTIMATORS.items():
                vectorised = _time(partial(estimator, r), sync, repeats=5)
                if device == "cpu":  # the loop runs on the CPU whatever r's device; time it once
                    loop = _time(partial(reference_loop, r, name), sync, repeats=1)
                    loops[rollouts, name] = loop
                loop = loops[rollouts, name]
                print(
                    f"| {device} | {rollouts:,} | {name} | {vectorised * 1e3:.2f} | {loop * 1e3:.0f} "
                    f"| {loop / vectorised:,.0f} |"
                )


if __name__ == "__main__":
    main()
