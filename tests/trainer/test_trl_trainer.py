"""CorrGRPOTrainer on CPU with the tiny policy: the advantages TRL trains on are the estimator's, in 1 and 2
processes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from corrgrpo_trainer.tiny import build_tiny_policy
from corrgrpo_trainer.trl_trainer import CorrGRPOConfig, check_trl_version

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("torchrun_corrgrpo", HERE / "torchrun_corrgrpo.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tiny-policy")
    build_tiny_policy(path)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["corrgrpo", "gdpo"])
def test_trainer_trains_on_the_estimators_advantages(
    tiny_policy: str, tmp_path: Path, estimator: str
) -> None:
    run.RECORDED.clear()
    trainer = run.build_trainer(tiny_policy, str(tmp_path), estimator)
    trainer.train()
    assert len(trainer.scored) == run.STEPS
    for step in range(run.STEPS):
        rewards = run.recorded_rewards(step)
        expected = run.expected_advantages(rewards, estimator)
        torch.testing.assert_close(trainer.scored[step], expected, atol=1e-6, rtol=1e-6)
        # the loss's batch, shuffled
        assert torch.equal(trainer.trained[step].sort().values, expected.sort().values)
        logs = trainer.state.log_history[step]
        for k, func in enumerate(run.REWARD_FUNCS):  # TRL's reward metrics still describe the rewards
            assert logs[f"rewards/{func.__name__}/mean"] == pytest.approx(
                torch.nanmean(rewards[:, k]).item(), rel=1e-5
            )
        assert logs["corrgrpo/scale_mean"] > 0 and logs["grpo/scale_mean"] > 0
        shares = [logs[f"grpo/var_share/{func.__name__}"] for func in run.REWARD_FUNCS]
        assert sum(shares) == pytest.approx(1, abs=1e-4)


@pytest.mark.slow
def test_two_processes_with_torchrun(tiny_policy: str, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    result = subprocess.run(
        [*command, str(HERE / "torchrun_corrgrpo.py"), tiny_policy, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "rank 0/2: advantages match over 2 steps" in result.stdout
    assert "rank 1/2: advantages match over 2 steps" in result.stdout


def test_config_rejects_what_it_cannot_honour(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="advantage_estimator must be one of"):
        CorrGRPOConfig(output_dir=str(tmp_path), advantage_estimator="ppo", use_cpu=True, report_to="none")
    with pytest.raises(ValueError, match="normalize_then_sum"):
        CorrGRPOConfig(
            output_dir=str(tmp_path),
            multi_objective_aggregation="normalize_then_sum",
            use_cpu=True,
            report_to="none",
        )
    with pytest.raises(ValueError, match="corrgrpo' only"):
        CorrGRPOConfig(
            output_dir=str(tmp_path),
            advantage_estimator="grpo",
            advantage_floor=0.1,
            use_cpu=True,
            report_to="none",
        )


def test_trl_version_guard() -> None:
    check_trl_version("1.16.0")
    for version in ("1.13.2", "1.17.0", "2.0.0"):
        with pytest.raises(ImportError, match=r"supports trl>=1.14,<1.17"):
            check_trl_version(version)


def test_the_known_library_warnings_are_off_once_the_trainer_is_imported() -> None:
    """Outside pytest (which resets warning filters per test): what a CLI run prints to stderr."""
    warn = (
        "import warnings, corrgrpo_trainer.trl_trainer as t\n"
        "warnings.warn(t.ENVIRONMENT_FACTORY_WARNING + ', which is an experimental feature.', UserWarning)\n"
        "warnings.warn('`gradient_checkpointing_enable` is deprecated', FutureWarning)\n"
        "warnings.warn('a warning of our own', UserWarning)\n"
    )
    stderr = subprocess.run([sys.executable, "-c", warn], capture_output=True, text=True, check=True).stderr
    assert "experimental feature" not in stderr and "is deprecated" not in stderr
    assert "a warning of our own" in stderr  # the filters are that narrow
