"""NeMo Gym 0.4's own rollout collection with the corrgrpo services (run in .venv-nemo-gym by `make interop`).

`ng_collect_rollouts` (NeMo Gym's CLI) posts the rows to NeMo Gym's agents (`non_executing_simple_agent` for
code and tool calls, `gymnasium_agent` for AgentDojo episodes), which call a scripted policy behind
`/v1/responses` and our resources servers (`corrgrpo_adapters.nemo_gym`), which call the real services. The
servers are NeMo Gym's own classes and apps, started without Ray (`nemo_gym_servers.py`). Every rollout must
carry `reward_components` equal to what the service gives for the same completion or trajectory asked
directly, each component as a top-level field too, and `reward` = the weighted total.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corrgrpo_adapters.nemo_gym import episode_rows
from corrgrpo_proto import RewardClient
from corrgrpo_proto.agentdojo import TasksResponse
from corrgrpo_testing.servers import ServiceProcess, free_port

from .common import BILL, CODE, GT, INJECTED, WRONG_CODE, check_intact
from .scripted_policy import Reply, ScriptedPolicy, Turn

HERE = Path(__file__).parent
CODE_ANSWERS = {"A": CODE, "B": WRONG_CODE, "C": "no code at all"}
CITIES = {"A": "Paris", "B": "Rome"}


def script(turn: Turn) -> Reply:
    """Code by the prompt's variant letter; a native function call for tool calls; AgentDojo: read the
    bill, answer."""
    variant = turn.user.rsplit(" ", 1)[-1]
    if "read_file" in turn.tools:
        if not turn.tool_results:
            return Reply(calls=[("read_file", {"file_path": BILL})])
        return Reply(text="<response>I read the bill.</response>")
    if turn.user.startswith("Weather"):
        return Reply(text="<think>x</think>", calls=[("get_weather", {"city": CITIES[variant], "unit": "C"})])
    return Reply(text=CODE_ANSWERS[variant])


def server(host: str, port: int, **settings: Any) -> dict[str, Any]:
    return {"host": host, "port": port, "entrypoint": "app.py", **settings}


def gym_config(services: dict[str, ServiceProcess], policy_url: str) -> dict[str, Any]:
    """What `ng_run "+config_paths=[...]"` would resolve from adapters/nemo_gym's configs, ports filled in."""
    host = "127.0.0.1"
    policy_port = int(policy_url.rsplit(":", 1)[1].split("/")[0])
    refs = {"model_server": {"type": "responses_api_models", "name": "policy_model"}}

    def agent(kind: str, resources: str, **extra: Any) -> dict[str, Any]:
        ref = {"resources_server": {"type": "resources_servers", "name": resources}, **refs}
        return {"responses_api_agents": {kind: server(host, free_port(), **ref, **extra)}}

    return {
        "head_server": {"host": host, "port": free_port()},
        "policy_model": {"responses_api_models": {"openai_model": server(host, policy_port)}},
        "corrgrpo_code": {
            "resources_servers": {
                "corrgrpo": server(host, free_port(), domain="coding", service_url=services["code"].url)
            }
        },
        "corrgrpo_toolcall": {
            "resources_servers": {
                "corrgrpo": server(host, free_port(), domain="agent", service_url=services["toolcall"].url)
            }
        },
        "corrgrpo_agentdojo": {
            "resources_servers": {
                "corrgrpo_agentdojo": server(
                    host, free_port(), domain="agent", service_url=services["agentdojo"].url
                )
            }
        },
        "code_agent": agent("non_executing_simple_agent", "corrgrpo_code"),
        "toolcall_agent": agent("non_executing_simple_agent", "corrgrpo_toolcall"),
        "agentdojo_agent": agent("gymnasium_agent", "corrgrpo_agentdojo", max_steps=5),
    }


@pytest.fixture(scope="module")
def policy() -> ScriptedPolicy:
    return ScriptedPolicy(script)


