r"""Group-relative advantages for multi-reward RL: GRPO, CorrGRPO and GDPO.

Every estimator has one signature, ``estimator(r, weights=None, eps=..., ...)``: rewards ``r`` of
shape [B, G, K] (B prompt groups, G rollouts per prompt, K reward components, unweighted) and
optional per-component weights w [K]. It returns advantages of shape [B, G] on r's device.
ε is 1e-4 (TRL's) for GRPO and GDPO, 1e-6 under the square root for CorrGRPO (the authors').
Statistics are within a group and use one convention everywhere: torch's unbiased
(Bessel-corrected) std, as TRL does. Notation for one group, rollouts g = 1..G:

    R_g = Σ_k w_k r_gk                              total reward
    Var(R) = Σ_k Σ_l Cov(w_k r_k, w_l r_l)          variance of a sum (paper §2)
    z_gk = (w_k r_gk − mean_k) / std_k              standardised (weighted) component

    GRPO      A_g = (R_g − mean R) / (sqrt(Var R) + ε)
    CorrGRPO  A_g = (R_g − mean R) / sqrt(max(Σ_k Σ_l ρ_kl, 0) + ε)     ρ = Pearson correlation
    GDPO      A_g = batchnorm(Σ_k w_k (r_gk − mean_k) / (std_k + ε))

GRPO and CorrGRPO share the numerator and differ only in the denominator (the paper's Figure 1):
the sum of covariances against the sum of correlations, both from the same `group_moments`.

CorrGRPO needs no K×K matrix: ρ_kl = Σ_g z_gk z_gl / (G − 1) with the unbiased std, hence

    Σ_k Σ_l ρ_kl = Σ_g (Σ_k z_gk)² / (G − 1),

O(G·K) per group. A component whose within-group std is (numerically) zero gets z = 0, which sets
its row and column of ρ, diagonal included, to 0 (the paper's rule; ρ stays positive
semidefinite, so Σρ ≥ 0 up to rounding, which the clamp removes). Known hazard: Σρ → 0 while R
still varies (anti-correlated components) scales advantages by up to 1/sqrt(ε) = 1000; `diagnostics`
counts such groups and `floor` bounds the denominator.

This equals the authors' estimator (their verl fork's ``grpo_covariance_coefficient``) everywhere but
one region: "zero" variance. Theirs drops a component only when its variance is exactly 0. Ours when
std <= ZERO_VAR_TOL · max(1, |mean|), so the float32 rounding noise of a constant (std ~3e-8 for 0.3)
is no component of Σρ (nor is a component weighed down to that scale). Where theirs counts j such
components, its denominator differs from ours by up to j (Cauchy-Schwarz: sqrt(Σρ) moves by at most 1
per component), in a direction set by the noise: with one varying component, theirs divides by anything
from sqrt(ε) to 2 where ours divides by 1.
Missing components (NaN) extend theirs, which has no such case (a NaN makes its group's advantages NaN).

Missing values (NaN, e.g. a reward function that returned None) follow TRL 1.16: a missing
component counts as 0 in R (TRL's nansum), a rollout with every component missing is left out of
its group's statistics and gets advantage 0. CorrGRPO fills missing components with 0 before its
component statistics too, so Σρ describes the same R as the numerator. GDPO follows TRL's
``normalize_then_sum`` exactly, which skips missing values in the per-component statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

Estimator = Callable[..., torch.Tensor]

ZERO_VAR_TOL = 1e-6
"""A component is zero-variance in a group when std <= ZERO_VAR_TOL · max(1, |mean|).

