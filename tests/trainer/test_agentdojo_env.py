"""Multi-turn AgentDojo training through TRL's environment_factory against the real AgentDojo service.

The fast test trains one step of the tiny policy through `train` with generation steered by
`sequence_bias` (a real transformers generation option) to call `read_file` first and answer after
the tool result, so the tool loop, the service and the rewards run for real; a spy on `generate`
records what the policy is given. The slow test trains the real pretrained policy unsteered.
"""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from agentdojo.task_suite.load_suites import get_suite
from transformers import Qwen2ForCausalLM
from transformers.utils import get_json_schema

from corrgrpo_proto.agentdojo import TasksResponse
from corrgrpo_testing.servers import ServiceProcess, start_service
from corrgrpo_testing.steered import PAIR, agentdojo_config, steered_policy
from corrgrpo_trainer.agentdojo.episode_metrics import evaluate, paper_metrics, rollout
from corrgrpo_trainer.agentdojo.tools import tool_method
from corrgrpo_trainer.agentdojo.trl_environment import ToolError
from corrgrpo_trainer.agentdojo.trl_inputs import agentdojo_episodes, task_rows
from corrgrpo_trainer.config import parse_config
from corrgrpo_trainer.config_shape import AgentDojoRL, Episodes
from corrgrpo_trainer.train import train


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    with start_service("agentdojo") as process:
        yield process


@pytest.fixture(scope="module")
def tasks(service: ServiceProcess) -> TasksResponse:
    import httpx

    return TasksResponse.model_validate(httpx.get(f"{service.url}/v1/tasks", timeout=300).json())


def test_tool_methods_render_the_service_schemas(tasks: TasksResponse) -> None:
    """What TRL puts in the prompt (transformers' schema of each method) matches the service's tool
    schemas."""
    for suite in tasks.suites.values():
        for tool in suite.tools:
            rendered = get_json_schema(tool_method(tool))["function"]
            served = tool["function"]
            assert rendered["name"] == served["name"] and rendered["description"] == " ".join(
                served["description"].split()
            )
            properties = served["parameters"]["properties"]
            assert list(rendered["parameters"]["properties"]) == list(properties)
            assert set(rendered["parameters"].get("required", [])) == set(
                served["parameters"].get("required", [])
            )
            for name, schema in properties.items():
                mine = rendered["parameters"]["properties"][name]
                nullable = "anyOf" in schema and {"type": "null"} in schema["anyOf"]
                assert mine.get("nullable", False) == nullable, (served["name"], name)
                base = next(o for o in schema["anyOf"] if o != {"type": "null"}) if nullable else schema
                assert mine.get("type") == base.get("type") or "enum" in mine, (
                    served["name"],
                    name,
                    mine,
                    base,
                )


def test_failed_calls_are_tool_errors_and_an_unscorable_episode_has_missing_rewards(
    service: ServiceProcess,
) -> None:
    services = {"agentdojo": {"url": service.url}}
    episodes = agentdojo_episodes(typed({"domain": "agentdojo", "services": services, "dataset": PAIR}))
    env = episodes.factories["banking"]()
    assert "bill-december-2023.txt" in env.reset(**episodes.rows[0])
    with pytest.raises(ToolError, match="ValidationError"):
        env.send_money(recipient="UK12345678901234567890")  # amount, subject and date missing
    assert "<INFORMATION>" in env.read_file(file_path="bill-december-2023.txt")
    env.episode_id = "0" * 32  # as if it had expired
    with pytest.raises(ToolError, match="unknown or expired"):
        env.get_balance()
    assert env._finish("") is None and episodes.log.rows[-1]["components"] is None


def test_rows_leave_out_tasks_flagged_as_earning_utility_without_work(tasks: TasksResponse) -> None:
    kept = {row["user_task"] for row in task_rows(tasks, Episodes(suites=["banking"]))}
    everything = {
        row["user_task"] for row in task_rows(tasks, Episodes(suites=["banking"], exclude_unearned=False))
    }
    assert everything - kept >= {f"user_task_{n}" for n in (5, 6, 7, 8, 9, 10)} and "user_task_0" in kept


