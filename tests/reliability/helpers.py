"""Helpers of the reliability suite: which services and shapes, well-formed items (from the declarations),
in-flight probes."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx

from corrgrpo_common import declared
from corrgrpo_testing.servers import ServiceProcess
from corrgrpo_testing.shapes import LOCAL_SHAPES, chosen_shapes

SANDBOX_SHAPES = [shape for shape in chosen_shapes() if shape in LOCAL_SHAPES]
"""The shapes (CORRGRPO_TEST_SHAPES) of the cases that end or outlive sandbox runs: test_inflight.py and
test_faults.py's killed replica, since each shape starts, counts and kills runs its own way. The other
cases test the server and the store, one process whichever sandbox it uses (the shape does not reach
them): they run once. compose and Ray have no service process here to signal or restart (compose_stack.py
and tests/ray_serve kill their replicas); tests/ray_serve/test_reliability.py runs the bad-input checks
and a client gone through Serve, whose proxy owns the sockets (framing, slow clients, refusal at accept)."""

SCORING_SERVICES = list(declared())  # every declared service, each with its declared example item
Services = Callable[[str], ServiceProcess]
"""The `services` fixture: name → the running service."""

PROBLEM = declared()["code"].example(None)["problem"]
"""The code service's inline example problem (`add`), for the code-only tests."""

SLEEPER = "```python\nimport time\n\ndef add(a, b):\n    time.sleep(60)\n    return a + b\n```"
"""A code completion whose run sleeps 60 s: its item holds a place in the in-flight budget until its wall
limit."""


def inflight(service: ServiceProcess) -> float:
    """Items in the service's scorer now, from its /metrics."""
    text = httpx.get(f"{service.url}/metrics", timeout=10).text
    found = re.search(r"corrgrpo_inflight_items\{[^}]*\} (\S+)", text)
    assert found is not None, text
    return float(found.group(1))


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout_s, f"{what} not reached within {timeout_s}s"
        time.sleep(0.1)
    return time.monotonic() - started


def post_and_leave(service: ServiceProcess, body: bytes) -> socket.socket:
    """Send a whole request on a raw socket and return it unread (closing it = disconnecting)."""
    host, port = service.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    head = "POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body)
    return sock


def sleepers(count: int) -> bytes:
    """A code-service /v1/score body of `count` SLEEPER items."""
    return httpx.Request(
        "POST", "http://x", json={"items": [{"completion": SLEEPER, "problem": PROBLEM}] * count}
    ).content


def valid_item(service: ServiceProcess, completion: str | None = None) -> dict[str, Any]:
    """A well-formed item for `service`'s /v1/score, its declaration's example; `completion` replaces the
    model's text."""
    return declared()[service.name].example(completion)


def assert_healthy(service: ServiceProcess, http: httpx.Client) -> None:
    assert service.process.poll() is None, f"{service.name} exited with {service.process.returncode}"
    assert http.get(f"{service.url}/healthz", timeout=10).status_code == 200
