"""`python -m corrgrpo_trainer report RUN_DIR [RUN_DIR ...]`: the kept rollouts of one run, or several
overlaid, as PNGs.

Everything is computed again from `rollouts.jsonl` with each run's weights (rundir.py), grouped as the run
grouped them, with the statistics of advantages.py, so a plot says what the estimator saw:

- rewards.png          each component's mean per step (one run: a band for its 25-75 % range), and the
                       weighted total; a component trained at weight 0 is drawn grey and titled so
- scale.png            CorrGRPO's scale 1 / sqrt(Σρ + ε) per group (one run: dots) and its mean per step,
                       beside GRPO's 1 / std R (log scale when anything varied)
- correlations.png     the mean within-group correlation matrix ρ of the trained components (weight 0 ones
                       are not in ρ): one run per window of steps, several runs one panel each; 0 is a white
                       cell with its number, a pair never both varying a grey cell with "n/a"
- zero_variance.png    per step: the share of groups whose total did not vary (advantage 0: nothing learned)
                       and, per trained component, the share in which it did not vary
- evaluation.png       the held-out evaluation of each run that has one: its starting weights
                       (evaluation_start.json, hatched) beside its trained policy (evaluation.json)

Runs overlaid (an ablation: GRPO, CorrGRPO, GDPO on the same seed) share the plots, one colour per run. A run
of any shape gets its plots: one step, no group varying, no evaluation, cut short. Groups are left out of a
statistic where it is undefined, as in `advantages.diagnostics`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .advantages import ZERO_VAR_TOL, corrgrpo_scale, group_moments
from .config import InputError
from .rundir import EVALUATION, START_EVALUATION, Run, read_run

EPS = 1e-4  # GRPO's ε
WINDOWS = 4  # correlation panels of one run at most


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


@dataclass(frozen=True)
class Shown:
    """A run as the plots show it: its steps, its label and the components it trained (weight ≠ 0)."""

    run: Run
    steps: list[Step]
    label: str

    @property
    def trained(self) -> list[int]:
        """The components in ρ: those of weight ≠ 0 (all of them in a run that trained none)."""
        return [k for k, weight in enumerate(self.run.weights) if weight != 0] or list(
            range(len(self.run.weights))
        )

    def evaluation(self, name: str = EVALUATION) -> dict[str, float] | None:
        path = self.run.file(name)
        try:
            return json.loads(path.read_text()) if path.is_file() else None
        except ValueError:
            return None


def steps_of(run: Run) -> list[Step]:
    """The run's rollouts grouped per step and group, in the order they were trained."""
    groups: dict[int, dict[int, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    for rollout in run.rollouts:
        values = [rollout["components"].get(name) for name in run.components]
        groups[rollout["step"]][rollout["group"]].append([float("nan") if v is None else v for v in values])
    return [
        step_stats(step, [groups[step][g] for g in sorted(groups[step])], run.weights)
        for step in sorted(groups)
    ]


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
        corrgrpo_scale=torch.where(has_pair & any_varying, 1 / corrgrpo_scale(moments.sum_rho), nan),
        grpo_scale=torch.where(varies, 1 / (moments.std_total + EPS), nan),
        rho=torch.where(both, rho, nan),
        constant=has_pair & ~varies,
        varying=moments.varying,
    )


def labels(paths: Sequence[Path]) -> list[str]:
    """Each run's folder name, with as many parent folders as tell them apart."""
    for depth in range(1, max(len(path.parts) for path in paths) + 1):
        names = ["/".join(path.parts[-depth:]) for path in paths]
        if len(set(names)) == len(names):
            return names
    return [str(path) for path in paths]


def report(run_dirs: str | Path | Sequence[str | Path], output_dir: str | Path | None = None) -> list[Path]:
    """Write the PNGs of the run (or the runs, overlaid) into `output_dir` (default: the run directory; for
    several runs, `report` under the working folder). Their paths."""
    try:
        import matplotlib
    except ImportError:
        raise InputError(
            "report needs matplotlib: pip install 'corrgrpo-trainer[examples]' (make install does)"
        ) from None
    matplotlib.use("Agg")  # files only, no display
    paths = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(path) for path in run_dirs]
    runs = [read_run(path) for path in paths]
    for run in runs:
        if not run.rollouts:
            raise InputError(
                f"{run.path}: rollouts.jsonl is empty (the run ended before its first step was scored)"
            )
    shown = [
        Shown(run, steps_of(run), label)
        for run, label in zip(runs, labels([r.path.resolve() for r in runs]), strict=True)
    ]
    out = Path(output_dir) if output_dir is not None else runs[0].path if len(runs) == 1 else Path("report")
    out.mkdir(parents=True, exist_ok=True)
    plots = {
        "rewards.png": plot_rewards,
        "scale.png": plot_scale,
        "correlations.png": plot_correlations,
        "zero_variance.png": plot_zero_variance,
    }
    if any(s.evaluation() for s in shown):
        plots["evaluation.png"] = plot_evaluation
    from matplotlib import pyplot

    written = []
    for name, plot in plots.items():
        figure = plot(shown)
        figure.suptitle(title(shown), fontsize=10)
        figure.savefig(out / name, dpi=110, bbox_inches="tight")
        pyplot.close(figure)  # several runs: many figures
        written.append(out / name)
    return written