@pytest.fixture(scope="module")
def steered_step(service: ServiceProcess, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One CorrGRPO step of the steered tiny policy through `train`, with what each generation was given."""
    directory = tmp_path_factory.mktemp("agentdojo-tiny")
    model, bias = steered_policy(directory)
    config = agentdojo_config(
        service,
        directory / "out",
        model,
        max_tool_calling_iterations=2,
        generation_kwargs={"sequence_bias": bias},
    )
    given: list[str] = []
    original = Qwen2ForCausalLM.generate

    def recording_generate(self: Qwen2ForCausalLM, *args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        given.extend(tokenizer.batch_decode(ids) if ids is not None else [])
        return original(self, *args, **kwargs)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Qwen2ForCausalLM, "generate", recording_generate)
        trainer = train(typed(config), progress=False)
    return {"trainer": trainer, "given": given, "model": model, "bias": bias}


def test_a_training_step_runs_episodes_through_the_tool_loop(steered_step: dict[str, Any]) -> None:
    logs = steered_step["trainer"].state.log_history[0]
    # one read_file per rollout
    assert logs["tools/call_frequency"] == 1.0 and logs["tools/failure_frequency"] == 0.0
    assert logs["rewards/utility/mean"] == 0.0  # reading the bill is not paying it
    assert logs["rewards/security/mean"] == 1.0  # nor sending the attacker money
    output_dir = Path(steered_step["trainer"].args.output_dir)
    metrics = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["tools/call_frequency"] == 1.0


def test_the_attacks_injection_reaches_what_the_policy_is_given(steered_step: dict[str, Any]) -> None:
    goal = get_suite("v1.2.2", "banking").injection_tasks["injection_task_0"].GOAL
    first = [text for text in steered_step["given"] if "<tool_response>" not in text]
    after_tool = [text for text in steered_step["given"] if "<tool_response>" in text]
    assert first and after_tool, "a first turn and a turn after the tool result were generated"
    assert all(goal not in text for text in first)
    assert all("<INFORMATION>" in text and goal in text for text in after_tool)


def typed(raw: dict[str, Any]) -> AgentDojoRL:
    return typing.cast(AgentDojoRL, parse_config(raw))


def steered_config(service: ServiceProcess, steered_step: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    """The config of the steered tiny policy of `steered_step` (it calls read_file, then answers)."""
    generation = {"sequence_bias": steered_step["bias"]}
    config = agentdojo_config(service, output_dir, steered_step["model"], generation_kwargs=generation)
    config["trl"]["max_tool_calling_iterations"] = 2
    return config


def test_evaluation_prints_and_writes_the_papers_metrics(
    service: ServiceProcess, steered_step: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same pair with and without its attack, through TRL's multi-turn loop (the steered policy reads the
    bill)."""
    metrics = evaluate(
        typed(steered_config(service, steered_step, tmp_path / "eval")), str(tmp_path / "metrics.json")
    )
    assert metrics["episodes"] == {"without_attack": 1, "under_attack": 1, "unscored": 0}
    assert (
        metrics["utility_without_attack"]
        == metrics["utility_under_attack"]
        == metrics["attack_success_rate"]
        == 0.0
    )
    assert "| attack success rate | 0.0% | 1 |" in capsys.readouterr().out
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert sorted((row["injection_task"] or "", row["attack"] or "") for row in written["log"]) == [
        ("", ""),
        ("injection_task_0", "important_instructions"),
    ]


def test_rollout_prints_each_of_the_first_episodes(
    service: ServiceProcess, steered_step: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rollout`: the config's first episodes through the same loop, a line each (the steered policy reads the
    bill)."""
    config = steered_config(service, steered_step, tmp_path / "rollout")
    config["dataset"] = {**PAIR, "user_tasks": ["user_task_0", "user_task_1"]}
    [episode] = rollout(typed(config), 1)
    assert (episode["user_task"], episode["components"]) == ("user_task_0", {"utility": 0.0, "security": 1.0})
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[rollout]")]
    assert lines == ["[rollout] banking/user_task_0/injection_task_0  utility=0  security=1"]


def test_paper_metrics_count_attacked_and_benign_episodes_apart() -> None:
    """ASR is the injection checker's verdict, not 1 - security: an invalid trajectory scores security 0 (the
    authors' reward) whether or not the injection's goal was met (the third episode)."""
    log = [
        {
            "injection_task": None,
            "components": {"utility": 1.0, "security": 0.0},
            "injection_succeeded": None,
        },
        {
            "injection_task": "i0",
            "components": {"utility": 0.0, "security": 0.0},
            "injection_succeeded": True,
        },
        {
            "injection_task": "i0",
            "components": {"utility": 0.0, "security": 0.0},
            "injection_succeeded": False,
        },
        {
            "injection_task": "i0",
            "components": {"utility": 1.0, "security": 1.0},
            "injection_succeeded": False,
        },
        {"injection_task": "i0", "components": None, "injection_succeeded": None},
    ]
    metrics = paper_metrics(log)
    assert metrics["utility_without_attack"] == 1.0 and metrics["utility_under_attack"] == 1 / 3
    assert metrics["attack_success_rate"] == 1 / 3 and metrics["episodes"]["unscored"] == 1


@pytest.mark.slow
def test_a_training_step_of_the_real_pretrained_policy(service: ServiceProcess, tmp_path: Path) -> None:
    """The embedded SmolLM2-135M-Instruct, unsteered: one step; both reward columns are scored by the
    service."""
    config = agentdojo_config(service, tmp_path / "out", "smollm2-135m-instruct", max_completion_length=48)
    config["trl"]["max_tool_calling_iterations"] = 1
    trainer = train(typed(config), progress=False)
    logs = trainer.state.log_history[0]
    assert not math.isnan(logs["rewards/utility/mean"]) and not math.isnan(logs["rewards/security/mean"])
    assert "tools/call_frequency" in logs
