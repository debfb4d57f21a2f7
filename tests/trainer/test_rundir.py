"""A run directory as CorrGRPOTrainer leaves it: every rollout kept, the phases of each step shown,
TensorBoard events.

One 2-step run of the tiny policy against the live code service, beside a local reward that varies (the random
policy earns no code reward), so the advantages and correlations are not all 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset

from corrgrpo_proto import RewardClient
from corrgrpo_testing.servers import start_service
from corrgrpo_testing.tasks import humaneval_rows
from corrgrpo_trainer.advantages import corrgrpo
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.config_shape import Service
from corrgrpo_trainer.report import steps_of
from corrgrpo_trainer.rewards import completion_text, service_rewards
from corrgrpo_trainer.rundir import PROMPTS, ROLLOUTS, read_jsonl, read_run
from corrgrpo_trainer.tiny import build_tiny_policy
from corrgrpo_trainer.trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

pytestmark = pytest.mark.slow
ROWS = humaneval_rows(0, 2)  # chat prompt and the problem inline
STEPS, GROUP, BATCH = 2, 4, 8
LENGTH_WEIGHT = 0.5


def length(completions: list[Any], **_: Any) -> list[float]:
    """A reward the random policy's completions vary in."""
    return [len(completion_text(c)) / 10 for c in completions]


@dataclass
class TinyRun:
    path: Path
    url: str
    stdout: str
    weights: list[float]
    trainer: CorrGRPOTrainer


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyRun]:
    path = tmp_path_factory.mktemp("run")
    model, tokenizer = build_tiny_policy(path / "tiny-policy")
    with start_service("code") as service:
        columns, weights = service_rewards(
            {"code": Service(url=service.url, components=["format", "syntax"])}
        )
        args = CorrGRPOConfig(
            output_dir=str(path),
            use_cpu=True,
            report_to=["tensorboard"],
            max_steps=STEPS,
            per_device_train_batch_size=BATCH,
            num_generations=GROUP,
            max_completion_length=12,
            logging_steps=1,
            save_strategy="no",
            reward_weights=[*weights, LENGTH_WEIGHT],
            seed=0,
            dataloader_num_workers=0,
        )
        with contextlib.redirect_stdout(
            io.StringIO()
        ) as stdout:  # the phase lines go where stdout is at the start
            trainer = CorrGRPOTrainer(
                model=model,
                processing_class=tokenizer,
                reward_funcs=[*columns, length],
                args=args,
                train_dataset=Dataset.from_list(ROWS * 4),
            )
            trainer.train()
        yield TinyRun(path, service.url, stdout.getvalue(), [*weights, LENGTH_WEIGHT], trainer)


