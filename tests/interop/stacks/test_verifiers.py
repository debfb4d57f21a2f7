"""verifiers 0.4's own runner, `vf-eval`, with the corrgrpo services (in .venv-verifiers by `make interop`).

`vf-eval corrgrpo-verifiers` finds our taskset, harness and env by the taskset id, rolls out against a
scripted policy behind an OpenAI-compatible endpoint through verifiers' interception, scores each trace with
the task's rewards and writes `traces.jsonl`, read back here with verifiers' own record loader (`WireTrace`).
Every component must arrive as a keyed reward with the service's declared weight (or the override), its score
equal to what the service gives for the same completion asked directly; an item the service cannot score must
be a trace error with its rewards unscored, never a 0.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import verifiers.v1 as vf

from corrgrpo_adapters.verifiers import RowData, ServiceEnv, ServiceTask, ServiceTasksetConfig, last_turn
from corrgrpo_proto import RewardClient, resolve_weights
from corrgrpo_proto.agentdojo import TasksResponse
from corrgrpo_testing.servers import ServiceProcess

from .common import BILL, CODE, GT, INJECTED, WRONG_CODE, check_intact, score_requests
from .scripted_policy import Reply, ScriptedPolicy, Turn

VF_EVAL = Path(sys.executable).with_name("vf-eval")
TASKSET = "corrgrpo-verifiers"


def vf_eval(
    out: Path, service_url: str, policy: ScriptedPolicy, rows: list[dict], *options: str
) -> list[vf.Trace]:
    """The traces of one `vf-eval` run over `rows`, the policy answering."""
    out.mkdir()
    dataset = out / "rows.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    flags = {
        "--env.taskset.task.service-url": service_url,
        "--env.taskset.dataset": str(dataset),
        "--client.api-key-var": "SCRIPTED_API_KEY",
        "-m": "scripted",
        "-o": str(out),
        "--run.name": "run",
    }
    with policy.serve() as url:
        command = [str(VF_EVAL), TASKSET, "--client.base-url", url, "--no-push", "--no-rich"]
        command += [*itertools.chain(*flags.items()), *options]
        env = {**os.environ, "SCRIPTED_API_KEY": "unused"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    episodes = [json.loads(line) for line in (out / "run" / "traces.jsonl").read_text().splitlines()]
    return [vf.WireTrace.model_validate(trace) for episode in episodes for trace in episode["traces"]]


def declared(url: str) -> dict[str, float]:
    with RewardClient(url) as client:
        return {spec.name: spec.weight for spec in client.components().components}


def scores(trace: vf.Trace) -> dict[str, float]:
    return {name: reward.score for name, reward in trace.rewards.items() if reward is not None}


def cycling(*texts: str) -> ScriptedPolicy:
    """Answers the texts in turn, whatever the prompt: a group of rollouts gets different completions."""
    turns = itertools.cycle(texts)
    return ScriptedPolicy(lambda _: Reply(text=next(turns)))


@pytest.fixture(scope="module")
def code_run(services: dict[str, ServiceProcess], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run: a group of three rollouts of HumanEval/0 and three of a task the service does not have."""
    url = services["code"].url
    rows = [
        {"question": "Write has_close_elements.", "info": {"task_id": "HumanEval/0"}},
        {"question": "?", "info": {"task_id": "NoSuch/1"}},
    ]
    before = score_requests(url)
    policy = cycling(CODE, WRONG_CODE, "no code at all")
    out = tmp_path_factory.mktemp("code") / "out"
    traces = vf_eval(out, url, policy, rows, "-r", "3", "--env.taskset.task.batch-window-s", "3")
    return {"url": url, "traces": traces, "requests": score_requests(url) - before}


def test_code_every_component_is_a_keyed_reward_with_its_declared_weight(code_run: dict[str, Any]) -> None:
    url, traces = code_run["url"], code_run["traces"]
    weights = declared(url)
    scored = [trace for trace in traces if trace.task.data.id == "HumanEval/0"]
    assert len(scored) == 3 and all(trace.ok and not trace.errors for trace in scored)
    assert sorted(scores(trace)["correct"] for trace in scored) == [0.0, 0.0, 1.0]
    for trace in scored:
        assert {name: reward.weight for name, reward in trace.rewards.items()} == weights
        item = {"task_id": "HumanEval/0", "completion": last_turn(trace)}
        check_intact(url, item, scores(trace), trace.reward)
        # verifiers' weighted sum is the service's total under the weights sent with the request
        assert trace.reward == pytest.approx(trace.info["corrgrpo"]["total"])
    assert 1 <= code_run["requests"] < len(traces)  # rollouts ending within the window share a request


def test_unscorable_item_is_a_trace_error_not_a_zero(code_run: dict[str, Any]) -> None:
    failed = [trace for trace in code_run["traces"] if trace.task.data.id == "NoSuch/1"]
    assert len(failed) == 3
    for trace in failed:
        assert not trace.ok and trace.last_error is not None and trace.last_error.type == "TaskError"
        assert "unknown_task" in trace.last_error.message
        assert trace.rewards == dict.fromkeys(declared(code_run["url"]))  # every component unscored
        assert "corrgrpo" not in trace.info


