"""`report RUN_DIR`: the statistics it plots are the estimator's, on groups whose answer is known; it writes
the PNGs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from corrgrpo_trainer.advantages import CORRGRPO_EPS
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.report import Shown, plot_correlations, plot_evaluation, plot_rewards, steps_of
from corrgrpo_trainer.rundir import RolloutWriter, read_run

NAMES = ["a", "b", "c"]
# step 1: group 0 — a and b move together, c is constant; group 1 — a and b cancel: the total never varies
# step 2: group 0 — c is missing in one rollout (counted 0, as TRL sums it)
STEPS = {
    1: [[0, 0, 1], [1, 2, 1], [2, 4, 1], [3, 6, 1], [0, 3, 1], [1, 2, 1], [2, 1, 1], [3, 0, 1]],
    2: [[0, 1, 0], [1, 0, math.nan], [0, 0, 1], [1, 1, 0]],
}


PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = ["rewards.png", "scale.png", "correlations.png", "zero_variance.png"]


def write_run(
    path: Path,
    steps: dict[int, list[list[float]]],
    weights: list[float] | None = None,
    names: list[str] = NAMES,
) -> Path:
    writer = RolloutWriter(path, names, weights or [1.0] * len(names), "corrgrpo", group=4)
    for step, rewards in steps.items():
        rows = [{"prompt": f"p{i // 4}", "task": i // 4} for i in range(len(rewards))]
        writer.write(
            step,
            rows,
            ["x"] * len(rewards),
            rewards,
            [0.0] * len(rewards),
            {"stage/s": ["ok"] * len(rewards)},
        )
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path, STEPS)


def test_the_plotted_statistics_are_the_estimators(run_dir: Path) -> None:
    first, second = steps_of(read_run(run_dir))
    nan = math.nan
    torch.testing.assert_close(
        first.rho[0], torch.tensor([[1, 1, nan], [1, 1, nan], [nan, nan, nan]]).double(), equal_nan=True
    )
    assert first.rho[1][0, 1].item() == pytest.approx(-1)
    assert first.corrgrpo_scale[0].item() == pytest.approx(1 / math.sqrt(4 + CORRGRPO_EPS))  # Σρ = 4
    # Σρ = 0 while a and b vary
    assert first.corrgrpo_scale[1].item() == pytest.approx(1 / math.sqrt(CORRGRPO_EPS))
    assert math.isnan(first.grpo_scale[1].item()) and first.constant.tolist() == [False, True]
    assert first.varying[:, 2].tolist() == [False, False]
    assert second.rewards[0, 1].isnan()[2] and second.varying[0].tolist() == [True, True, True]


def test_report_writes_the_pngs(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir), "--output-dir", str(run_dir / "plots")]) == 0
    written = capsys.readouterr().out.split()
    assert written == [str(run_dir / "plots" / name) for name in PLOTS]
    for path in map(Path, written):
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 10_000


def test_a_folder_without_rollouts_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"python -m corrgrpo_trainer report: error: {tmp_path}: no run.json and rollouts.jsonl here; give "
        f"the run "
        "directory of `train` or `run` (the config's run_dir, default trl.output_dir)\n"
    )


CONSTANT = {1: [[0.0, 0.0, 1.0]] * 8, 2: [[0.0, 0.0, 1.0]] * 8}  # no group ever varies: no scale anywhere


@pytest.mark.parametrize(
    "steps",
    [CONSTANT, {1: STEPS[1]}, {1: STEPS[1], 2: STEPS[2], 3: [[math.nan] * 3] * 4}],
    ids=["no-variance", "one-step", "cut-short-all-missing"],
)
def test_a_run_of_any_shape_gets_its_plots(tmp_path: Path, steps: dict[int, list[list[float]]]) -> None:
    run = write_run(tmp_path / "run", steps)
    assert main(["report", str(run)]) == 0  # no evaluation.json either
    assert sorted(path.name for path in run.glob("*.png")) == sorted(PLOTS)


def test_runs_are_overlaid_with_their_held_out_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    grpo, corrgrpo = (
        write_run(tmp_path / "grpo" / "run", STEPS),
        write_run(tmp_path / "corrgrpo" / "run", CONSTANT),
    )
    (grpo / "evaluation.json").write_text(json.dumps({"a": 0.5, "b": 0.0, "reward": 1.25}))
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(grpo), str(corrgrpo)]) == 0
    written = capsys.readouterr().out.split()
    assert written == [str(Path("report") / name) for name in [*PLOTS, "evaluation.png"]]
    assert all((tmp_path / path).read_bytes()[:8] == PNG for path in written)
    shown = [
        Shown(read_run(path), steps_of(read_run(path)), label)
        for path, label in ((grpo, "grpo/run"), (corrgrpo, "c"))
    ]
    legend = plot_rewards(shown).legends[0]
    assert [text.get_text() for text in legend.get_texts()] == ["grpo/run", "c"]


def test_the_held_out_plot_puts_each_runs_start_beside_its_trained_policy(tmp_path: Path) -> None:
    grpo, corrgrpo = write_run(tmp_path / "grpo", STEPS), write_run(tmp_path / "corrgrpo", STEPS)
    (grpo / "evaluation_start.json").write_text(json.dumps({"a": 0.25, "reward": 0.5}))
    (grpo / "evaluation.json").write_text(json.dumps({"a": 0.5, "reward": 1.25}))
    # an AgentDojo run's file also holds its episodes: not a bar
    (corrgrpo / "evaluation.json").write_text(json.dumps({"a": 0.75, "log": [{"episode": 1}]}))
    shown = [Shown(read_run(path), steps_of(read_run(path)), path.name) for path in (grpo, corrgrpo)]
    axis = plot_evaluation(shown).axes[0]
    assert [text.get_text() for text in axis.get_legend().get_texts()] == ["grpo start", "grpo", "corrgrpo"]
    assert [label.get_text() for label in axis.get_xticklabels()] == ["a", "reward"]
    heights = [[bar.get_height() for bar in bars] for bars in axis.containers]
    assert heights[:2] == [[0.25, 0.5], [0.5, 1.25]] and heights[2][0] == 0.75 and math.isnan(heights[2][1])
    assert [bars.patches[0].get_hatch() for bars in axis.containers] == ["//", None, None]


def test_correlations_show_full_names_zero_apart_from_never_varying_and_weight_0_apart(
    tmp_path: Path,
) -> None:
    names = ["param_values_long_name", "b", "c", "pass_rate"]
    # a and b uncorrelated (ρ = 0), c never varies, pass_rate trained at weight 0
    rewards = [[1.0, 1.0, 1.0, 0.0], [1.0, -1.0, 1.0, 1.0], [-1.0, 1.0, 1.0, 0.0], [-1.0, -1.0, 1.0, 1.0]]
    run = read_run(write_run(tmp_path, {1: rewards}, [1.0, 1.0, 1.0, 0.0], names))
    figure = plot_correlations([Shown(run, steps_of(run), "run")])
    axis = figure.axes[0]
    assert [label.get_text() for label in axis.get_xticklabels()] == names[:3]  # whole, and pass_rate apart
    cells = [text.get_text() for text in axis.texts]
    assert cells == ["1.00", "0.00", "n/a", "0.00", "1.00", "n/a", "n/a", "n/a", "n/a"]
    assert "weight 0, not in ρ: pass_rate" in figure.axes[-1].get_ylabel()
    titles = [axis.get_title() for axis in plot_rewards([Shown(run, steps_of(run), "run")]).axes]
    assert "pass_rate (weight 0: not trained)" in titles and "param_values_long_name (w=1)" in titles
