"""Each service starts as its container does and answers the kit's endpoints over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from corrgrpo_common.registry import declared
from corrgrpo_testing.servers import start_service


@pytest.mark.parametrize("name", list(declared()))
def test_service_starts_and_answers(name: str, redis_url: str) -> None:
    with start_service(name, env={"CORRGRPO_REDIS_URL": redis_url}) as service:
        assert httpx.get(f"{service.url}/healthz").json()["service"] == name
        ready = httpx.get(f"{service.url}/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["store"] == "ok"
        components = httpx.get(f"{service.url}/v1/components").json()["components"]
        assert components and all({"name", "min", "max", "weight"} <= set(c) for c in components)
        assert "corrgrpo_requests_total" in httpx.get(f"{service.url}/metrics").text


def test_readyz_reports_unreachable_redis() -> None:
    with start_service("toolcall", env={"CORRGRPO_REDIS_URL": "redis://127.0.0.1:1/0"}) as service:
        ready = httpx.get(f"{service.url}/readyz", timeout=10)
        assert ready.status_code == 503
        assert "127.0.0.1:1" in ready.json()["checks"]["store"]


def test_port_from_environment() -> None:
    from corrgrpo_testing.servers import free_port

    port = free_port()
    import subprocess
    import sys

    from corrgrpo_testing.servers import wait_healthy

    process = subprocess.Popen(
        [sys.executable, "-m", "corrgrpo_toolcall"],
        env={**__import__("os").environ, "CORRGRPO_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process, 30)
    finally:
        process.terminate()
        process.wait(10)