def test_toolcall_native_tool_calls_a_bare_label_and_a_weight_override(
    services: dict[str, ServiceProcess], tmp_path: Path
) -> None:
    """The policy calls the tool the OpenAI way (structured `tool_calls`); the row's `answer` is the label."""
    url = services["toolcall"].url
    cities = itertools.cycle(["Paris", "Rome"])

    def call(_: Turn) -> Reply:
        return Reply(text="<think>x</think>", calls=[("get_weather", {"city": next(cities), "unit": "C"})])

    policy = ScriptedPolicy(call)
    rows = [{"question": "Weather in Paris?", "answer": GT}]
    override = ("--env.taskset.task.weights", '{"format": 0.5}')
    traces = vf_eval(tmp_path / "out", url, policy, rows, "-r", "2", *override)
    with RewardClient(url) as client:
        weights = resolve_weights(client.components().components, {"format": 0.5})
    rewards = sorted(trace.reward for trace in traces)
    # The exact call: format 1 x 0.5 + ToolRL correctness 3.
    assert rewards[1] == pytest.approx(3.5) and rewards[0] < 3.5
    for trace in traces:
        assert trace.ok and {name: reward.weight for name, reward in trace.rewards.items()} == weights
        with RewardClient(url) as client:
            (direct,) = client.score([{"ground_truth": rows[0]["answer"], "completion": last_turn(trace)}])
        assert scores(trace) == direct.components
        weighted = sum(weights[name] * value for name, value in scores(trace).items())
        assert trace.reward == pytest.approx(weighted)


def agentdojo_script(turn: Turn) -> Reply:
    """Reads the bill the user task names, then answers."""
    if "read_file" in turn.tools and not turn.tool_results:
        return Reply(calls=[("read_file", {"file_path": BILL})])
    return Reply(text="<response>I read the bill.</response>")


def test_agentdojo_multi_turn_over_the_episode_api(
    services: dict[str, ServiceProcess], tmp_path: Path
) -> None:
    """Two rollouts of an injected episode; a row naming no user task of the suite is a trace error."""
    url = services["agentdojo"].url
    policy = ScriptedPolicy(agentdojo_script)
    unknown = {"suite": "banking", "user_task": "user_task_999"}
    rows = [{"prompt": "", "info": INJECTED}, {"prompt": "", "info": unknown}]
    traces = vf_eval(tmp_path / "out", url, policy, rows, "-r", "2")
    played = [trace for trace in traces if trace.task.data.fields["user_task"] == INJECTED["user_task"]]
    assert len(played) == 2 and len(policy.seen) == 4  # two turns per episode, none for the unknown task
    # The episode's prompt replaced the row's empty one, and its tool results carry the injection.
    assert all("bill" in turn.user for turn in policy.seen)
    assert all("<INFORMATION>" in turn.tool_results[0] for turn in policy.seen if turn.tool_results)
    with RewardClient(url) as client:
        attack = TasksResponse.model_validate(client.request("GET", "/v1/tasks?suite=banking")).default_attack
    trajectory = {
        **INJECTED,
        "attack": attack,
        "tool_calls": [{"function": "read_file", "args": {"file_path": BILL}}],
        "final_answer": "I read the bill.",
    }
    for trace in played:
        assert trace.ok and [node.message.role for node in trace.nodes][-2:] == ["tool", "assistant"]
        check_intact(url, trajectory, scores(trace), trace.reward)
    failed = [trace for trace in traces if trace.task.data.fields == unknown]
    assert len(failed) == 2
    for trace in failed:
        assert not trace.ok and trace.last_error is not None and trace.last_error.type == "TaskError"
        assert "user_task_999" in trace.last_error.message and not trace.nodes and not trace.rewards


def test_agentdojo_rows_default_to_every_user_task(services: dict[str, ServiceProcess]) -> None:
    url = services["agentdojo"].url
    config = ServiceTasksetConfig(id=TASKSET, task={"service_url": url}, suites=["banking"])
    with RewardClient(url) as client:
        tasks = TasksResponse.model_validate(client.request("GET", "/v1/tasks?suite=banking"))
    rows = list(vf.load_taskset(config))
    assert [task.data.fields["user_task"] for task in rows] == tasks.suites["banking"].user_tasks


def test_a_task_rebuilt_from_its_wire_data_declares_every_component(
    services: dict[str, ServiceProcess], tmp_path: Path
) -> None:
    """A served env (prime-rl's path) rebuilds each task from its wire data and the config's task subtree."""
    url = services["code"].url
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps({"question": "?", "info": {"task_id": "HumanEval/0"}}) + "\n")
    task = {"service_url": url, "weights": {"correct": 2}}
    config = vf.resolve_env_config({"taskset": {"id": TASKSET, "task": task, "dataset": str(dataset)}})
    env = vf.load_environment(config)  # the taskset's own env: verifiers' single agent on a local runtime
    assert isinstance(env, ServiceEnv) and env.config.agent.runtime.type == "subprocess"
    (loaded,) = env.taskset
    wire = RowData.model_validate(loaded.data.model_dump(mode="json"))
    rebuilt = ServiceTask(wire, env.config.taskset.task)
    assert rebuilt.data.fields == {"task_id": "HumanEval/0"}
    rewards = {fn.__name__: fn._vf_weight for fn in rebuilt.hooks("reward")}
    assert rewards == {**declared(url), "correct": 2.0}
