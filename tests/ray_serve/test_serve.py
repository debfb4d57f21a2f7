"""The services as Ray Serve deployments on a real two-node cluster (conftest.py): every declared service
scores, a batch spreads over replicas on both nodes, a replica SIGKILLed mid-batch costs the client retries
and nothing else, the code deployment grows under load and shrinks after it, and Serve scores as
`corrgrpo_devtools up` does.

Run in order on one deployment (the package-scoped fixture).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from corrgrpo_common import declared
from corrgrpo_common.ray_serve import NODE_HEADER, PROXY_OWNED, REPLICA_HEADER
from corrgrpo_proto import ItemResult, RewardClient
from corrgrpo_testing.servers import free_port, wait_healthy

from .cluster import TOKEN, Deployed

SCALE_TIMEOUT_S = (
    180  # each way: Serve's autoscaler decides in seconds, a code replica starts in tens of them
)
LOAD_CLIENTS = 6  # concurrent requests while scaling up: three per replica, target 1
AUTHORIZATION = {"Authorization": f"Bearer {TOKEN}"}


class Recorder(httpx.HTTPTransport):
    """The client's transport, noting which node and replica answered each request and each failed attempt."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: list[tuple[str, str]] = []
        self.failed: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.TransportError as error:
            self.failed.append(type(error).__name__)
            raise
        if response.status_code >= 500:
            self.failed.append(str(response.status_code))
        else:
            self.answered.append((response.headers[NODE_HEADER], response.headers[REPLICA_HEADER]))
        return response


def add_item(item_id: str, *, right: bool, seconds: float = 0.0) -> dict[str, Any]:
    """An inline stdin `a + b` problem whose completion is its own program (no run shared with another item):
    right or off by one, each of its two cases' runs sleeping `seconds` so that a request stays in flight.
    No reference, so no timing runs: these tests are about the replicas (test_hostile.py times runs)."""
    body = "a + b" if right else "a + b + 1"
    code = f"import time\n\ntime.sleep({seconds})  # {item_id}\n"
    code += f"a, b = map(int, input().split())\nprint({body})\n"
    cases = [{"input": "1 2\n", "output": "3\n"}, {"input": "-4 4\n", "output": "0\n"}]
    problem = {"task_id": "ray-add", "stdin_cases": cases}
    return {"id": item_id, "completion": f"```python\n{code}```", "problem": problem}


def correct(result: ItemResult) -> bool:
    """Whether a scored `add_item` passed its tests; fails the test on an item error."""
    assert result.error is None and result.components is not None, result.error
    return result.components["correct"] == 1.0


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until `condition()` held; AssertionError naming `what` after `timeout_s`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if condition():
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n[ray-serve] {line}", flush=True)


def load() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