@pytest.fixture(scope="module")
def gym(
    services: dict[str, ServiceProcess], policy: ScriptedPolicy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("nemo_gym")
    with policy.serve() as url:
        config = gym_config(services, url)
        (folder / "config.json").write_text(json.dumps(config))
        log = (folder / "servers.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, str(HERE / "nemo_gym_servers.py"), str(folder / "config.json")],
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            assert process.stdout is not None and process.stdout.readline().strip() == b"ready", (
                folder / "servers.log"
            ).read_text()[-4000:]
            yield {"config": config, "folder": folder}
        finally:
            process.terminate()
            process.wait(10)
            log.close()


def collect(gym: dict[str, Any], rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """`ng_collect_rollouts` over the rows; the rollouts it wrote, in the rows' order."""
    folder, head = gym["folder"], gym["config"]["head_server"]
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    command = [
        str(Path(sys.executable).parent / "ng_collect_rollouts"),
        f"+head_server={{host:{head['host']},port:{head['port']}}}",
        f"+input_jsonl_fpath={folder / f'{name}.jsonl'}",
        f"+output_jsonl_fpath={folder / f'{name}-out.jsonl'}",
        "+upload_rollouts_to_wandb=false",
    ]
    done = subprocess.run(
        command,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "WANDB_MODE": "disabled"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = [json.loads(line) for line in (folder / f"{name}-out.jsonl").read_text().splitlines()]
    assert len(out) == len(rows)
    return out


def rollout_text(rollout: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in rollout["response"]["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def test_code_rollouts_carry_every_component(
    gym: dict[str, Any], services: dict[str, ServiceProcess]
) -> None:
    rows = [
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": f"Write has_close_elements, variant {v}"}]
            },
            "task_id": "HumanEval/0",
            "agent_ref": {"name": "code_agent"},
        }
        for v in CODE_ANSWERS
    ]
    rollouts = collect(gym, rows, "code")
    assert sorted(r["correct"] for r in rollouts) == [0.0, 0.0, 1.0]
    for rollout in rollouts:
        assert (
            rollout["mask_sample"] is False
            and rollout["failure_kind"] is None
            and rollout["failure_reason"] is None
        )
        # top level too
        assert all(rollout[name] == value for name, value in rollout["reward_components"].items())
        item = {"task_id": "HumanEval/0", "completion": rollout_text(rollout)}
        check_intact(services["code"].url, item, rollout["reward_components"], rollout["reward"])


def test_an_unscorable_item_is_masked_as_nemo_gym_0_7_names_it(gym: dict[str, Any]) -> None:
    """The service's fault, not the policy's: masked (left out of scores), never a 0 that reads as a bad
    answer."""
    prompt = {"input": [{"role": "user", "content": "Write has_close_elements, variant A"}]}
    rows = [{"responses_create_params": prompt, "task_id": "NoSuch/1", "agent_ref": {"name": "code_agent"}}]
    (rollout,) = collect(gym, rows, "unscorable")
    assert rollout["mask_sample"] is True and rollout["failure_kind"] == "verifier_error"
    assert "unknown_task" in rollout["failure_reason"] and rollout["reward_components"] == {}


def test_toolcall_native_function_calls(gym: dict[str, Any], services: dict[str, ServiceProcess]) -> None:
    rows = [
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": f"Weather in Paris? variant {v}"}]
            },
            "ground_truth": GT,
            "agent_ref": {"name": "toolcall_agent"},
        }
        for v in CITIES
    ]
    rollouts = collect(gym, rows, "toolcall")
    by_city = {
        json.loads(next(i for i in r["response"]["output"] if i["type"] == "function_call")["arguments"])[
            "city"
        ]: r
        for r in rollouts
    }
    assert by_city["Paris"]["reward"] == pytest.approx(4.0) and by_city["Rome"]["reward"] < 4.0
    for city, rollout in by_city.items():
        check_intact(
            services["toolcall"].url,
            {"ground_truth": GT, "completion": GT.replace("Paris", city)},
            rollout["reward_components"],
            rollout["reward"],
        )


def test_agentdojo_episode_multi_turn(
    gym: dict[str, Any], services: dict[str, ServiceProcess], policy: ScriptedPolicy
) -> None:
    url = services["agentdojo"].url
    (row,) = [
        r
        for r in episode_rows(url, ["banking"], injections=True)
        if {k: r.get(k) for k in INJECTED} == INJECTED
    ]
    seen = len(policy.seen)
    (rollout,) = collect(gym, [{**row, "agent_ref": {"name": "agentdojo_agent"}}], "agentdojo")
    turns = policy.seen[seen:]
    assert len(turns) == 2 and "bill" in turns[0].user  # the episode's prompt, observed at reset
    assert "<INFORMATION>" in turns[1].tool_results[0]  # the tool result, injection included
    assert (
        rollout["terminated"]
        and not rollout["info"]["mask_sample"]
        and rollout["info"]["failure_kind"] is None
    )
    with RewardClient(url) as client:
        attack = TasksResponse.model_validate(client.request("GET", "/v1/tasks?suite=banking")).default_attack
    trajectory = {
        **INJECTED,
        "attack": attack,
        "final_answer": "I read the bill.",
        "tool_calls": [{"function": "read_file", "args": {"file_path": BILL}}],
    }
    check_intact(url, trajectory, rollout["info"]["reward_components"], rollout["reward"])
