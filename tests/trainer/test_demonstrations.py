"""AgentDojo demonstrations for the SFT warm-up, against the real AgentDojo service and real ground truths.

A demonstration must be something the policy can learn to say and the RL loop then executes: each assistant
turn, rendered with the chat template the policy trains with, is parsed back by TRL into the same call (what
the RL loop runs), and the rendered text replayed through the service's own parser (`/step` with a raw
completion) gets the same tool results and scores utility 1 at `/finish`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from trl.chat_template_utils import add_response_schema, parse_response

from corrgrpo_proto.agentdojo import TasksResponse
from corrgrpo_testing.servers import ServiceProcess, start_service
from corrgrpo_trainer.agentdojo.demonstrations import Demonstration, build, is_held_out, split
from corrgrpo_trainer.agentdojo.tools import tool_calling_template
from corrgrpo_trainer.config import parse_config
from corrgrpo_trainer.tiny import build_tiny_tokenizer

TRAIN = ["user_task_0", "user_task_1", "user_task_3", "user_task_4"]  # user_task_0 is held out


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    with start_service("agentdojo") as process:
        yield process


@pytest.fixture(scope="module")
def demonstrations(service: ServiceProcess) -> list[Demonstration]:
    dataset = {"suites": ["banking"], "user_tasks": TRAIN, "injection_tasks": ["injection_task_0"]}
    raw = {"domain": "agentdojo", "services": {"agentdojo": {"url": service.url}}, "dataset": dataset}
    return build(parse_config(raw, "warmup"))


def test_the_split_is_the_authors_by_user_task(service: ServiceProcess) -> None:
    tasks = TasksResponse.model_validate(httpx.get(f"{service.url}/v1/tasks", timeout=300).json())
    halves = split(tasks)
    assert set(halves) == set(tasks.suites)
    for suite, known in tasks.suites.items():
        train, held_out = halves[suite]["train"], halves[suite]["held_out"]
        assert sorted(train + held_out) == sorted(known.user_tasks) and not set(train) & set(held_out)
    # as trainer/configs/paper/agentdojo.yaml lists the authors' held-out tasks
    listed = {"banking": [0, 14], "slack": [1, 2, 7, 8, 12, 15], "travel": [0, 7, 12, 13, 18]}
    listed["workspace"] = [1, 6, 7, 14, 16, 30, 31, 37]
    assert {suite: [f"user_task_{n}" for n in numbers] for suite, numbers in listed.items()} == {
        suite: halves[suite]["held_out"] for suite in listed
    }
    assert split(tasks) == halves  # deterministic


def test_only_training_user_tasks_are_demonstrated_without_and_under_attack(
    demonstrations: list[Demonstration],
) -> None:
    made = sorted((d.row["user_task"], d.row["injection_task"] or "") for d in demonstrations)
    expected = sorted((u, i) for u in TRAIN[1:] for i in ("", "injection_task_0"))
    assert is_held_out("banking", TRAIN[0]) and not any(is_held_out("banking", u) for u in TRAIN[1:])
    assert made == expected
    for d in demonstrations:
        assert d.components["utility"] == 1.0 and (
            d.components["security"] == 1.0 or not d.row["injection_task"]
        )
        roles = [m["role"] for m in d.messages]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant" and "tool" in roles
        assert d.messages[1]["content"].strip(), "the user task's prompt, as reset() gives it"
    attacked = [d for d in demonstrations if d.row["injection_task"]]
    assert any("<INFORMATION>" in m["content"] for d in attacked for m in d.messages if m["role"] == "tool")


def assistant_turns(tokenizer: Any, d: Demonstration) -> list[tuple[int, str, list[int]]]:
    """(message index, rendered text, the rendered prompt's ids) of each assistant turn, as the policy would
    write it."""
    turns = []
    for i, message in enumerate(d.messages):
        if message["role"] == "assistant":
            prefix = tokenizer.apply_chat_template(
                d.messages[:i], tools=d.tools, add_generation_prompt=True, tokenize=False
            )
            full = tokenizer.apply_chat_template(d.messages[: i + 1], tools=d.tools, tokenize=False)
            assert full.startswith(prefix)
            turns.append(
                (
                    i,
                    full[len(prefix) :].rstrip("\n"),
                    tokenizer(prefix, add_special_tokens=False)["input_ids"],
                )
            )
    return turns


def test_rendered_demonstrations_parse_back_to_their_calls_and_replay_to_utility_1(
    service: ServiceProcess, demonstrations: list[Demonstration]
) -> None:
    tokenizer = build_tiny_tokenizer()
    tool_calling_template(tokenizer)  # what sft() and the RL loop render AgentDojo chats with
    tokenizer = add_response_schema(tokenizer)  # how TRL's RL loop reads the policy's tool calls
    for d in demonstrations:
        spec = {
            k: d.row[k] for k in ("suite", "user_task", "injection_task", "attack") if d.row[k] is not None
        }
        episode = httpx.post(f"{service.url}/v1/episodes", json=spec, timeout=120).json()
        path = f"{service.url}/v1/episodes/{episode['episode_id']}"
        *calls, (_, answer, _) = assistant_turns(tokenizer, d)
        for i, text, prefix in calls:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            parsed = parse_response(tokenizer, ids, prefix=prefix, tools=d.tools)
            assert parsed["tool_calls"] == d.messages[i]["tool_calls"]
            step = httpx.post(f"{path}/step", json={"completion": text}, timeout=120).json()
            assert [(r["function"], r["content"], r["error"]) for r in step["results"]] == [
                (d.messages[i + 1]["name"], d.messages[i + 1]["content"], None)
            ]
        assert "tool_calls" not in parse_response(tokenizer, tokenizer(answer)["input_ids"], tools=d.tools)
        finished = httpx.post(f"{path}/finish", json={"completion": answer}, timeout=120).json()
        assert finished["components"] == d.components and d.components["utility"] == 1.0, (d.row, finished)


def test_sft_on_demonstrations_trains_the_assistant_turns_only(
    service: ServiceProcess, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from corrgrpo_trainer.sft import sft

    config = {
        "domain": "agentdojo",
        "model": "tiny",
        "services": {"agentdojo": {"url": service.url}},
        "dataset": {"suites": ["banking"], "user_tasks": ["user_task_1", "user_task_2"], "limit": 2},
        "trl": {
            "output_dir": str(tmp_path),
            "max_steps": 1,
            "max_length": 8192,
            "logging_steps": 1,
            "use_cpu": True,
            "report_to": "none",
        },
    }
    trainer = sft(parse_config(config, "warmup"))
    row = trainer.train_dataset[0]
    trained = trainer.processing_class.decode([label for label in row["labels"] if label != -100])
    assert "<tool_call>" in trained and "<|im_end|>" in trained
    # tool results and system: context only
    assert "<tool_response>" not in trained and "Emma Johnson" not in trained
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1
    assert "[sft] step 1/1" in capsys.readouterr().out
