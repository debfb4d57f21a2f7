"""`report RUN_DIR`: the statistics it plots are the estimator's, on groups whose answer is known; it writes the PNGs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from corrgrpo_trainer.cli import main
from corrgrpo_trainer.report import steps_of
from corrgrpo_trainer.rundir import RolloutWriter, read_run

NAMES = ["a", "b", "c"]
# step 1: group 0 — a and b move together, c is constant; group 1 — a and b cancel: the total never varies
# step 2: group 0 — c is missing in one rollout (counted 0, as TRL sums it)
STEPS = {
    1: [[0, 0, 1], [1, 2, 1], [2, 4, 1], [3, 6, 1], [0, 3, 1], [1, 2, 1], [2, 1, 1], [3, 0, 1]],
    2: [[0, 1, 0], [1, 0, math.nan], [0, 0, 1], [1, 1, 0]],
}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    writer = RolloutWriter(tmp_path, NAMES, [1.0, 1.0, 1.0], "corrgrpo", group=4)
    for step, rewards in STEPS.items():
        rows = [{"prompt": f"p{i // 4}", "task": i // 4} for i in range(len(rewards))]
        writer.write(step, rows, ["x"] * len(rewards), rewards, [0.0] * len(rewards), {"stage/s": ["ok"] * len(rewards)})
    return tmp_path


def test_the_plotted_statistics_are_the_estimators(run_dir: Path) -> None:
    first, second = steps_of(read_run(run_dir))
    nan = math.nan
    torch.testing.assert_close(first.rho[0], torch.tensor([[1, 1, nan], [1, 1, nan], [nan, nan, nan]]).double(), equal_nan=True)
    assert first.rho[1][0, 1].item() == pytest.approx(-1)
    assert first.corrgrpo_scale[0].item() == pytest.approx(1 / (2 + 1e-4))  # Σρ = 4
    assert first.corrgrpo_scale[1].item() == pytest.approx(1e4)  # Σρ = 0 while a and b vary: the hazard, shown
    assert math.isnan(first.grpo_scale[1].item()) and first.constant.tolist() == [False, True]
    assert first.varying[:, 2].tolist() == [False, False]
    assert second.rewards[0, 1].isnan()[2] and second.varying[0].tolist() == [True, True, True]


def test_report_writes_the_pngs(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir), "--output-dir", str(run_dir / "plots")]) == 0
    written = capsys.readouterr().out.split()
    names = ["rewards.png", "scale.png", "correlations.png", "zero_variance.png"]
    assert written == [str(run_dir / "plots" / name) for name in names]
    for path in map(Path, written):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_a_folder_without_rollouts_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"python -m corrgrpo_trainer report: error: {tmp_path}: no run.json and rollouts.jsonl here; give the run "
        "directory of `train` or `run` (the config's run_dir, default trl.output_dir)\n"
    )