def test_every_rollout_is_kept_with_its_components_total_advantage_and_stage(tiny_run: TinyRun) -> None:
    run = read_run(tiny_run.path)
    assert run.components == ["format", "syntax", "length"] and run.weights == pytest.approx(tiny_run.weights)
    assert run.estimator == "corrgrpo" and run.num_generations == GROUP
    assert [r["step"] for r in run.rollouts] == [1] * BATCH + [2] * BATCH
    assert [r["group"] for r in run.rollouts] == [i // GROUP for i in range(BATCH)] * STEPS
    metrics = [e for e in tiny_run.trainer.state.log_history if "reward" in e]
    for step in (1, 2):
        rollouts = [r for r in run.rollouts if r["step"] == step]
        rewards = torch.tensor(
            [[r["components"][n] for n in run.components] for r in rollouts], dtype=torch.float32
        )
        expected = corrgrpo(rewards.view(-1, GROUP, 3), torch.tensor(run.weights)).flatten()
        torch.testing.assert_close(
            torch.tensor([r["advantage"] for r in rollouts]), expected, atol=1e-5, rtol=1e-5
        )
        assert expected.abs().sum() > 0  # the local reward varies: real advantages, not all 0
        for k, name in enumerate(run.components):  # the kept values are those TRL logged the means of
            assert metrics[step - 1][f"rewards/{name}/mean"] == pytest.approx(
                rewards[:, k].mean().item(), rel=1e-5
            )
        for r in rollouts:
            assert r["total"] == pytest.approx(
                sum(w * r["components"][n] for w, n in zip(run.weights, run.components, strict=True))
            )
    # the stage is the service's info.stage for that completion and row
    first = run.rollouts[0]
    row = run.prompts[first["prompt_id"]]
    item = {"completion": completion_text(first["completion"]), "problem": row["columns"]["problem"]}
    with RewardClient(tiny_run.url) as client:
        [result] = client.score([item])
    assert first["stage"] == {"code": result.info["stage"]} and isinstance(result.info["stage"], str)


def test_each_prompt_is_kept_once_with_the_row_the_service_needs(tiny_run: TinyRun) -> None:
    prompts = read_jsonl(tiny_run.path / PROMPTS)
    assert sorted(p["columns"]["problem"]["task_id"] for p in prompts) == ["HumanEval/0", "HumanEval/1"]
    assert {p["prompt_id"] for p in prompts} == {r["prompt_id"] for r in read_jsonl(tiny_run.path / ROLLOUTS)}


def test_each_step_prints_its_phases_and_times(tiny_run: TinyRun) -> None:
    lines = [
        line for line in tiny_run.stdout.splitlines() if line.startswith("[train] step") and " took " in line
    ]
    assert len(lines) == STEPS, tiny_run.stdout
    for step, line in enumerate(lines, 1):
        assert re.fullmatch(
            rf"\[train\] step {step}/{STEPS} took \d+\.\d s: generating \d+\.\d s \({BATCH} completions\), "
            rf".*",
            line,
        )
        phases = re.findall(
            r"(?:^|, )(generating|log-probs|scoring|updating) \d+\.\d s", line.split(": ", 1)[1]
        )
        assert phases in (
            ["generating", "scoring", "updating"],
            ["generating", "log-probs", "scoring", "updating"],
        ), line
        # items/s only when the service took measurable time (a step whose runs were all stored takes 0.0 s)
        assert re.search(
            rf"scoring \d+\.\d s \(length {BATCH} items in 0\.0 s, code {BATCH} items in \d+\.\d s(, "
            rf"\d+\.\d/s)?\)",
            line,
        )


def test_tensorboard_receives_the_corrgrpo_metrics(tiny_run: TinyRun) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [events] = list(tiny_run.path.rglob("events.out.tfevents.*"))  # <output_dir>/runs/<date>_<host>/
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    logged = [e for e in tiny_run.trainer.state.log_history if "reward" in e]
    for name in ("corrgrpo/scale_mean", "grpo/scale_mean", "advantages/abs_mean", "corrgrpo/share/length"):
        scalars = accumulator.Scalars(f"train/{name}")
        assert [s.step for s in scalars] == [1, 2]
        assert [s.value for s in scalars] == pytest.approx([e[name] for e in logged], rel=1e-5, nan_ok=True)


def test_rollouts_are_strict_json(tiny_run: TinyRun) -> None:
    for line in (tiny_run.path / ROLLOUTS).read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in rollouts.jsonl"))


def test_the_report_recomputes_what_the_trainer_logged(tiny_run: TinyRun) -> None:
    logged = [e for e in tiny_run.trainer.state.log_history if "reward" in e]
    for step, entry in zip(steps_of(read_run(tiny_run.path)), logged, strict=True):
        assert torch.nanmean(step.corrgrpo_scale).item() == pytest.approx(
            entry["corrgrpo/scale_mean"], rel=1e-4, nan_ok=True
        )
        assert torch.nanmean(step.grpo_scale).item() == pytest.approx(
            entry["grpo/scale_mean"], rel=1e-4, nan_ok=True
        )
        assert (~step.varying).double().mean().item() == pytest.approx(entry["corrgrpo/zero_var_frac"])
    assert main(["report", str(tiny_run.path)]) == 0
    assert all((tiny_run.path / name).stat().st_size > 10_000 for name in ("rewards.png", "correlations.png"))
