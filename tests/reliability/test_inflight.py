"""The in-flight budget against real service processes: a disconnected client's work is cancelled,
one request holds only its share of the budget, SIGTERM ends in bounded time; in each of SANDBOX_SHAPES.

Regression for: 4,097 `time.sleep(60)` items from a client that left after 5 s locked everyone
out with 429 for hours, and SIGTERM did not stop the service.
"""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from corrgrpo_testing.shape_checks import Shape, busy_worker
from corrgrpo_testing.shapes import code_service

from .helpers import PROBLEM, SANDBOX_SHAPES, inflight, post_and_leave, sleepers, wait_for

CODE_ENV = {
    "CORRGRPO_CODE_WORKERS": "2",
    "CORRGRPO_CODE_WALL_S": "4",
    "CORRGRPO_CODE_CPU_S": "2",
    "CORRGRPO_SHUTDOWN_GRACE_S": "1",
}


@pytest.mark.parametrize("shape", SANDBOX_SHAPES)
def test_disconnect_cancels_the_work_and_frees_the_budget(shape: str) -> None:
    env = {**CODE_ENV, "CORRGRPO_MAX_INFLIGHT_ITEMS": "64", "CORRGRPO_MAX_REQUEST_INFLIGHT_ITEMS": "32"}
    with code_service(shape, env) as service:
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
        assert waited < 60, (
            f"a fresh item waited {waited:.1f}s: the abandoned 232 runs (4 s each, 2 workers) went on"
        )
        metrics = httpx.get(f"{service.url}/metrics").text
        assert 'corrgrpo_rejections_total{reason="disconnected",service="code"} 2.0' in metrics
        print(f"budget released {released:.1f}s after disconnect; fresh item scored in {waited:.1f}s")


@pytest.mark.parametrize("shape", SANDBOX_SHAPES)
def test_sigterm_ends_in_bounded_time_with_work_in_flight(shape: str) -> None:
    with code_service(shape, CODE_ENV) as service:
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


@pytest.mark.parametrize("shape", SANDBOX_SHAPES)
def test_disconnect_ends_the_runs_already_going(shape: str) -> None:
    """A run that started is ended by the disconnect (its worker killed), not left to its 60 s wall limit."""
    env = {**CODE_ENV, "CORRGRPO_CODE_WALL_S": "60"}
    with code_service(shape, env) as service:
        running = Shape(shape, service.url, {}, lambda: [service.process.pid])
        client = post_and_leave(service, sleepers(2))  # one run per worker, each sleeping 60 s
        wait_for(lambda: inflight(service) == 2, 60, "both runs in flight")
        wait_for(lambda: busy_worker(running) is not None, 60, "a run going")
        time.sleep(1.0)  # both are in their sandbox runs now
        client.close()
        wait_for(lambda: inflight(service) == 0, 30, "the budget released after the client left")
        # a fresh item may find a worker the runs left free: seeing them end is what proves it
        wait_for(lambda: busy_worker(running) is None, 10, "the runs ended (not at their 60 s wall limit)")
        started = time.monotonic()
        item = {"completion": "```python\ndef add(a, b):\n    return a + b\n```", "problem": PROBLEM}
        response = httpx.post(f"{service.url}/v1/score", json={"items": [item]}, timeout=120)
        waited = time.monotonic() - started
        assert response.status_code == 200 and response.json()["results"][0]["components"]["correct"] == 1.0
        assert waited < 40, (
            f"a fresh item waited {waited:.1f}s: the abandoned runs kept both workers for their wall limit"
        )
        print(f"runs of a disconnected client ended; fresh item scored in {waited:.1f}s")
