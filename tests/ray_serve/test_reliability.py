"""The reliability suite's cases that apply through Serve's proxy, each service under its route prefix with
the token: bad input (corrgrpo_testing.bad_input, as tests/reliability/test_bad_input.py runs it on the
service process) gets a clear 4xx or a per-item result, never a 5xx; a client that leaves ends its runs.
The body limit holds at the replica (conftest.py sets the nodes' `CORRGRPO_MAX_BODY_BYTES` to BODY_LIMIT);
Serve's proxy reads a whole body before the replica sees it. The connection limits of our server (slow
clients, framing, refusal before the body: tests/reliability) are the proxy's under Serve.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from corrgrpo_common import declared
from corrgrpo_testing.bad_input import (
    check_garbage_completions,
    check_hostile_bodies,
    check_schema_violations,
)
from corrgrpo_testing.shape_checks import Shape, busy_worker

from .cluster import TOKEN, Deployed

AUTHORIZATION = {"Authorization": f"Bearer {TOKEN}"}
SLEEPER = "```python\nimport time\n\ndef add(a, b):\n    time.sleep(60)\n    return a + b\n```"
"""A run that sleeps until its 10 s wall limit (the shipped `CORRGRPO_CODE_WALL_S`) unless it is ended."""


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120) as client:
        yield client


@pytest.mark.parametrize("name", list(declared()))
def test_hostile_bodies_get_a_4xx_error_body(deployed: Deployed, http: httpx.Client, name: str) -> None:
    check_hostile_bodies(http, f"{deployed.url}/{name}", AUTHORIZATION)


@pytest.mark.parametrize("name", list(declared()))
def test_schema_violations_are_422_naming_the_field(
    deployed: Deployed, http: httpx.Client, name: str
) -> None:
    check_schema_violations(http, f"{deployed.url}/{name}", name, AUTHORIZATION)


@pytest.mark.parametrize("name", ["toolcall", "code"])
def test_garbage_and_huge_completions_get_per_item_results(
    deployed: Deployed, http: httpx.Client, name: str
) -> None:
    check_garbage_completions(http, f"{deployed.url}/{name}", name, AUTHORIZATION)


def test_a_client_gone_ends_its_run_already_going(deployed: Deployed) -> None:
    """Serve cancels the request of a client that left at the replica; its run ends with it, not at its wall
    limit (tests/reliability/test_inflight.py: the same on the service process)."""
    shape = Shape("ray", f"{deployed.url}/code", {}, lambda: [r["pid"] for r in deployed.replicas("code")])
    problem = declared()["code"].example(None)["problem"]
    body = json.dumps({"items": [{"completion": SLEEPER, "problem": problem}]}).encode()
    head = f"POST /code/v1/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    host, port = deployed.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(head.encode() + body)
        deadline = time.monotonic() + 60
        while busy_worker(shape) is None:
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
        time.sleep(1.0)  # well into its run
    left = time.monotonic()
    while busy_worker(shape) is not None and time.monotonic() - left < 30:
        time.sleep(0.1)
    took = time.monotonic() - left
    assert took < 5, f"the run went on {took:.1f} s after its client left: it ran to its wall limit"
