"""`python -m corrgrpo_devtools up [NAME ...]`: every declared service (or the named ones) as local processes.

Each runs as its container does (`python -m corrgrpo_<name> --host H --port P`) with in-memory state
(`CORRGRPO_REDIS_URL` is not passed on) and plain-text logs unless `CORRGRPO_LOG_JSON` is set, on its
declared port unless `--port NAME=PORT` moves it. Their output is streamed with a `[name]` prefix.
Once a service answers `/healthz`, its URL and its `/readyz` checks (the code service's: which
sandbox isolation it uses) are printed. Ctrl-C or SIGTERM stops them all. A service that exits on
its own stops the others. A taken port is refused before anything starts (one line, exit 2).

Every service runs in its own session (its process group is killed after it, so nothing it started
outlives it) and is sent SIGTERM by the kernel if this launcher dies without stopping it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

import httpx

from corrgrpo_common.registry import ServiceDeclaration, declared
from corrgrpo_common.settings import ServiceSettings, env_name

PROG = "python -m corrgrpo_devtools"
START_TIMEOUT_S = 300  # AgentDojo imports for tens of seconds on a loaded 2-core machine
STOP_MARGIN_S = 5  # beyond a service's own shutdown grace before its process group is killed
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class UsageError(Exception):
    """What `up` refuses before starting anything. Printed as one line, exit 2."""


@dataclass
class Running:
    service: ServiceDeclaration
    url: str
    process: subprocess.Popen[bytes]


def port_taken(host: str, port: int) -> bool:
    """Whether binding `host:port` fails, as the service's own bind would (SO_REUSEADDR, like uvicorn)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def plan(names: Sequence[str], moves: Sequence[str], host: str) -> dict[str, tuple[ServiceDeclaration, int]]:
    """Name → (declaration, port) of the services to start, or UsageError naming what is wrong."""
    services = declared()
    if unknown := [name for name in names if name not in services]:
        raise UsageError(f"unknown service {', '.join(unknown)}; declared: {', '.join(services)}")
    chosen = {name: services[name] for name in (names or services)}
    ports = {name: service.port for name, service in chosen.items()}
    for move in moves:
        name, _, port = move.partition("=")
        if name not in chosen or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(
                f"--port {move}: expected NAME=PORT with NAME one of {', '.join(chosen)} and PORT 1-65535"
            )
        ports[name] = int(port)
    if len(set(ports.values())) != len(ports):
        raise UsageError(f"two services on one port: {', '.join(f'{n}={p}' for n, p in ports.items())}")
    if taken := [f"{port} ({name})" for name, port in ports.items() if port_taken(host, port)]:
        raise UsageError(
            f"port {', '.join(taken)} on {host} already in use: stop what listens there (another `up`, "
            "`docker compose up`?) or move the service with --port NAME=PORT"
        )
    return {name: (chosen[name], ports[name]) for name in chosen}


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the launcher dies, even by SIGKILL (no orphaned services)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def local_service_env() -> dict[str, str]:
    """The environment each service gets: this one less the Redis URL (in-memory state) and the port (each
    gets its own `--port`), with plain-text logs unless `CORRGRPO_LOG_JSON` is set."""
    dropped = {env_name(ServiceSettings, "redis_url"), env_name(ServiceSettings, "port")}
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env.setdefault(env_name(ServiceSettings, "log_json"), "false")
    # each line reaches the launcher's prefixed stream as it is written
    return env | {"PYTHONUNBUFFERED": "1"}


def start_service_process(service: ServiceDeclaration, host: str, port: int) -> Running:
    process = subprocess.Popen(
        [sys.executable, "-m", service.module, "--host", host, "--port", str(port)],
        env=local_service_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,  # safe: every service is launched before any thread of ours starts
    )
    return Running(service, f"http://{host}:{port}", process)


