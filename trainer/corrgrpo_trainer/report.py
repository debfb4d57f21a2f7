"""`python -m corrgrpo_trainer report RUN_DIR`: the kept rollouts of a run as PNGs (matplotlib).

Everything is computed again from `rollouts.jsonl` with the run's weights (rundir.py), grouped as the run grouped them,
with the statistics of advantages.py, so a plot says what the estimator saw:

- rewards.png          each component's mean per step (a band: its 25-75 % range), and the weighted total
- scale.png            CorrGRPO's scale 1 / sqrt(Σρ) per group (dots) and its mean per step, beside GRPO's 1 / std R
- correlations.png     the mean within-group correlation matrix ρ of the components, per window of steps
- zero_variance.png    per step: the share of groups whose total did not vary (advantage 0: nothing learned) and,
                       per component, the share of groups in which it did not vary (ρ's row and column are 0)

Groups are left out of a statistic where it is undefined, as in `advantages.diagnostics`: the scales where nothing
varies, a correlation where either component is constant.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .advantages import ZERO_VAR_TOL, group_moments
from .config import InputError
from .rundir import Run, read_run

EPS = 1e-4  # the estimators' ε
WINDOWS = 4  # correlation panels at most


@dataclass(frozen=True)
class Step:
    """One generation's groups: rewards [B, G, K] (NaN = missing) and what the estimators computed of them."""

    step: int
    rewards: torch.Tensor
    corrgrpo_scale: torch.Tensor  # [B], NaN where no component varies
    grpo_scale: torch.Tensor  # [B], NaN where R does not vary
    rho: torch.Tensor  # [B, K, K], NaN where either component is constant
    constant: torch.Tensor  # [B] bool, R did not vary
    varying: torch.Tensor  # [B, K] bool