Relative, because the float32 std of a constant 0.3 is ~3e-8, not 0."""

CORRGRPO_EPS = 1e-6
"""ε under CorrGRPO's square root, the authors' (verl's default epsilon): |A| <= 1000 · |R − mean R|."""

LOW_SUM_RHO = 0.1
"""Σρ below this, with a varying component, counts as the anti-correlation hazard in `diagnostics`."""


def nanstd(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Unbiased std ignoring NaNs, as TRL's `trl.trainer.utils.nanstd` (NaN when fewer than 2 values)."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    variance = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True).to(x.dtype)
    correction = torch.where(count > 1, count / (count - 1), torch.full_like(variance, float("nan")))
    std = torch.sqrt(variance * correction)
    return std if keepdim else std.squeeze(dim)


Weights = Sequence[float] | torch.Tensor | None


def _check(r: torch.Tensor, weights: Weights = None) -> torch.Tensor | None:
    """Validates r and returns the weights as a [K] tensor on r's device (None when not given)."""
    if r.ndim != 3 or not r.is_floating_point():
        raise ValueError(f"rewards must be a float tensor of shape [B, G, K], got {tuple(r.shape)} {r.dtype}")
    if weights is None:
        return None
    w = torch.as_tensor(weights, dtype=r.dtype, device=r.device)
    if w.shape != (r.shape[-1],):
        raise ValueError(
            f"weights must have one value per component (K = {r.shape[-1]}), got shape {tuple(w.shape)}"
        )
    return w


def _fold(r: torch.Tensor, weights: Weights) -> torch.Tensor:
    """w_k r_gk: the weighted components whose sum is R (NaN stays NaN)."""
    w = _check(r, weights)
    return r if w is None else r * w


class GroupMoments(NamedTuple):
    """Within-group statistics shared by CorrGRPO and the diagnostics, all over the scorable rollouts."""

    centered: torch.Tensor  # [B, G] R − mean R (NaN for unscorable rollouts)
    mean_total: torch.Tensor  # [B] mean R
    std_total: torch.Tensor  # [B] std R (NaN when fewer than 2 scorable rollouts)
    filled: torch.Tensor  # [B, G, K] r with missing components = 0 and unscorable rollouts = NaN
    z: torch.Tensor  # [B, G, K] standardised components, 0 where zero-variance or unscorable
    varying: torch.Tensor  # [B, K] bool, the component's std is above the tolerance
    dof: torch.Tensor  # [B] n − 1, n = scorable rollouts in the group (at least 1 to divide by)
    sum_rho: torch.Tensor  # [B] Σ_k Σ_l ρ_kl


def group_moments(
    r: torch.Tensor, weights: Weights = None, zero_var_tol: float = ZERO_VAR_TOL
) -> GroupMoments:
    """Means, stds and standardised components of the weighted rewards of each group in one O(B·G·K) pass."""
    r = _fold(r, weights)
    scorable = ~torch.isnan(r).all(dim=-1, keepdim=True)  # [B, G, 1]
    filled = torch.where(scorable, torch.nan_to_num(r, nan=0.0), float("nan"))
    totals = filled.sum(dim=-1)
    mean_total = torch.nanmean(totals, dim=1)
    centered = totals - mean_total.unsqueeze(1)
    mean_k = torch.nanmean(filled, dim=1, keepdim=True)
    std_k = nanstd(filled, dim=1, keepdim=True)
    varying = std_k > zero_var_tol * mean_k.abs().clamp(min=1.0)  # False where std is NaN (n < 2)
    z = torch.where(varying, (filled - mean_k) / std_k, 0.0).nan_to_num(nan=0.0)
    dof = (scorable.sum(dim=1).squeeze(-1) - 1).clamp(min=1).to(r.dtype)
    sum_rho = z.sum(dim=-1).square().sum(dim=1) / dof
    return GroupMoments(
        centered, mean_total, nanstd(totals, dim=1), filled, z, varying.squeeze(1), dof, sum_rho
    )


def _normalised(moments: GroupMoments, denominator: torch.Tensor, eps: float) -> torch.Tensor:
    """(R_g − mean R) / (denominator + eps), 0 for unscorable rollouts: the numerator both share."""
    return (moments.centered / (denominator.unsqueeze(1) + eps)).nan_to_num(nan=0.0)


def grpo(r: torch.Tensor, weights: Weights = None, eps: float = 1e-4) -> torch.Tensor:
    """GRPO: A_g = (R_g − mean R) / (sqrt(Σ_k Σ_l Cov_kl) + ε) = (R_g − mean R) / (std R + ε).

    Bit-equal to TRL 1.16's `multi_objective_aggregation="sum_then_normalize"` with scale_rewards="group".
    """
    moments = group_moments(r, weights)
    return _normalised(moments, moments.std_total, eps)


def corrgrpo_scale(sum_rho: torch.Tensor, eps: float = CORRGRPO_EPS) -> torch.Tensor:
    """CorrGRPO's denominator sqrt(max(Σρ, 0) + ε): ε inside the root, as the authors'."""
    return (sum_rho.clamp(min=0) + eps).sqrt()


def corrgrpo(
    r: torch.Tensor,
    weights: Weights = None,
    eps: float = CORRGRPO_EPS,
    zero_var_tol: float = ZERO_VAR_TOL,
    floor: float | None = None,
) -> torch.Tensor:
    """CorrGRPO: A_g = (R_g − mean R) / sqrt(max(Σρ, 0) + ε), computed as Σρ = Σ_g (Σ_k z_gk)² / (G − 1).

    `floor` (off by default, as in the paper) replaces that denominator by max(denominator, floor): it bounds
    the advantages of groups whose components cancel (Σρ → 0 while R varies) more tightly than ε does.
    """
    moments = group_moments(r, weights, zero_var_tol)
    denominator = corrgrpo_scale(moments.sum_rho, eps)
    if floor is not None:
        denominator = denominator.clamp(min=floor)
    return _normalised(moments, denominator, 0.0)


def gdpo(r: torch.Tensor, weights: Weights = None, eps: float = 1e-4) -> torch.Tensor:
    """GDPO, exactly TRL 1.16's `multi_objective_aggregation="normalize_then_sum"`.

        s_g = Σ_k w_k (r_gk − mean_k) / (std_k + ε)          per group, missing values skipped
        A_g = (s_g − mean s) / (std s + ε)                   mean and std over the whole batch

    Unlike GRPO and CorrGRPO, the weights multiply the z-scores (as TRL does), not the rewards:
    a weight folded into r would cancel in its own z-score.
    """
    w = _check(r, weights)
    num_generations = r.shape[1]
    mean_k = torch.nanmean(r, dim=1, keepdim=True)
    std_k = nanstd(r, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
    scores = (r - mean_k) / (std_k + eps)
    if w is not None:
        scores = scores * w
    summed = scores.nansum(dim=-1).masked_fill(torch.isnan(r).all(dim=-1), float("nan"))
    std = (
        nanstd(summed.flatten(), dim=0)
        if summed.numel() > 1
        else torch.zeros((), dtype=r.dtype, device=r.device)
    )
    return ((summed - torch.nanmean(summed)) / (std + eps)).nan_to_num(nan=0.0)


ESTIMATORS: dict[str, Estimator] = {estimator.__name__: estimator for estimator in (grpo, corrgrpo, gdpo)}


def _mean_where(values: torch.Tensor, keep: torch.Tensor) -> float:
    """Mean of values[keep] (NaN when nothing is kept), as a Python float for logging."""
    kept = values[keep]
    return kept.mean().item() if kept.numel() else float("nan")


def diagnostics(
    r: torch.Tensor,
    weights: Weights = None,
    eps: float = 1e-4,
    zero_var_tol: float = ZERO_VAR_TOL,
    names: Sequence[str] | None = None,
    low_sum_rho: float = LOW_SUM_RHO,
    corrgrpo_eps: float = CORRGRPO_EPS,
) -> dict[str, float]:
    """Per-step statistics of the batch (means over groups where each is defined).

    - ``grpo/scale_mean``: mean 1 / (std R + ε), GRPO's scaling coefficient, over groups where R varies.
    - ``corrgrpo/scale_mean``: mean 1 / sqrt(Σρ + `corrgrpo_eps`), over groups with a varying component.
      A constant group's scale is about 1/ε, a number about ε and nothing about the rewards: such groups are
      left out of both means and counted in ``constant_group_frac`` (both means are NaN when every group is).
    - ``corrgrpo/offdiag_corr_mean``: mean ρ_kl over k ≠ l among the m varying components,
      (Σρ − m) / (m(m − 1)).
    - ``grpo/var_share/<k>``: Σ_l Cov(r_k, r_l) / Var R = Cov(r_k, R) / Var R, component k's share of GRPO's
      variance.
    - ``corrgrpo/share/<k>``: Σ_l ρ_kl / Σρ, its share of CorrGRPO's Σρ (both sets of shares sum to 1).
    - ``corrgrpo/zero_var_frac``: fraction of (group, component) pairs with zero within-group variance.
    - ``corrgrpo/low_sum_rho_frac``: fraction of groups with a varying component and Σρ < `low_sum_rho`.
    - ``constant_group_frac``: fraction of groups (with at least 2 scorable rollouts) whose R does not vary.
    """
    moments = group_moments(r, weights, zero_var_tol)
    names = list(names) if names is not None else [str(k) for k in range(r.shape[-1])]
    has_pair = ~torch.isnan(moments.std_total)  # at least 2 scorable rollouts
    var_total = moments.std_total.square()
    centered_k = moments.filled - torch.nanmean(moments.filled, dim=1, keepdim=True)
    # [B, K]
    cov_with_total = (centered_k * moments.centered.unsqueeze(-1)).nansum(dim=1) / moments.dof.unsqueeze(-1)
    # [B, K]
    rho_with_total = (moments.z * moments.z.sum(dim=-1, keepdim=True)).sum(dim=1) / moments.dof.unsqueeze(-1)
    varying = moments.varying.sum(dim=-1).to(r.dtype)
    # False where NaN
    has_variance = moments.std_total > zero_var_tol * moments.mean_total.abs().clamp(min=1.0)
    stats = {
        "grpo/scale_mean": _mean_where(1 / (moments.std_total + eps), has_variance),
        "corrgrpo/scale_mean": _mean_where(
            1 / corrgrpo_scale(moments.sum_rho, corrgrpo_eps), has_pair & (varying > 0)
        ),
        "corrgrpo/offdiag_corr_mean": _mean_where(
            (moments.sum_rho - varying) / (varying * (varying - 1)).clamp(min=1), varying >= 2
        ),
        "corrgrpo/zero_var_frac": _mean_where(
            (~moments.varying).to(r.dtype), has_pair.unsqueeze(-1).expand_as(moments.varying)
        ),
        "corrgrpo/low_sum_rho_frac": _mean_where(
            ((moments.sum_rho < low_sum_rho) & (varying > 0)).to(r.dtype), has_pair
        ),
        "constant_group_frac": _mean_where((~has_variance).to(r.dtype), has_pair),
    }
    has_rho = moments.sum_rho > zero_var_tol
    for k, name in enumerate(names):
        stats[f"grpo/var_share/{name}"] = _mean_where(cov_with_total[:, k] / var_total, has_variance)
        stats[f"corrgrpo/share/{name}"] = _mean_where(rho_with_total[:, k] / moments.sum_rho, has_rho)
    return stats
