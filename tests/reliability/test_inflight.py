"""The in-flight budget against real service processes: a disconnected client's work is cancelled,
one request holds only its share of the budget, SIGTERM ends in bounded time.

Regression for: 4,097 `time.sleep(60)` items from a client that left after 5 s locked everyone
out with 429 for hours, and SIGTERM did not stop the service.
"""

from __future__ import annotations

import re
import signal
import socket
import time
from collections.abc import Callable

import httpx
from reliability.helpers import PROBLEM

from corrgrpo_testing.servers import ServiceProcess, start_service

SLEEPER = "```python\nimport time\n\ndef add(a, b):\n    time.sleep(60)\n    return a + b\n```"
CODE_ENV = {
    "CORRGRPO_CODE_WORKERS": "2",
    "CORRGRPO_CODE_WALL_S": "4",
    "CORRGRPO_CODE_CPU_S": "2",
    "CORRGRPO_SHUTDOWN_GRACE_S": "1",
}


def inflight(service: ServiceProcess) -> float:
    text = httpx.get(f"{service.url}/metrics", timeout=10).text
    return float(re.search(r"corrgrpo_inflight_items\{[^}]*\} (\S+)", text).group(1))  # type: ignore[union-attr]


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
    head = f"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body)
    return sock


def sleepers(count: int) -> bytes:
    return httpx.Request("POST", "http://x", json={"items": [{"completion": SLEEPER, "problem": PROBLEM}] * count}).content


def test_disconnect_cancels_the_work_and_frees_the_budget() -> None:
    env = {**CODE_ENV, "CORRGRPO_MAX_INFLIGHT_ITEMS": "64", "CORRGRPO_MAX_REQUEST_INFLIGHT_ITEMS": "32"}
    with start_service("code", env=env) as service:
        first = post_and_leave(service, sleepers(200))
        wait_for(lambda: inflight(service) == 32, 60, "the first request holding its share (32 of 64)")
        second = post_and_leave(service, sleepers(32))  # the rest of the budget is still open to others
        wait_for(lambda: inflight(service) == 64, 60, "a second request admitted beside the first")
        first.close()
        second.close()
        released = wait_for(lambda: inflight(service) == 0, 30, "the budget released after the clients left")
        # the runs still queued were cancelled: a fresh item is scored after at most the runs already going
        started = time.monotonic()
        item = {"completion": "```python\ndef add(a, b):\n    return a + b\n```", "problem": PROBLEM}
        response = httpx.post(f"{service.url}/v1/score", json={"items": [item]}, timeout=120)
        assert response.status_code == 200 and response.json()["results"][0]["components"]["correct"] == 1.0
        waited = time.monotonic() - started
        assert waited < 60, f"a fresh item waited {waited:.1f}s: the abandoned 232 runs (4 s each, 2 workers) were not cancelled"
        metrics = httpx.get(f"{service.url}/metrics").text
        assert 'corrgrpo_rejections_total{reason="disconnected",service="code"} 2.0' in metrics
        print(f"budget released {released:.1f}s after disconnect; fresh item scored in {waited:.1f}s")


def test_sigterm_ends_in_bounded_time_with_work_in_flight() -> None:
    with start_service("code", env=CODE_ENV) as service:
        client = post_and_leave(service, sleepers(200))  # 200 runs of 4 s on 2 workers: 400 s if drained
        try:
            wait_for(lambda: inflight(service) > 0, 60, "the batch in flight")
            started = time.monotonic()
            service.process.send_signal(signal.SIGTERM)
            service.process.wait(60)  # grace 1 s + the runs already going (4 s wall) + start-up noise
            took = time.monotonic() - started
        finally:
            client.close()
    assert service.process.returncode is not None
    print(f"SIGTERM with 200 sleeping items in flight: exited in {took:.1f}s")


def test_disconnect_ends_the_runs_already_going() -> None:
    """A run that started is ended by the disconnect (its worker killed), not left to run out its 60 s wall limit."""
    env = {**CODE_ENV, "CORRGRPO_CODE_WALL_S": "60"}
    with start_service("code", env=env) as service:
        client = post_and_leave(service, sleepers(2))  # one run per worker, each sleeping 60 s
        wait_for(lambda: inflight(service) == 2, 60, "both runs in flight")
        time.sleep(1.0)  # both are in their sandbox runs now
        client.close()
        wait_for(lambda: inflight(service) == 0, 30, "the budget released after the client left")
        started = time.monotonic()
        item = {"completion": "```python\ndef add(a, b):\n    return a + b\n```", "problem": PROBLEM}
        response = httpx.post(f"{service.url}/v1/score", json={"items": [item]}, timeout=120)
        waited = time.monotonic() - started
        assert response.status_code == 200 and response.json()["results"][0]["components"]["correct"] == 1.0
        assert waited < 40, f"a fresh item waited {waited:.1f}s: the abandoned runs kept both workers for their wall limit"
        print(f"runs of a disconnected client ended; fresh item scored in {waited:.1f}s")
