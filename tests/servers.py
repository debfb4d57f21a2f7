"""Start a service exactly as its container does: `python -m corrgrpo_<name> --host --port`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServiceProcess:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: str

    def log(self) -> str:
        with open(self.log_path, errors="replace") as handle:
            return handle.read()


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"service exited with {process.returncode} before answering {url}/healthz")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url}/healthz did not answer within {timeout_s}s")


@contextmanager
def start_service(
    name: str, env: dict[str, str] | None = None, port: int | None = None, timeout_s: float = 60, tmp_dir: str = "/tmp"
) -> Iterator[ServiceProcess]:
    """Run the service as a subprocess on loopback; yields once `/healthz` answers; stops it after."""
    port = port or free_port()
    log_path = os.path.join(tmp_dir, f"corrgrpo-{name}-{port}.log")
    full_env = {**os.environ, "CORRGRPO_LOG_JSON": "true", **(env or {})}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", f"corrgrpo_{name}", "--host", "127.0.0.1", "--port", str(port)],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    service = ServiceProcess(name, f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_healthy(service.url, process, timeout_s)
        yield service
    except BaseException:
        sys.stderr.write(f"--- log of {name} on port {port} ---\n{service.log()[-4000:]}\n")
        raise
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