class Output:
    """Lines to stdout, whole and in order, from the launcher and every service's log thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def say(self, prefix: str, line: str) -> None:
        with self._lock:
            sys.stdout.write(f"[{prefix}] {line}\n")
            sys.stdout.flush()

    def stream(self, name: str, pipe: IO[bytes]) -> threading.Thread:
        def copy() -> None:
            for raw in pipe:
                self.say(name, raw.decode(errors="replace").rstrip("\n"))

        thread = threading.Thread(target=copy, name=f"log-{name}", daemon=True)
        thread.start()
        return thread


def readiness(url: str) -> str:
    """`ready (check: value, ...)` from /readyz, or why not ready."""
    try:
        response = httpx.get(f"{url}/readyz", timeout=10)
        body = response.json()
        checks = ", ".join(f"{name}: {value}" for name, value in body["checks"].items())
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
        return f"readiness unknown ({type(error).__name__})"
    return f"{'ready' if response.status_code == 200 else 'NOT ready'} ({checks})"


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def exited(running: Sequence[Running]) -> Running | None:
    return next((r for r in running if r.process.poll() is not None), None)


def supervise(running: list[Running], out: Output, stop: threading.Event) -> int:
    """Announce each service once it answers, then wait for a stop signal or a service's exit. The exit
    code."""
    pending, deadline = list(running), time.monotonic() + START_TIMEOUT_S
    while not stop.is_set():
        if failed := exited(running):
            when = "before it answered" if failed in pending else "on its own"
            out.say(
                "up",
                f"{failed.service.name} exited with code {failed.process.returncode} {when}; stopping the "
                f"others",
            )
            return 1
        for item in [r for r in pending if answers(r.url)]:
            pending.remove(item)
            out.say("up", f"{item.service.name:<10} {item.url}  {readiness(item.url)}")
            if not pending:
                out.say("up", f"{len(running)} service(s) up; Ctrl-C or SIGTERM stops them")
        if pending and time.monotonic() > deadline:
            late = ", ".join(r.service.name for r in pending)
            out.say(
                "up", f"{late} did not answer /healthz within {START_TIMEOUT_S} s; stopping every service"
            )
            return 1
        stop.wait(0.1 if pending else 0.5)
    return 0


def stop_all(running: Sequence[Running], out: Output) -> None:
    """SIGTERM to each service, its shutdown grace to finish, then its whole process group killed."""
    out.say("up", f"stopping {', '.join(r.service.name for r in running)}")
    for item in running:
        if item.process.poll() is None:
            item.process.terminate()
    deadline = time.monotonic() + max(ServiceSettings().shutdown_grace_s, 1) + STOP_MARGIN_S
    for item in running:
        try:
            item.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            out.say("up", f"{item.service.name} still running after its shutdown grace: killed")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(item.process.pid, signal.SIGKILL)  # the service and anything left of what it started
        item.process.wait()


def up(names: Sequence[str], moves: Sequence[str], host: str) -> int:
    targets = plan(names, moves, host)
    out, stop = Output(), threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    out.say(
        "up", f"starting {', '.join(targets)} on {host} (in-memory state; logs below, prefixed with the name)"
    )
    running = [start_service_process(service, host, port) for service, port in targets.values()]
    streams = [out.stream(r.service.name, r.process.stdout) for r in running if r.process.stdout]
    try:
        code = supervise(running, out, stop)
    finally:
        stop_all(running, out)
        for thread in streams:
            thread.join(2)  # the last lines a service wrote before it stopped
    out.say("up", "stopped")
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="The corrgrpo services as local processes (dev only)."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{up}")
    about = (
        "start every declared service (or the named ones) as local processes, in-memory state, until Ctrl-C"
    )
    command = commands.add_parser("up", help=about, description=about)
    command.add_argument(
        "names", nargs="*", metavar="NAME", help="services to start (default: every declared one)"
    )
    command.add_argument(
        "--host", default="127.0.0.1", help="bind address of every service (default: %(default)s)"
    )
    command.add_argument(
        "--port",
        action="append",
        default=[],
        metavar="NAME=PORT",
        help="run service NAME on PORT; repeatable (default: each service's declared port)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return up(args.names, args.port, args.host)
    except UsageError as error:
        parser.exit(2, f"{PROG} {args.command}: error: {error}\n")
