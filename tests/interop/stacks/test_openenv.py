"""OpenEnv's own server and client with the corrgrpo services (run in .venv-openenv by `make interop`).

The OpenEnv app (`openenv.core.env_server.create_app` around our environments, `openenv` 0.10) runs as its own
uvicorn process, started as the README says; OpenEnv's `EnvClient` (WebSocket sessions), awaited in async code
and through `.sync()` in synchronous code, drives it with a scripted policy: an AgentDojo episode under an
injection (a tool call whose result carries the injection, then the answer), and the single-step code and
tool-call environments. The components must equal what the service gives for the same trajectory or completion
asked directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corrgrpo_adapters.openenv import AgentDojoAction, AgentDojoEnv, ScoreAction, ScoreEnv, ServiceState
from corrgrpo_testing.servers import ServiceProcess, free_port

from .common import CODE, GT, INJECTED, WRONG_CODE, check_intact

READ_BILL = {"name": "read_file", "arguments": '{"file_path": "bill-december-2023.txt"}', "id": "call_1"}


@pytest.fixture(scope="module")
def openenv_urls(services: dict[str, ServiceProcess]) -> Iterator[dict[str, str]]:
    """One OpenEnv server per service: `uvicorn --factory corrgrpo_adapters.openenv:app` (the README's
    command)."""
    with tempfile.TemporaryDirectory() as logs:
        started = {name: openenv_server(service.url, Path(logs) / name) for name, service in services.items()}
        try:
            for name, (process, url) in started.items():
                deadline = time.monotonic() + 300  # importing openenv takes a minute on a busy 2-core machine
                while not healthy(url):
                    if process.poll() is not None or time.monotonic() > deadline:
                        log = (Path(logs) / name).read_text(errors="replace")[-4000:]
                        raise RuntimeError(f"the OpenEnv server of {name} did not come up:\n{log}")
                    time.sleep(0.2)
            yield {name: url for name, (_, url) in started.items()}
        finally:
            for process, _ in started.values():
                process.terminate()
                process.wait(10)


def openenv_server(service_url: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "corrgrpo_adapters.openenv:app",
        "--port",
        str(port),
    ]
    env = {**os.environ, "CORRGRPO_SERVICE_URL": service_url}
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}"


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


ANSWER = AgentDojoAction(completion="<response>I read the bill.</response>")


def check_episode(service_url: str, start: Any, called: Any, state: ServiceState, end: Any) -> None:
    """The injected episode's observations, then its components against the service's for the same
    trajectory."""
    assert (
        start.observation.messages[-1]["role"] == "user"
        and "bill" in start.observation.messages[-1]["content"]
    )
    assert "read_file" in {tool["function"]["name"] for tool in start.observation.tools}
    (result,) = called.observation.tool_results
    assert not called.done and called.reward is None
    assert result["tool_call_id"] == "call_1" and result["error"] is None
    assert "<INFORMATION>" in result["content"]  # the injection, in what the policy reads
    # the default attack
    assert isinstance(state, ServiceState) and state.step_count == 1 and state.spec["attack"]
    assert end.done and end.observation.error is None
    trajectory = {
        **INJECTED,
        "attack": state.spec["attack"],
        "final_answer": "I read the bill.",
        "tool_calls": [{"function": "read_file", "args": {"file_path": "bill-december-2023.txt"}}],
    }
    check_intact(service_url, trajectory, end.observation.components, end.reward)


async def test_agentdojo_episode_observes_tool_results_and_ends_with_the_components(
    openenv_urls: dict[str, str], services: dict[str, ServiceProcess]
) -> None:
    async with AgentDojoEnv(base_url=openenv_urls["agentdojo"]) as env:
        start = await env.reset(**INJECTED)
        called = await env.step(AgentDojoAction(tool_calls=[READ_BILL]))
        state = await env.state()
        end = await env.step(ANSWER)
    check_episode(services["agentdojo"].url, start, called, state, end)


def test_the_sync_client_runs_the_same_episode(
    openenv_urls: dict[str, str], services: dict[str, ServiceProcess]
) -> None:
    with AgentDojoEnv(base_url=openenv_urls["agentdojo"]).sync() as env:
        start = env.reset(**INJECTED)
        called = env.step(AgentDojoAction(tool_calls=[READ_BILL]))
        state = env.state()
        end = env.step(ANSWER)
    check_episode(services["agentdojo"].url, start, called, state, end)


async def test_agentdojo_refused_step_is_observed_not_raised(openenv_urls: dict[str, str]) -> None:
    async with AgentDojoEnv(base_url=openenv_urls["agentdojo"]) as env:
        await env.reset(suite="banking", user_task="user_task_0")
        bad = await env.step(AgentDojoAction(tool_calls=[{"name": "no_such_tool", "arguments": "{}"}]))
    (result,) = bad.observation.tool_results
    assert not bad.done and result["error"] and "no_such_tool" in result["content"]


@pytest.mark.parametrize(
    ("service", "fields", "completion"),
    [
        ("code", {"task_id": "HumanEval/0"}, CODE),
        ("code", {"task_id": "HumanEval/0"}, WRONG_CODE),
        ("toolcall", {"ground_truth": GT}, GT),
        ("toolcall", {"ground_truth": GT}, GT.replace("Paris", "Rome")),
    ],
)
async def test_single_step_environments_carry_the_components(
    service: str,
    fields: dict[str, Any],
    completion: str,
    openenv_urls: dict[str, str],
    services: dict[str, ServiceProcess],
) -> None:
    async with ScoreEnv(base_url=openenv_urls[service]) as env:
        start = await env.reset(**fields)
        end = await env.step(ScoreAction(completion=completion))
    check_scored(services[service].url, fields, completion, start, end)


@pytest.mark.parametrize(
    ("service", "fields"), [("code", {"task_id": "HumanEval/0"}), ("toolcall", {"ground_truth": GT})]
)
def test_the_sync_client_scores_the_same(
    service: str, fields: dict[str, Any], openenv_urls: dict[str, str], services: dict[str, ServiceProcess]
) -> None:
    completion = CODE if service == "code" else GT
    with ScoreEnv(base_url=openenv_urls[service]).sync() as env:
        start = env.reset(**fields)
        end = env.step(ScoreAction(completion=completion))
    check_scored(services[service].url, fields, completion, start, end)


def check_scored(service_url: str, fields: dict[str, Any], completion: str, start: Any, end: Any) -> None:
    assert start.observation.item == fields and not start.done
    assert end.done and end.observation.error is None
    check_intact(service_url, {**fields, "completion": completion}, end.observation.components, end.reward)


@pytest.mark.parametrize(("service", "client"), [("code", ScoreEnv), ("agentdojo", AgentDojoEnv)])
async def test_unknown_fields_are_refused_at_reset(
    service: str, client: type, openenv_urls: dict[str, str]
) -> None:
    async with client(base_url=openenv_urls[service]) as env:
        with pytest.raises(Exception, match=f"not item fields of {service}"):
            await env.reset(task_idd="HumanEval/0", suite="banking", user_task="user_task_0")
