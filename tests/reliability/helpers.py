"""Helpers of the reliability suite: which services, well-formed items, a private Redis."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from corrgrpo_service import declared
from corrgrpo_testing.servers import ServiceProcess

BODY_LIMIT = 4 * 1024 * 1024
"""Small enough that a 5 MB body is refused, large enough that multi-megabyte completions are scored."""

SCORING_SERVICES = list(declared())  # every declared service; `valid_item` must know each
Services = Callable[[str], ServiceProcess]
"""The `services` fixture: name → the running service."""

TOOL_CALL = '<think>plan</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
PROBLEM = {
    "task_id": "reliability/add",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    "reference": "def add(a, b):\n    return a + b\n",
}


def valid_item(service: ServiceProcess, http: httpx.Client, completion: str | None = None) -> dict[str, Any]:
    """A well-formed item for `service`'s /v1/score; `completion` replaces the model's text."""
    name = service.name
    if name == "toolcall":
        return {"completion": TOOL_CALL if completion is None else completion, "ground_truth": TOOL_CALL}
    if name == "code":
        text = "```python\ndef add(a, b):\n    return a + b\n```" if completion is None else completion
        return {"completion": text, "problem": PROBLEM}
    if name == "agentdojo":
        suites = http.get(f"{service.url}/v1/tasks").json()["suites"]
        suite = sorted(suites)[0]
        return {"suite": suite, "user_task": suites[suite]["user_tasks"][0], "final_answer": completion or ""}
    raise ValueError(f"no item shape known for {name}")


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
