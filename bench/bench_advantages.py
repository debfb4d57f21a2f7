"""GRPO, CorrGRPO and GDPO advantages: vectorised (corrgrpo_trainer.advantages) vs a per-group float64 loop.

`reference_loop` is the plain reading of the definitions: one group at a time, float64, CorrGRPO with
the explicit K×K correlation matrix. The tests check the vectorised estimators against it.

Run: `.venv/bin/python bench/bench_advantages.py` (CPU with 1 thread; CUDA too when available).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch

from corrgrpo_trainer.advantages import ESTIMATORS, ZERO_VAR_TOL


def _group_reference(x: torch.Tensor, estimator: str, eps: float, zero_var_tol: float) -> torch.Tensor:
    """GRPO or CorrGRPO advantages of one group's scorable rollouts x [n, K] (missing components already 0)."""
    n = x.shape[0]
    totals = x.sum(dim=1)
    if n < 2:
        return torch.zeros(n, dtype=x.dtype)
    if estimator == "grpo":
        return (totals - totals.mean()) / (totals.std() + eps)
    centered = x - x.mean(dim=0)
    cov = centered.T @ centered / (n - 1)  # the K×K matrix the vectorised version never builds
    std = cov.diagonal().sqrt()
    varying = std > zero_var_tol * x.mean(dim=0).abs().clamp(min=1.0)
    rho = cov / torch.outer(std, std)
    rho[~varying, :] = 0.0
    rho[:, ~varying] = 0.0
    # Σρ ≥ 0 (ρ is positive semidefinite) but rounding can take it just below 0 when components cancel.
    return (totals - totals.mean()) / (rho.sum().clamp(min=0).sqrt() + eps)


def _gdpo_group_scores(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Σ_k of per-component z-scores over the present values of one group x [G, K]; NaN for all-missing rollouts."""
    count = (~torch.isnan(x)).sum(dim=0)
    mean = torch.nanmean(x, dim=0)
    std = ((x - mean).square().nansum(dim=0) / (count - 1)).sqrt()
    scores = torch.where(count >= 2, (x - mean) / (std + eps), float("nan")).nansum(dim=1)
    return scores.masked_fill(torch.isnan(x).all(dim=1), float("nan"))


def reference_loop(r: torch.Tensor, estimator: str, eps: float = 1e-4, zero_var_tol: float = ZERO_VAR_TOL) -> torch.Tensor:
    """Advantages [B, G] from a Python loop over groups, in float64, following TRL's NaN rules."""
    r = r.detach().to("cpu", torch.float64)
    advantages = torch.zeros(r.shape[:2], dtype=torch.float64)
    if estimator == "gdpo":
        scores = torch.stack([_gdpo_group_scores(group, eps) for group in r])
        present = scores[~torch.isnan(scores)]
        if present.numel() >= 2:
            advantages = ((scores - present.mean()) / (present.std() + eps)).nan_to_num(nan=0.0)
        return advantages
    for b, group in enumerate(r):
        scorable = ~torch.isnan(group).all(dim=1)
        advantages[b, scorable] = _group_reference(group[scorable].nan_to_num(nan=0.0), estimator, eps, zero_var_tol)
    return advantages


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
        f"B·G rollouts, G = {args.group}, K = {args.components}; best of 5; CPU with torch.set_num_threads(1);"
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
                    f"| {device} | {rollouts:,} | {name} | {vectorised * 1e3:.2f} | {loop * 1e3:.0f} | {loop / vectorised:,.0f} |"
                )


if __name__ == "__main__":
    main()
