"""The paper recipes (`trainer/configs/paper/`): the authors' launcher settings, loadable, one tiny step each.

The launchers are HKUST-KnowComp/CorrGRPO's `corrgrpo-src/{toolcall_rl,code_rl,agent_security_rl}/run.sh`
(commit 3586915); LAUNCHERS restates their numbers. verl counts batches in prompts and multiplies its
mini-batch by `rollout.n`; TRL counts completions: a generation batch is prompts × n, an update mini × n.
"""

from __future__ import annotations

import hashlib
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from corrgrpo_code.declaration import COMPONENTS as CODE_COMPONENTS
from corrgrpo_testing.environment import require_shared_data
from corrgrpo_testing.servers import start_service
from corrgrpo_testing.tiny_runs import cpu_config
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.config import read_config
from corrgrpo_trainer.config_shape import AgentDojoRL, RLConfig
from corrgrpo_trainer.trl_trainer import CorrGRPOConfig

PAPER = Path(__file__).resolve().parents[2] / "trainer" / "configs" / "paper"
LAUNCHERS: dict[str, dict[str, Any]] = {
    "toolcall": {
        "model": "Qwen/Qwen2.5-3B-Instruct",
        "prompts": 128,
        "n": 4,
        "mini": 32,
        "kl": 0.0,
        "epochs": 15,
        "response": 2048,
    },
    "code": {
        "model": "Qwen/Qwen2.5-Coder-7B-Instruct",
        "prompts": 64,
        "n": 8,
        "mini": 32,
        "kl": 0.001,
        "epochs": 15,
        "response": 2048,
    },
    "agentdojo": {
        "model": "Qwen/Qwen2.5-3B-Instruct",
        "prompts": 16,
        "n": 8,
        "mini": 16,
        "kl": 0.001,
        "epochs": 7,
        "response": 8192,
    },
}
# The authors' (tests/code/test_parity.py); pass_rate (weight 0, partial credit) is ours, not in their recipe.
CODE_WEIGHTS = {c.name: c.weight for c in CODE_COMPONENTS if c.name != "pass_rate"}


def load(domain: str) -> RLConfig:
    return typing.cast(RLConfig, read_config(PAPER / f"{domain}.yaml"))


@pytest.mark.parametrize("domain", list(LAUNCHERS))
def test_a_recipe_carries_its_launchers_settings(domain: str) -> None:
    config, launcher = load(domain), LAUNCHERS[domain]
    assert config.domain == domain and list(config.services) == [domain]
    assert config.model == launcher["model"] and config.estimator == "corrgrpo"  # grpo_covariance_coefficient
    trl = CorrGRPOConfig(**config.trl, use_cpu=True, advantage_estimator=config.estimator)
    assert (trl.learning_rate, trl.beta, trl.num_train_epochs) == (1e-6, launcher["kl"], launcher["epochs"])
    assert trl.num_generations == launcher["n"] and trl.max_completion_length == launcher["response"]
    assert trl.generation_batch_size == launcher["prompts"] * launcher["n"]
    assert (
        trl.per_device_train_batch_size * trl.gradient_accumulation_steps == launcher["mini"] * launcher["n"]
    )
    assert (trl.temperature, trl.top_p, trl.lr_scheduler_type.value, trl.weight_decay) == (
        1.0,
        1.0,
        "constant",
        0.01,
    )


def test_code_weights_are_the_authors() -> None:
    assert load("code").services["code"].weights == CODE_WEIGHTS


def test_agentdojo_recipe_names_the_authors_held_out_user_tasks() -> None:
    """Their split: a user task is held out when sha256("<suite>:<task>")'s first 8 hex digits / 2^32 <
    0.2."""
    from agentdojo.task_suite.load_suites import get_suites

    text = (PAPER / "agentdojo.yaml").read_text()
    line = next(
        line for line in text.splitlines() if "banking" in line and "workspace" in line and ";" in line
    )
    listed = {
        suite: numbers.split() for suite, numbers in re.findall(r"([a-z]+)((?: \d+)+)", line.split("(")[0])
    }
    held_out = {
        name: [
            task.split("_")[-1]
            for task in suite.user_tasks
            if int(hashlib.sha256(f"{name}:{task}".encode()).hexdigest()[:8], 16) / 2**32 < 0.2
        ]
        for name, suite in get_suites("v1.2.2").items()
    }
    assert listed == {name: sorted(tasks, key=int) for name, tasks in held_out.items()}
    episodes = typing.cast(AgentDojoRL, load("agentdojo")).dataset
    assert (
        episodes.suites == sorted(held_out)
        and episodes.injection_tasks == "all"
        and not episodes.exclude_unearned
    )


def tiny_step(domain: str, tmp_path: Path, url: str, dataset: dict[str, Any] | None) -> dict[str, Any]:
    """One step of the tiny policy on the recipe with only its sizes shrunk to CPU scale."""
    sizes = {"generation_batch_size": 2, "max_completion_length": 8}
    config = cpu_config(
        f"{domain}.yaml",
        tmp_path / "out",
        batch=2,
        generations=2,
        folder=PAPER,
        **sizes | ({"max_tool_calling_iterations": 1} if domain == "agentdojo" else {}),
    )
    config["services"][domain]["url"] = url
    config["dataset"] = dataset or config["dataset"]
    (tmp_path / f"{domain}.yaml").write_text(yaml.safe_dump(config))
    assert (
        main(["train", "--config", str(tmp_path / f"{domain}.yaml"), "--model", "tiny", "--max-steps", "1"])
        == 0
    )
    [step] = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    return step


@pytest.mark.slow
@pytest.mark.parametrize(
    ("domain", "data", "limit"),
    [
        ("toolcall", "rlla_4k/test.parquet", 2),
        ("code", "leetcode/LeetCodeDataset-v0.2.0-train.jsonl.gz", 1),
        ("agentdojo", None, None),
    ],
)
def test_one_tiny_step_of_each_recipe(
    domain: str, data: str | None, limit: int | None, tmp_path: Path
) -> None:
    dataset = (
        {"path": str(require_shared_data(data)), "limit": limit}
        if data
        else {"suites": ["banking"], "user_tasks_per_suite": 1}
    )
    if domain == "agentdojo":
        dataset |= {"injection_tasks": ["injection_task_0"], "exclude_unearned": False}
    with start_service(domain, timeout_s=120) as service:
        step = tiny_step(domain, tmp_path, service.url, dataset)
    components = load(domain).services[domain].components
    assert components
    assert step["step"] == 1 and step["model/params"] < 100_000  # the tiny policy
    assert all(isinstance(step[f"rewards/{name}/mean"], float) for name in components)
    assert step["num_tokens"] > 0 and "corrgrpo/zero_var_frac" in step
