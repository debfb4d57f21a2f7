"""The dev-only process launcher of tests, bench and examples: start a service exactly as its container
does (`python -m corrgrpo_<name> --host --port`), wait for its /healthz, stop it after; `nginx_in_front` puts
the compose stack's nginx configuration in front of one.

`start_service` runs one for the length of a `with`; `launch` starts one without waiting, so a demo can start
every service at once and wait for each only when it needs it (AgentDojo starts slowest). People start
services with `python -m corrgrpo_devtools up` (devtools/corrgrpo_devtools/launcher.py), the same command
line; this module imports nothing of ours because make interop also runs it in the verl venv, without the kit.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

# The interpreter that runs a service: the project's, also when the caller runs in a side venv (make interop).
SERVICE_PYTHON = os.environ.get("CORRGRPO_SERVICE_PYTHON", sys.executable)


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Return once `url`/healthz answers 200; RuntimeError when the process exits first, TimeoutError after
    timeout_s."""
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
    raise TimeoutError(f"{url}/healthz did not answer within {timeout_s:.0f} s")


@dataclass
class ServiceProcess:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: str

    def log(self) -> str:
        with open(self.log_path, errors="replace") as handle:
            return handle.read()

    def wait_healthy(self, timeout_s: float) -> None:
        wait_healthy(self.url, self.process, timeout_s)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def launch(
    name: str, env: dict[str, str] | None = None, port: int | None = None, log_path: str | None = None
) -> ServiceProcess:
    """Start the service on loopback (a free port unless given) without waiting; its output goes to
    log_path."""
    port = port or free_port()
    log_path = log_path or os.path.join("/tmp", f"corrgrpo-{name}-{port}.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [SERVICE_PYTHON, "-m", f"corrgrpo_{name}", "--host", "127.0.0.1", "--port", str(port)],
            env=env if env is not None else os.environ.copy(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return ServiceProcess(name, f"http://127.0.0.1:{port}", process, log_path)


@contextmanager
def start_service(
    name: str,
    env: dict[str, str] | None = None,
    port: int | None = None,
    timeout_s: float = 60,
    tmp_dir: str = "/tmp",
) -> Iterator[ServiceProcess]:
    """Run the service as a subprocess on loopback (JSON logs); yields once `/healthz` answers; stops it after
    and removes its log (its tail goes to stderr first when the block failed)."""
    port = port or free_port()
    full_env = {**os.environ, "CORRGRPO_LOG_JSON": "true", **(env or {})}
    service = launch(name, full_env, port, os.path.join(tmp_dir, f"corrgrpo-{name}-{port}.log"))
    try:
        service.wait_healthy(timeout_s)
        yield service
    except BaseException:
        sys.stderr.write(f"--- log of {name} on port {port} ---\n{service.log()[-4000:]}\n")
        raise
    finally:
        service.stop()
        Path(service.log_path).unlink(missing_ok=True)


@contextmanager
def nginx_in_front(service_url: str, nginx_dir: Path) -> Iterator[int]:
    """`nginx_dir`/nginx.conf (deploy/nginx: the compose stack's) on a free loopback port (one `listen` line
    for all, its options kept) and its upstreams.conf replaced so that it proxies to `service_url`; yields the
    port once /healthz answers through it."""
    port = free_port()
    conf = (nginx_dir / "nginx.conf").read_text()
    begin, end = conf.index("# listen:begin"), conf.index("# listen:end")
    # the first service's `listen` options, kept
    options = conf[begin:end].splitlines()[1].split(";")[0].split()[2:]
    listen = " ".join([f"listen 127.0.0.1:{port}", *options])
    conf = (
        conf[: conf.index("\n", begin) + 1] + f"        {listen};\n" + conf[conf.rindex("\n", 0, end) + 1 :]
    )
    upstreams = f"upstream service {{\n    server {service_url.removeprefix('http://')};\n}}\n"
    upstreams += "map $server_port $pool {\n    default service;\n}\n"
    with tempfile.TemporaryDirectory(prefix="corrgrpo-nginx-") as tmp:
        Path(tmp, "nginx.conf").write_text(conf)
        Path(tmp, "upstreams.conf").write_text(upstreams)
        argv = [
            shutil.which("nginx") or "/usr/sbin/nginx",
            "-p",
            tmp,
            "-c",
            f"{tmp}/nginx.conf",
            "-e",
            f"{tmp}/error.log",
        ]
        nginx = subprocess.Popen([*argv, "-g", f"daemon off; pid {tmp}/nginx.pid;"], start_new_session=True)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", nginx, 10)
            yield port
        finally:
            nginx.terminate()
            nginx.wait(10)
