"""Properties of the GRPO / CorrGRPO / GDPO estimators against the definitions, TRL 1.16 and the per-group
loop."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from trl.trainer.utils import nanstd as trl_nanstd

from corrgrpo_testing.advantages_oracle import gdpo_group_scores, reference_loop
from corrgrpo_trainer.advantages import (
    CORRGRPO_EPS,
    ESTIMATORS,
    ZERO_VAR_TOL,
    corrgrpo,
    diagnostics,
    gdpo,
    group_moments,
    grpo,
)

FAST = settings(max_examples=40, deadline=None)


@st.composite
def reward_tensors(draw: st.DrawFn, max_components: int = 5, missing: bool = False) -> torch.Tensor:
    """[B, G, K] float32: continuous components of scales ~1e-2..1e2, binary ones, some constant within a
    group.

    Binary values and the constant 0.25 are exact in float32, so float32 and float64 agree on which
    components are constant; test_zero_variance_components_drop_out covers the inexact 0.3.
    """
    groups, size, components = (
        draw(st.integers(1, 4)),
        draw(st.integers(2, 8)),
        draw(st.integers(1, max_components)),
    )
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scales = (
        torch.tensor(draw(st.lists(st.floats(-2, 2), min_size=components, max_size=components))).exp2() ** 3.3
    )
    r = torch.randn(groups, size, components, generator=generator) * scales
    binary = torch.rand(components, generator=generator) < 0.3
    r = torch.where(binary, (r > 0).float(), r)
    constant = torch.rand(groups, 1, components, generator=generator) < 0.2
    r = torch.where(constant, torch.full_like(r, 0.25), r)
    if missing:
        r = r.masked_fill(torch.rand(r.shape, generator=generator) < 0.2, float("nan"))
        r[:, 0] = float("nan")  # every group has one all-missing rollout
    return r


@FAST
@given(reward_tensors())
def test_variance_of_the_sum_is_the_sum_of_covariances(r: torch.Tensor) -> None:
    x = r.double()
    centered = x - x.mean(dim=1, keepdim=True)
    cov = torch.einsum("bgk,bgl->bkl", centered, centered) / (x.shape[1] - 1)
    var_total = x.sum(dim=-1).var(dim=1)  # unbiased, the convention of every estimator here
    torch.testing.assert_close(var_total, cov.sum(dim=(1, 2)))


@FAST
@given(reward_tensors(max_components=1))
def test_corrgrpo_with_one_component_is_grpo_rescaled_by_its_std(r: torch.Tensor) -> None:
    """K = 1: ρ = [[1]] (or [[0]] if constant): CorrGRPO = (R − mean R) / sqrt(1 + ε') = GRPO (std R + ε) /
    sqrt(1 + ε').

    The two agree up to their ε only when std R = 1, i.e. for a standardised reward, checked below.
    """
    varying = group_moments(r).varying.squeeze(-1)  # [B]
    std = r.double().squeeze(-1).std(dim=1, keepdim=True)
    expected = grpo(r.double()) * (std + 1e-4) / math.sqrt(1 + CORRGRPO_EPS)
    torch.testing.assert_close(corrgrpo(r)[varying].double(), expected[varying], atol=1e-5, rtol=1e-5)
    assert (corrgrpo(r)[~varying].abs() < 1e-3).all()  # constant group: float32 noise / sqrt(ε')
    if varying.any():
        standardised = (r[varying] - r[varying].mean(dim=1, keepdim=True)) / r[varying].std(
            dim=1, keepdim=True
        )
        torch.testing.assert_close(
            corrgrpo(standardised) * math.sqrt(1 + CORRGRPO_EPS),
            grpo(standardised) * (1 + 1e-4),
            atol=1e-5,
            rtol=1e-5,
        )


@FAST
@given(reward_tensors(), st.data())
def test_corrgrpo_denominator_is_invariant_to_rescaling_a_component(
    r: torch.Tensor, data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, r.shape[-1] - 1))
    factor = data.draw(st.floats(1e-3, 1e3))
    rescaled = r.double().clone()
    rescaled[..., k] *= factor
    torch.testing.assert_close(
        group_moments(rescaled).sum_rho, group_moments(r.double()).sum_rho, atol=1e-9, rtol=1e-9
    )


def assume_well_conditioned(r: torch.Tensor, name: str, threshold: float) -> None:
    """Skip examples where the estimator divides by ~0 (but not exactly 0): rounding noise of the numerator is
    amplified.

    Σρ ≈ 0 while R varies is the anti-correlation hazard itself (with G = 2 any two varying components have ρ
    = ±1).
    """
    if name == "gdpo":
        scores = torch.stack([gdpo_group_scores(group, 1e-4) for group in r.double()])
        present = scores[~torch.isnan(scores)]
        denominators = present.std().reshape(1) if present.numel() > 1 else torch.full((1,), float("nan"))
        constant = denominators == 0
    else:
        moments = group_moments(r.double())
        denominators = moments.std_total if name == "grpo" else moments.sum_rho.sqrt()
        constant = moments.std_total == 0  # R constant: the numerator is exactly 0 whatever the denominator
    assume(((denominators > threshold) | constant | torch.isnan(denominators)).all())


@FAST
@given(reward_tensors(missing=False), st.sampled_from(sorted(ESTIMATORS)))
def test_vectorised_estimators_match_the_float64_per_group_loop(r: torch.Tensor, name: str) -> None:
    """Within 1e-9 in float64 and 1e-5 in float32 wherever the denominator is not ~0 (1e-6 and 1e-2
    respectively)."""
    reference = reference_loop(r, name)
    assume_well_conditioned(r, name, 1e-6)
    torch.testing.assert_close(ESTIMATORS[name](r.double()), reference, atol=1e-9, rtol=1e-9)
    assume_well_conditioned(r, name, 1e-2)
    torch.testing.assert_close(ESTIMATORS[name](r).double(), reference, atol=1e-5, rtol=1e-5)


@FAST
@given(reward_tensors(missing=True), st.sampled_from(sorted(ESTIMATORS)))
def test_missing_values_follow_trl(r: torch.Tensor, name: str) -> None:
    """A missing component counts as 0, an all-missing rollout is left out of its group and gets advantage
    0."""
    advantages = ESTIMATORS[name](r.double())
    assert torch.isfinite(advantages).all()
    assert (advantages[:, 0] == 0).all()
    assume_well_conditioned(r, name, 1e-6)
    torch.testing.assert_close(advantages, reference_loop(r, name), atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(advantages[:, 1:], ESTIMATORS[name](r[:, 1:].double()), atol=1e-9, rtol=1e-9)
    if name != "gdpo":  # GRPO and CorrGRPO read a missing component of a scorable rollout as 0
        scorable = ~torch.isnan(r).all(dim=-1, keepdim=True)
        filled = torch.where(scorable, r.nan_to_num(nan=0.0), float("nan"))
        torch.testing.assert_close(advantages, ESTIMATORS[name](filled.double()), atol=1e-9, rtol=1e-9)


def trl_sum_then_normalize(rewards_per_func: torch.Tensor, num_generations: int) -> torch.Tensor:
    """TRL 1.16 grpo_trainer.py lines 2756-2788 and 2810 (scale_rewards="group", weights 1), inline there,
    copied here."""
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = rewards_per_func.nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    mean_grouped = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(
        num_generations, dim=0
    )
    std_rewards = trl_nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(
        num_generations, dim=0
    )
    return torch.nan_to_num((rewards - mean_grouped) / (std_rewards + 1e-4), nan=0.0)


def trl_normalize_then_sum(
    rewards_per_func: torch.Tensor, num_generations: int, weights: torch.Tensor
) -> torch.Tensor:
    """TRL 1.16 grpo_trainer.py lines 2756-2759, 2790-2800 and 2810 (GDPO), inline there, copied here."""
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    grouped = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = trl_nanstd(grouped, dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean_k)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, rewards_per_func.shape[1])
    rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    std_rewards = trl_nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    return torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4), nan=0.0)


@FAST
@given(reward_tensors(missing=True), st.booleans(), st.data())
def test_grpo_and_gdpo_equal_trl(r: torch.Tensor, drop_missing: bool, data: st.DataObject) -> None:
    r = r[:, 1:] if drop_missing else r
    flat = r.reshape(-1, r.shape[-1])
    weights = torch.tensor(data.draw(st.lists(st.floats(-2, 2), min_size=r.shape[-1], max_size=r.shape[-1])))
    torch.testing.assert_close(
        grpo(r).flatten(), trl_sum_then_normalize(flat.clone(), r.shape[1]), atol=0, rtol=0
    )
    expected = trl_normalize_then_sum(flat.clone(), r.shape[1], weights)
    torch.testing.assert_close(gdpo(r, weights=weights).flatten(), expected, atol=1e-6, rtol=1e-6)


def test_zero_variance_components_drop_out_of_the_correlation_sum() -> None:
    varying = torch.tensor([[1.0], [2.0], [4.0], [3.0]])
    constant = torch.full((4, 1), 0.3)  # float32 std of this is ~3e-8, not 0
    r = torch.cat([varying, constant, constant * 7], dim=1).unsqueeze(0)
    moments = group_moments(r)
    assert moments.varying.tolist() == [[True, False, False]]
    torch.testing.assert_close(moments.sum_rho, torch.tensor([1.0]))
    torch.testing.assert_close(corrgrpo(r), corrgrpo(r[..., :1]))
    everything_constant = torch.full((1, 4, 3), 0.3)
    assert group_moments(everything_constant).sum_rho.item() == 0.0
    assert torch.isfinite(corrgrpo(everything_constant)).all()
    assert corrgrpo(everything_constant).abs().max() < 1e-3
    assert diagnostics(torch.cat([r, everything_constant]))["corrgrpo/zero_var_frac"] == pytest.approx(5 / 6)


def test_floor_bounds_the_anti_correlation_hazard() -> None:
    x = torch.tensor([0.0, 1.0, 2.0, 3.0])
    r = torch.stack([x, -x + 1e-3 * torch.tensor([1.0, -1.0, -1.0, 1.0])], dim=-1).unsqueeze(0).double()
    unfloored, floored = corrgrpo(r), corrgrpo(r, floor=0.5)
    assert unfloored.abs().max() > 10 * floored.abs().max()
    torch.testing.assert_close(floored, (r.sum(-1) - r.sum(-1).mean()) / 0.5)
    assert diagnostics(r)["corrgrpo/low_sum_rho_frac"] == 1.0
    assert diagnostics(r.abs())["corrgrpo/low_sum_rho_frac"] == 0.0


def test_figure_2_example_scale_dominates_grpo_and_correlation_dominates_corrgrpo() -> None:
    """Four trajectories, three rewards: r1, r2 small-scale and strongly correlated, r3 large-scale and weakly
    correlated."""
    r = torch.tensor([[0.1, 0.1, 2.0], [0.2, 0.25, -1.0], [0.3, 0.3, -1.0], [0.4, 0.45, 2.0]]).unsqueeze(0)
    rho = torch.corrcoef(r[0].T)
    assert rho[0, 1] > 0.95 and rho[0, 2].abs() < 0.1 and rho[1, 2].abs() < 0.2
    stats = diagnostics(r, names=["r1", "r2", "r3"])
    assert stats["grpo/var_share/r3"] > 0.95  # r3's variance and covariances make up almost all of Var R
    assert stats["grpo/var_share/r1"] + stats["grpo/var_share/r2"] < 0.05
    assert stats["corrgrpo/share/r1"] + stats["corrgrpo/share/r2"] > 0.75  # the correlated pair dominates Σρ
    assert stats["corrgrpo/share/r3"] < 0.25
    shares = [
        stats[f"{kind}/{name}"]
        for kind in ("grpo/var_share", "corrgrpo/share")
        for name in ("r1", "r2", "r3")
    ]
    assert sum(shares[:3]) == pytest.approx(1) and sum(shares[3:]) == pytest.approx(1)
    torch.testing.assert_close(group_moments(r).sum_rho, rho.sum().unsqueeze(0))
    assert stats["corrgrpo/offdiag_corr_mean"] == pytest.approx((rho.sum() - 3).item() / 6, abs=1e-5)
    assert stats["corrgrpo/scale_mean"] == pytest.approx(
        1 / math.sqrt(rho.sum().item() + CORRGRPO_EPS), rel=1e-5
    )
    assert stats["grpo/scale_mean"] == pytest.approx(1 / (r.sum(-1).std().item() + 1e-4), rel=1e-5)


def test_estimators_keep_device_and_shape_and_reject_bad_shapes() -> None:
    r = torch.rand(3, 4, 2)
    for estimator in ESTIMATORS.values():
        assert estimator(r).shape == (3, 4) and estimator(r).device == r.device
        with pytest.raises(ValueError, match=r"\[B, G, K\]"):
            estimator(r[0])


@FAST
@given(reward_tensors(), st.data())
def test_one_signature_weights_fold_into_r_for_grpo_and_corrgrpo(
    r: torch.Tensor, data: st.DataObject
) -> None:
    """estimator(r, weights) for every estimator; GRPO and CorrGRPO weight the rewards, GDPO (as TRL) the
    z-scores."""
    weights = torch.tensor(data.draw(st.lists(st.floats(-2, 2), min_size=r.shape[-1], max_size=r.shape[-1])))
    x = r.double()
    for name in ("grpo", "corrgrpo"):
        torch.testing.assert_close(
            ESTIMATORS[name](x, weights), ESTIMATORS[name](x * weights.double()), atol=0, rtol=0
        )
    torch.testing.assert_close(gdpo(x, weights), gdpo(x, weights=weights))
    with pytest.raises(ValueError, match="one value per component"):
        grpo(x, torch.ones(r.shape[-1] + 1))


@FAST
@given(reward_tensors())
def test_grpo_and_corrgrpo_differ_only_in_the_denominator(r: torch.Tensor) -> None:
    """Figure 1: the same centered total, divided by sqrt(Σ Cov) + ε (GRPO) and sqrt(Σ ρ + ε') (CorrGRPO)."""
    x = r.double()
    moments = group_moments(x)
    torch.testing.assert_close(moments.std_total.square(), x.sum(-1).var(dim=1))
    numerator_grpo = grpo(x) * (moments.std_total.unsqueeze(1) + 1e-4)
    numerator_corrgrpo = corrgrpo(x) * (moments.sum_rho.clamp(min=0) + CORRGRPO_EPS).sqrt().unsqueeze(1)
    torch.testing.assert_close(numerator_grpo, moments.centered, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(numerator_corrgrpo, moments.centered, atol=1e-9, rtol=1e-9)


def test_scale_diagnostics_leave_constant_groups_out_and_count_them() -> None:
    varying = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]).unsqueeze(0)
    constant = torch.full((3, 4, 2), 0.5)
    stats = diagnostics(torch.cat([varying, constant]))
    alone = diagnostics(varying)
    assert stats["grpo/scale_mean"] == pytest.approx(alone["grpo/scale_mean"])
    assert stats["corrgrpo/scale_mean"] == pytest.approx(alone["corrgrpo/scale_mean"])
    assert stats["grpo/scale_mean"] < 10  # not 1/ε = 10000
    assert stats["constant_group_frac"] == pytest.approx(3 / 4) and alone["constant_group_frac"] == 0.0
    everything_constant = diagnostics(constant)
    assert math.isnan(everything_constant["grpo/scale_mean"]) and math.isnan(
        everything_constant["corrgrpo/scale_mean"]
    )
    assert everything_constant["constant_group_frac"] == 1.0


def authors_corrgrpo(r: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The authors' CorrGRPO (their verl fork's grpo_covariance_coefficient) from its formula, in r's dtype:

    A_g = (R_g − mean R) / sqrt(max(Σ_kl C_kl, 0) + ε), C the K×K correlation matrix of the weighted
    components, a component's row and column 0 where its variance is exactly 0, Σ C = 0 for one rollout.
    """
    advantages = torch.zeros(r.shape[:2], dtype=r.dtype)
    for b, group in enumerate(r):
        centered = group - group.mean(dim=0)
        total = centered.sum(dim=1)
        coefficient_sum = torch.zeros((), dtype=r.dtype)
        if group.shape[0] > 1:
            covariance = centered.T @ centered / (group.shape[0] - 1)
            variance = covariance.diagonal()
            inverse_std = torch.where(variance > 0, variance.rsqrt(), torch.zeros_like(variance))
            coefficient_sum = (covariance * torch.outer(inverse_std, inverse_std)).sum().clamp(min=0)
        advantages[b] = total / (coefficient_sum + eps).sqrt()
    return advantages


@FAST
@given(reward_tensors(), st.data())
def test_corrgrpo_equals_the_authors_estimator(r: torch.Tensor, data: st.DataObject) -> None:
    """Every region these tensors reach, Σρ ≈ 0 included (with G = 2 any two varying components have ρ = ±1).

    Left out: a component with 0 < std <= ZERO_VAR_TOL · max(1, |mean|) (a tiny weight makes one), the one
    documented difference (test_a_float32_constant_is_the_one_documented_difference).
    """
    weights = torch.tensor(data.draw(st.lists(st.floats(-2, 2), min_size=r.shape[-1], max_size=r.shape[-1])))
    x = r.double()
    weighted = x * weights.double()
    std, mean = weighted.std(dim=1), weighted.mean(dim=1)
    assume(((std == 0) | (std > ZERO_VAR_TOL * mean.abs().clamp(min=1))).all())  # not the documented region
    torch.testing.assert_close(corrgrpo(x, weights), authors_corrgrpo(weighted), atol=1e-9, rtol=1e-9)


def anti_correlated(groups: int, size: int, seed: int) -> torch.Tensor:
    """[groups, size, 2]: r1 binary in half the groups, uniform in the rest; r2 = 2(1 − r1): Σρ = 0, R = 2 −
    r1."""
    generator = torch.Generator().manual_seed(seed)
    r1 = torch.rand(groups, size, generator=generator, dtype=torch.float64)
    r1[: groups // 2] = (r1[: groups // 2] > 0.5).double()
    r1[: groups // 2, 0], r1[: groups // 2, 1] = 0.0, 1.0  # every binary group varies
    return torch.stack([r1, 2 * (1 - r1)], dim=-1)


def test_anti_correlated_components_equal_the_authors_bounded_by_sqrt_eps() -> None:
    """The paper's hazard: ε under the root bounds |A| at |R − mean R| / 1e-3, as theirs (1e-4 beside it:
    10×)."""
    r = anti_correlated(64, 8, seed=0)
    assert group_moments(r).sum_rho.abs().max() < 1e-12
    torch.testing.assert_close(corrgrpo(r), authors_corrgrpo(r), atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(corrgrpo(r.float()).double(), authors_corrgrpo(r), atol=1e-3, rtol=1e-5)
    issue_example = torch.tensor([[0.0] + [1.0] * 7]).unsqueeze(-1)
    issue_example = torch.cat([issue_example, 2 * (1 - issue_example)], dim=-1)
    torch.testing.assert_close(
        corrgrpo(issue_example)[0, :2], torch.tensor([875.0, -125.0]), atol=1e-3, rtol=1e-5
    )


def test_a_float32_constant_is_the_one_documented_difference() -> None:
    """A float32 0.3 in a group of 6 has variance ~5e-15 in their formula: theirs counts the noise, ours
    not."""
    x = torch.arange(6, dtype=torch.float32)
    r = torch.stack([x, torch.full((6,), 0.3)], dim=-1).unsqueeze(0)
    ours, theirs = corrgrpo(r), authors_corrgrpo(r)
    torch.testing.assert_close(ours, corrgrpo(r[..., :1]))  # as if the constant were not there
    torch.testing.assert_close(ours, (x - x.mean()).unsqueeze(0) / math.sqrt(1 + CORRGRPO_EPS))
    torch.testing.assert_close(
        theirs, authors_corrgrpo(r.double()).float() / math.sqrt(2), atol=1e-2, rtol=1e-2
    )
    torch.testing.assert_close(corrgrpo(r, zero_var_tol=0.0), theirs, atol=1e-5, rtol=1e-5)