def title(shown: list[Shown]) -> str:
    if len(shown) == 1:
        only = shown[0]
        run = only.run
        return f"{only.label}: {run.estimator}, {len(only.steps)} steps, groups of {run.num_generations}"
    return " vs ".join(f"{s.label} ({s.run.estimator}, {len(s.steps)} steps)" for s in shown)


def figure(columns: int = 1, rows: int = 1, width: float = 4.2, height: float = 3.2) -> tuple[Any, Any]:
    from matplotlib import pyplot, ticker

    fig, axes = pyplot.subplots(
        rows, columns, figsize=(width * columns, height * rows), squeeze=False, layout="constrained"
    )
    for axis in axes.flat:
        axis.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))  # steps
    return fig, axes.flatten()


def nanquantile(values: torch.Tensor, q: float) -> float:
    kept = values[~torch.isnan(values)]
    return torch.quantile(kept, q).item() if kept.numel() else float("nan")


def colour(index: int, shown: list[Shown]) -> str:
    return "C0" if len(shown) == 1 else f"C{index % 10}"


def plot_rewards(shown: list[Shown]) -> Any:
    names = [*dict.fromkeys(name for s in shown for name in s.run.components), "total (weighted)"]
    fig, axes = figure(columns=min(4, len(names)), rows=-(-len(names) // 4), width=3.3, height=2.6)
    for k, (name, axis) in enumerate(zip(names, axes, strict=False)):
        weights = set()
        for index, s in enumerate(shown):
            x = [step.step for step in s.steps]
            if k == len(names) - 1:
                per_step = [
                    total(step.rewards, torch.tensor(s.run.weights, dtype=torch.float64)) for step in s.steps
                ]
            elif name in s.run.components:
                column = s.run.components.index(name)
                weights.add(s.run.weights[column])
                per_step = [step.rewards[..., column].flatten() for step in s.steps]
            else:
                continue
            grey = k < len(names) - 1 and weights == {0.0}
            tint = "grey" if grey else colour(index, shown)
            if len(shown) == 1:
                low, high = [nanquantile(v, 0.25) for v in per_step], [nanquantile(v, 0.75) for v in per_step]
                axis.fill_between(x, low, high, alpha=0.25, color=tint)
            means = [torch.nanmean(v).item() for v in per_step]
            axis.plot(x, means, marker="o", markersize=3, color=tint, label=s.label)
        weight = ", ".join(f"{w:g}" for w in sorted(weights))
        suffix = " (weight 0: not trained)" if weights == {0.0} else f" (w={weight})" if weights else ""
        axis.set_title(name + suffix if k < len(names) - 1 else name, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        axis.tick_params(labelsize=7)
    for axis in axes[len(names) :]:
        axis.set_visible(False)
    if len(shown) > 1:
        fig.legend(
            *axes[0].get_legend_handles_labels(),
            loc="outside lower center",
            ncol=min(4, len(shown)),
            fontsize=8,
        )
    return fig


def total(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted totals of rollouts as TRL sums them (a missing component counts 0; all missing: NaN)."""
    totals = (rewards * weights).nansum(dim=-1)
    return torch.where(torch.isnan(rewards).all(dim=-1), float("nan"), totals).flatten()


def plot_scale(shown: list[Shown]) -> Any:
    fig, (axis,) = figure(width=6.4, height=3.6)
    scales = (("corrgrpo_scale", "CorrGRPO 1/√(Σρ+ε)", "-"), ("grpo_scale", "GRPO 1/std R", "--"))
    positive = False
    for index, s in enumerate(shown):
        for which, (attribute, name, style) in enumerate(scales):
            tint = f"C{which}" if len(shown) == 1 else colour(index, shown)
            if len(shown) == 1:
                for step in s.steps:
                    values = getattr(step, attribute)
                    kept = values[~torch.isnan(values)]
                    axis.scatter([step.step] * kept.numel(), kept.tolist(), s=9, alpha=0.35, color=tint)
            # NaN (a gap): none varied
            means = [torch.nanmean(getattr(step, attribute)).item() for step in s.steps]
            positive = positive or any(m > 0 for m in means)
            label = name if len(shown) == 1 else f"{s.label}: {name}"
            axis.plot(
                [step.step for step in s.steps], means, color=tint, linestyle=style, marker="o", label=label
            )
    if positive:
        axis.set_yscale("log")
        axis.set_ylabel("advantage scale per group (log)")
    else:
        axis.set_ylabel("advantage scale per group")
        axis.text(0.5, 0.5, "no group varied: no scale", transform=axis.transAxes, ha="center", va="center")
    axis.set_xlabel("step")
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def plot_correlations(shown: list[Shown]) -> Any:
    panels: list[tuple[Shown, list[Step], str]] = []
    for s in shown:
        count = min(WINDOWS, len(s.steps)) if len(shown) == 1 else 1
        for i in range(count):
            window = s.steps[i * len(s.steps) // count : (i + 1) * len(s.steps) // count]
            first, last = window[0].step, window[-1].step
            steps = f"step {first}" if first == last else f"steps {first}-{last}"
            panels.append((s, window, steps if len(shown) == 1 else f"{s.label}, {steps}"))
    size = 1.6 + 0.55 * max(len(s.trained) for s in shown)
    fig, axes = figure(columns=len(panels), width=size, height=size + 0.4)
    image = None
    for (s, window, name), axis in zip(panels, axes, strict=True):
        image = correlation_panel(axis, s, window)
        axis.set_title(name, fontsize=9)
    untrained = sorted({s.run.components[k] for s in shown for k, w in enumerate(s.run.weights) if w == 0})
    note = f"; weight 0, not in ρ: {', '.join(untrained)}" if untrained else ""
    fig.colorbar(
        image, ax=list(axes), shrink=0.8, label=f"mean within-group ρ (grey n/a: never both varying){note}"
    )
    return fig


def correlation_panel(axis: Any, s: Shown, window: list[Step]) -> Any:
    from matplotlib import colormaps

    trained = s.trained
    rho = torch.cat([step.rho for step in window])[:, trained][:, :, trained]
    defined = (~torch.isnan(rho)).sum(dim=0)
    mean = torch.where(defined > 0, torch.nan_to_num(rho).sum(dim=0) / defined.clamp(min=1), float("nan"))
    cmap = colormaps["RdBu_r"].with_extremes(bad="#bdbdbd")
    image = axis.imshow(mean.numpy(), vmin=-1, vmax=1, cmap=cmap)
    for row in range(mean.shape[0]):
        for column in range(mean.shape[1]):
            value = mean[row, column].item()
            axis.text(
                column,
                row,
                "n/a" if defined[row, column] == 0 else f"{value:.2f}",
                ha="center",
                va="center",
                fontsize=6,
            )
    names = [s.run.components[k] for k in trained]
    axis.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
    axis.set_yticks(range(len(names)), names, fontsize=7)
    return image


def plot_zero_variance(shown: list[Shown]) -> Any:
    fig, (axis,) = figure(width=6.4, height=3.6)
    for index, s in enumerate(shown):
        x = [step.step for step in s.steps]
        prefix = "" if len(shown) == 1 else f"{s.label}: "
        tint = "black" if len(shown) == 1 else colour(index, shown)
        totals = [step.constant.double().mean().item() for step in s.steps]
        axis.plot(x, totals, color=tint, linewidth=2.5, label=f"{prefix}total R (advantage 0)")
        if len(shown) > 1:
            continue  # runs overlaid: the total alone, one line each
        for k in s.trained:
            shares = [(~step.varying[:, k]).double().mean().item() for step in s.steps]
            name = s.run.components[k]
            # sizes: overlaps
            axis.plot(x, shares, linewidth=1, alpha=0.8, marker="o", markersize=7 - k % 4, label=name)
    axis.set_ylim(-0.03, 1.03)
    axis.set_xlabel("step")
    axis.set_ylabel("share of groups with zero variance")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def plot_evaluation(shown: list[Shown]) -> Any:
    bars = [  # (run index, label, values, hatch): each run's start, when evaluated, then its trained policy
        (index, label, values, hatch)
        for index, s in enumerate(shown)
        for label, values, hatch in [
            (f"{s.label} start", s.evaluation(START_EVALUATION), "//"),
            (s.label, s.evaluation() or {}, None),
        ]
        if values is not None
    ]
    metrics = list(dict.fromkeys(name for *_, values, _ in bars for name, v in values.items() if numeric(v)))
    fig, (axis,) = figure(width=max(4.0, 1.1 * len(metrics) * max(1, len(bars)) ** 0.5), height=3.4)
    width = 0.8 / len(bars)
    for slot, (index, label, values, hatch) in enumerate(bars):
        x = [m + (slot - (len(bars) - 1) / 2) * width for m in range(len(metrics))]
        heights = [values.get(name, float("nan")) for name in metrics]
        drawn = axis.bar(
            x,
            heights,
            width=width,
            color=colour(index, shown),
            alpha=0.45 if hatch else 1.0,
            hatch=hatch,
            label=label if values else f"{label} (none)",
        )
        axis.bar_label(drawn, fmt="%.3f", fontsize=6)
    axis.axhline(0, color="black", linewidth=0.6)
    axis.set_xticks(range(len(metrics)), metrics, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel("held-out mean (greedy)")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