@pytest.mark.parametrize("name", list(declared()))
def test_every_declared_service_scores_through_serve(deployed: Deployed, name: str) -> None:
    url = f"{deployed.url}/{name}"
    ready = httpx.get(f"{url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.headers[NODE_HEADER] in deployed.nodes
    # our connection guards do not run under Serve: /readyz names what its proxy does instead
    assert ready.json()["checks"]["connections"] == PROXY_OWNED, ready.json()
    with RewardClient(url, token=TOKEN) as client:
        (result,) = client.score([declared()[name].example(None)])
        assert result.error is None, result.error
        assert set(result.components or {}) == {spec.name for spec in client.components().components}


def test_openrlhf_reaches_a_service_under_its_serve_prefix(deployed: Deployed) -> None:
    """OpenRLHF's `--reward.remote_url http://<node>:8000/toolcall/v1/openrlhf`: the totals of `/v1/score`."""
    url, tool_call = f"{deployed.url}/toolcall", declared()["toolcall"].example(None)["completion"]
    body = {
        "query": [f"prompt{tool_call}", "prompt<think>x</think>"],
        "prompts": ["prompt"] * 2,
        "labels": [tool_call] * 2,
    }
    answer = httpx.post(f"{url}/v1/openrlhf", json=body, headers=AUTHORIZATION, timeout=60)
    assert answer.status_code == 200, answer.text
    with RewardClient(url, token=TOKEN) as client:
        scored = client.score(
            [{"completion": query, "ground_truth": tool_call} for query in (tool_call, "<think>x</think>")]
        )
    assert answer.json()["rewards"] == [result.total for result in scored]
    assert scored[0].total != scored[1].total


def test_a_batch_is_scored_by_replicas_on_both_nodes(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    report(capsys, f"deployed the three services in {deployed.deploy_s:.1f} s ({load()})")
    replicas = deployed.replicas("code")
    assert {replica["node_id"] for replica in replicas} == deployed.nodes, (
        "Serve spreads a deployment's replicas"
    )
    run = uuid.uuid4().hex
    items = [add_item(f"{run}-{index}", right=index % 2 == 0, seconds=0.1) for index in range(32)]
    recorder = Recorder()
    client = RewardClient(
        f"{deployed.url}/code",
        chunk_size=2,
        max_concurrency=4,
        transport=recorder,
        token=TOKEN,
    )
    with client:
        results = client.score(items)
    assert [correct(result) for result in results] == [index % 2 == 0 for index in range(32)]
    assert {node for node, _ in recorder.answered} == deployed.nodes, recorder.answered
    assert (
        len({replica for _, replica in recorder.answered}) >= 2
    )  # (a third may have joined: the test's target is 1)


def test_a_replica_killed_mid_batch_loses_nothing(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    run, count = uuid.uuid4().hex, 48
    items = [add_item(f"{run}-{index}", right=index % 3 != 0, seconds=0.25) for index in range(count)]
    recorder = Recorder()
    victim = deployed.replicas("code")[0]
    client = RewardClient(
        f"{deployed.url}/code",
        chunk_size=4,
        max_concurrency=4,
        transport=recorder,
        token=TOKEN,
    )
    with client, ThreadPoolExecutor(1) as pool:
        batch = pool.submit(client.score, items)
        wait_until(lambda: len(recorder.answered) >= 2, 120, "two chunks scored before the kill")
        os.kill(victim["pid"], signal.SIGKILL)
        results = batch.result(timeout=300)
    assert [result.id for result in results] == [item["id"] for item in items], (
        "every item answered, in order"
    )
    assert [correct(result) for result in results] == [index % 3 != 0 for index in range(count)]
    assert recorder.failed, "the kill hit requests in flight, which the client retried"
    report(
        capsys,
        f"replica killed mid-batch: {count}/{count} items scored, {len(recorder.failed)} attempts retried",
    )
    seconds = wait_until(
        lambda: len(pids := {r["pid"] for r in deployed.replicas("code")}) == 2 and victim["pid"] not in pids,
        SCALE_TIMEOUT_S,
        "the dead replica replaced",
    )
    report(capsys, f"dead replica replaced {seconds:.1f} s after the batch ({load()})")


def test_replicas_added_under_load_and_removed_after(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    run, stop, scored, errors = uuid.uuid4().hex, threading.Event(), [0], []

    def client_loop(number: int) -> None:
        with RewardClient(f"{deployed.url}/code", token=TOKEN) as client:
            request = 0
            while not stop.is_set():
                items = [
                    add_item(f"{run}-{number}-{request}-{index}", right=True, seconds=0.25)
                    for index in range(2)
                ]
                results = client.score(items)
                errors.extend(result.error for result in results if result.error is not None)
                scored[0] += len(results)
                request += 1

    wait_until(
        lambda: len(deployed.replicas("code")) == 2, SCALE_TIMEOUT_S, "two code replicas before the load"
    )
    with ThreadPoolExecutor(LOAD_CLIENTS) as pool:
        clients = [pool.submit(client_loop, number) for number in range(LOAD_CLIENTS)]
        try:
            up = wait_until(
                lambda: len(deployed.replicas("code")) == 3, SCALE_TIMEOUT_S, "a third replica under load"
            )
        finally:
            stop.set()
            stopped = time.monotonic()
        for client in clients:
            client.result(timeout=300)  # each finishes the request it has in flight
    wait_until(lambda: len(deployed.replicas("code")) == 2, SCALE_TIMEOUT_S, "back to two replicas after it")
    down = time.monotonic() - stopped
    assert errors == [] and scored[0] > 0
    report(
        capsys,
        f"code replicas 2 -> 3 after {up:.1f} s of {LOAD_CLIENTS} clients ({scored[0]} items scored, none",
    )
    report(capsys, f"failed), back to 2 {down:.1f} s after the load stopped ({load()})")


@contextmanager
def local_service(name: str) -> Iterator[str]:
    """`python -m corrgrpo_devtools up NAME` on a free port: the service as a local process."""
    port = free_port()
    command = [sys.executable, "-m", "corrgrpo_devtools", "up", name, "--port", f"{name}={port}"]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, 120)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def timed_score(url: str, items: list[dict[str, Any]]) -> tuple[list[ItemResult], float]:
    with RewardClient(url, token=TOKEN) as client:
        client.score(items[:10])  # connections and first-call costs out of the timing
        start = time.perf_counter()
        results = client.score(items)
        return results, len(items) / (time.perf_counter() - start)


def test_serve_scores_as_the_local_process_does(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    example = declared()["toolcall"].example
    cities = ["Paris", "Oslo", "Lima", "Rome"]
    items = [
        example(example(None)["completion"].replace("Paris", cities[index % 4])) for index in range(4000)
    ]
    with local_service("toolcall") as url:
        local, local_rate = timed_score(url, items)
    served, served_rate = timed_score(f"{deployed.url}/toolcall", items)
    assert [result.components for result in served] == [result.components for result in local]
    assert (
        len({tuple(sorted((result.components or {}).items())) for result in served}) == 2
    )  # Paris right, rest off
    report(
        capsys,
        f"toolcall, {len(items)} items, chunks of 256: Serve (2 replicas) {served_rate:.0f} items/s, "
        f"`corrgrpo_devtools up` {local_rate:.0f} items/s, ratio {served_rate / local_rate:.2f} ({load()})",
    )
