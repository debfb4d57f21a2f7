"""Helpers of the reliability suite: which services, well-formed items (from the declarations), a private Redis."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from corrgrpo_common import declared
from corrgrpo_testing.servers import ServiceProcess

BODY_LIMIT = 4 * 1024 * 1024
"""Small enough that a 5 MB body is refused, large enough that multi-megabyte completions are scored."""

SCORING_SERVICES = list(declared())  # every declared service, each with its declared example item
Services = Callable[[str], ServiceProcess]
"""The `services` fixture: name → the running service."""

PROBLEM = declared()["code"].example(None)["problem"]
"""The code service's inline example problem (`add`), for the code-only tests."""


def valid_item(service: ServiceProcess, completion: str | None = None) -> dict[str, Any]:
    """A well-formed item for `service`'s /v1/score, its declaration's example; `completion` replaces the model's text."""
    return declared()[service.name].example(completion)


def assert_healthy(service: ServiceProcess, http: httpx.Client) -> None:
    assert service.process.poll() is None, f"{service.name} exited with {service.process.returncode}"
    assert http.get(f"{service.url}/healthz", timeout=10).status_code == 200


@dataclass
class ThrowawayRedis:
    """A private redis-server on its own port, so fault tests never touch the shared one on 6379."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(f"redis-server on {self.port} did not listen")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