def steps_of(run: Run) -> list[Step]:
    """The run's rollouts grouped per step and group, in the order they were trained."""
    groups: dict[int, dict[int, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    for rollout in run.rollouts:
        values = [rollout["components"].get(name) for name in run.components]
        groups[rollout["step"]][rollout["group"]].append([float("nan") if v is None else v for v in values])
    return [step_stats(step, [groups[step][g] for g in sorted(groups[step])], run.weights) for step in sorted(groups)]


def step_stats(step: int, groups: list[list[list[float]]], weights: list[float]) -> Step:
    if len({len(group) for group in groups}) != 1:
        raise InputError(f"step {step}: groups of different sizes in rollouts.jsonl; was the file edited?")
    rewards = torch.tensor(groups, dtype=torch.float64)
    moments = group_moments(rewards, weights)
    has_pair = ~torch.isnan(moments.std_total)
    varies = moments.std_total > ZERO_VAR_TOL * moments.mean_total.abs().clamp(min=1.0)
    any_varying = moments.varying.any(dim=-1)
    rho = torch.einsum("bgk,bgl->bkl", moments.z, moments.z) / moments.dof.view(-1, 1, 1)
    both = moments.varying.unsqueeze(-1) & moments.varying.unsqueeze(-2)
    nan = torch.tensor(float("nan"), dtype=rewards.dtype)
    return Step(
        step=step,
        rewards=rewards,
        corrgrpo_scale=torch.where(has_pair & any_varying, 1 / (moments.sum_rho.sqrt() + EPS), nan),
        grpo_scale=torch.where(varies, 1 / (moments.std_total + EPS), nan),
        rho=torch.where(both, rho, nan),
        constant=has_pair & ~varies,
        varying=moments.varying,
    )


def report(run_dir: str | Path, output_dir: str | Path | None = None) -> list[Path]:
    """Write the PNGs of the run at `run_dir` into `output_dir` (default: the run directory); their paths."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("report needs matplotlib: pip install 'corrgrpo-trainer[examples]' (make install does)") from None
    matplotlib.use("Agg")  # files only, no display
    run = read_run(run_dir)
    steps = steps_of(run)
    if not steps:
        raise InputError(f"{run_dir}: rollouts.jsonl is empty (the run ended before its first step was scored)")
    out = Path(output_dir) if output_dir is not None else run.path
    out.mkdir(parents=True, exist_ok=True)
    title = f"{run.path.name}: {run.estimator}, {len(steps)} steps, groups of {run.num_generations}"
    plots = {
        "rewards.png": plot_rewards,
        "scale.png": plot_scale,
        "correlations.png": plot_correlations,
        "zero_variance.png": plot_zero_variance,
    }
    written = []
    for name, plot in plots.items():
        figure = plot(run, steps)
        figure.suptitle(title, fontsize=10)
        figure.savefig(out / name, dpi=110, bbox_inches="tight")
        written.append(out / name)
    return written


def figure(columns: int = 1, rows: int = 1, width: float = 4.2, height: float = 3.2) -> tuple[Any, Any]:
    from matplotlib import pyplot, ticker

    fig, axes = pyplot.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False, layout="constrained")
    for axis in axes.flat:
        axis.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))  # steps
    return fig, axes.flatten()


def nanquantile(values: torch.Tensor, q: float) -> float:
    kept = values[~torch.isnan(values)]
    return torch.quantile(kept, q).item() if kept.numel() else float("nan")


def plot_rewards(run: Run, steps: list[Step]) -> Any:
    names = [*run.components, "total (weighted)"]
    fig, axes = figure(columns=min(4, len(names)), rows=-(-len(names) // 4), width=3.3, height=2.6)
    x = [s.step for s in steps]
    weights = torch.tensor(run.weights, dtype=torch.float64)
    for k, (name, axis) in enumerate(zip(names, axes, strict=False)):
        if k < len(run.components):
            per_step = [s.rewards[..., k].flatten() for s in steps]
            label = f"{name} (w={run.weights[k]:g})"
        else:
            per_step = [total(s.rewards, weights) for s in steps]
            label = name
        means = [torch.nanmean(v).item() for v in per_step]
        axis.fill_between(x, [nanquantile(v, 0.25) for v in per_step], [nanquantile(v, 0.75) for v in per_step], alpha=0.25)
        axis.plot(x, means, marker="o", markersize=3)
        axis.set_title(label, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        axis.tick_params(labelsize=7)
    for axis in axes[len(names) :]:
        axis.set_visible(False)
    return fig


def total(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted totals of rollouts as TRL sums them (a missing component counts 0; all missing: NaN)."""
    totals = (rewards * weights).nansum(dim=-1)
    return torch.where(torch.isnan(rewards).all(dim=-1), float("nan"), totals).flatten()


def plot_scale(_run: Run, steps: list[Step]) -> Any:
    fig, (axis,) = figure(width=6.4, height=3.6)
    for attribute, label, color in (("corrgrpo_scale", "CorrGRPO 1/√Σρ", "C0"), ("grpo_scale", "GRPO 1/std R", "C1")):
        for s in steps:
            values = getattr(s, attribute)
            kept = values[~torch.isnan(values)]
            axis.scatter([s.step] * kept.numel(), kept.tolist(), s=9, alpha=0.35, color=color)
        means = [torch.nanmean(getattr(s, attribute)).item() for s in steps]  # NaN (a gap): no group varied
        axis.plot([s.step for s in steps], means, color=color, marker="o", label=label)
    axis.set_yscale("log")
    axis.set_xlabel("step")
    axis.set_ylabel("advantage scale per group (log)")
    axis.legend(fontsize=8)
    return fig


def plot_correlations(run: Run, steps: list[Step]) -> Any:
    count = min(WINDOWS, len(steps))
    windows = [steps[i * len(steps) // count : (i + 1) * len(steps) // count] for i in range(count)]
    fig, axes = figure(columns=count, width=3.4, height=3.3)
    image = None
    for window, axis in zip(windows, axes, strict=True):
        rho = torch.cat([s.rho for s in window])
        mean, defined = torch.nanmean(rho, dim=0), (~torch.isnan(rho)).sum(dim=0)
        image = axis.imshow(mean.numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
        for (row, column), value in cells(mean):
            if defined[row, column] > 0:
                axis.text(column, row, f"{value:.2f}", ha="center", va="center", fontsize=6)
        first, last = window[0].step, window[-1].step
        axis.set_title(f"step {first}" if first == last else f"steps {first}-{last}", fontsize=9)
        short = [name[:10] for name in run.components]
        axis.set_xticks(range(len(short)), short, rotation=90, fontsize=7)
        axis.set_yticks(range(len(short)), short if axis is axes[0] else [], fontsize=7)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="mean within-group ρ (blank: never both varying)")
    return fig


def cells(matrix: torch.Tensor) -> list[tuple[tuple[int, int], float]]:
    return [((row, column), matrix[row, column].item()) for row in range(matrix.shape[0]) for column in range(matrix.shape[1])]


def plot_zero_variance(run: Run, steps: list[Step]) -> Any:
    fig, (axis,) = figure(width=6.4, height=3.6)
    x = [s.step for s in steps]
    axis.plot(x, [s.constant.double().mean().item() for s in steps], color="black", linewidth=2.5, label="total R (advantage 0)")
    for k, name in enumerate(run.components):
        shares = [(~s.varying[:, k]).double().mean().item() for s in steps]
        axis.plot(x, shares, linewidth=1, alpha=0.8, marker="o", markersize=7 - k % 4, label=name)  # sizes tell overlaps
    axis.set_ylim(-0.03, 1.03)
    axis.set_xlabel("step")
    axis.set_ylabel("share of groups with zero variance")
    axis.legend(fontsize=7, ncol=2)
    return fig
