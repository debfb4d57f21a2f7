"""The test oracle: GRPO, CorrGRPO and GDPO advantages as the plain reading of their definitions.

One group at a time, float64, CorrGRPO with the explicit K×K correlation matrix, TRL's NaN rules.
The tests check the vectorised estimators of corrgrpo_trainer.advantages against it;
bench/bench_advantages.py times it as the per-group-loop baseline.
"""

from __future__ import annotations

import torch

from corrgrpo_trainer.advantages import CORRGRPO_EPS, ZERO_VAR_TOL


def group_reference(x: torch.Tensor, estimator: str, eps: float, zero_var_tol: float) -> torch.Tensor:
    """GRPO or CorrGRPO advantages of one group's scorable rollouts x [n, K] (missing components already
    0)."""
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
    return (totals - totals.mean()) / (rho.sum().clamp(min=0) + eps).sqrt()


def gdpo_group_scores(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Σ_k of per-component z-scores over the present values of one group x [G, K]; NaN for all-missing
    rollouts."""
    count = (~torch.isnan(x)).sum(dim=0)
    mean = torch.nanmean(x, dim=0)
    std = ((x - mean).square().nansum(dim=0) / (count - 1)).sqrt()
    scores = torch.where(count >= 2, (x - mean) / (std + eps), float("nan")).nansum(dim=1)
    return scores.masked_fill(torch.isnan(x).all(dim=1), float("nan"))


def reference_loop(
    r: torch.Tensor, estimator: str, eps: float | None = None, zero_var_tol: float = ZERO_VAR_TOL
) -> torch.Tensor:
    """Advantages [B, G] from a Python loop over groups, in float64, following TRL's NaN rules.

    `eps` defaults to each estimator's own: 1e-4 beside the std, CORRGRPO_EPS under CorrGRPO's root.
    """
    eps = eps if eps is not None else CORRGRPO_EPS if estimator == "corrgrpo" else 1e-4
    r = r.detach().to("cpu", torch.float64)
    advantages = torch.zeros(r.shape[:2], dtype=torch.float64)
    if estimator == "gdpo":
        scores = torch.stack([gdpo_group_scores(group, eps) for group in r])
        present = scores[~torch.isnan(scores)]
        if present.numel() >= 2:
            advantages = ((scores - present.mean()) / (present.std() + eps)).nan_to_num(nan=0.0)
        return advantages
    for b, group in enumerate(r):
        scorable = ~torch.isnan(group).all(dim=1)
        advantages[b, scorable] = group_reference(
            group[scorable].nan_to_num(nan=0.0), estimator, eps, zero_var_tol
        )
    return advantages
