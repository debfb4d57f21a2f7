"""`python -m corrgrpo_devtools up`: the real services as local processes, on free ports, stopped without
orphans."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import psutil
import pytest

from corrgrpo_common.registry import declared
from corrgrpo_devtools.launcher import main
from corrgrpo_testing.servers import free_port

UP = [sys.executable, "-m", "corrgrpo_devtools", "up"]
READY_S = 240  # AgentDojo imports for tens of seconds on a loaded 2-core machine


@dataclass
class Launcher:
    """A running `up`: its process and every line it printed so far (read on a thread, so waits have
    deadlines)."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self._queue.put(line.rstrip("\n"))
            self._queue.put(None)

        threading.Thread(target=read, daemon=True).start()

    def wait_for(self, text: str, timeout_s: float = READY_S) -> str:
        """The first line (from now on) containing `text`; fails with the output so far when it does not
        come."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if text in line:
                return line
        pytest.fail(f"no line with {text!r} within {timeout_s} s; output:\n" + "\n".join(self.lines))

    def rest(self, timeout_s: float = 30) -> list[str]:
        """The remaining lines, once `up` has exited."""
        self.process.wait(timeout_s)
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return self.lines

    def services(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)


@contextmanager
def launcher(*args: str, env: dict[str, str] | None = None) -> Iterator[Launcher]:
    process = subprocess.Popen(
        [*UP, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        yield Launcher(process)
    finally:
        if process.poll() is None:  # a failed test: stop it the way a user would
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of `processes` still alive after timeout_s (zombies count as gone: nothing runs)."""
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_up_starts_every_declared_service_and_sigterm_stops_them_all() -> None:
    ports = {name: free_port() for name in declared()}
    moves = [f"--port={name}={port}" for name, port in ports.items()]
    # A Redis URL in the environment is not passed on: `up` runs the services with in-memory state.
    with launcher(*moves, env={"CORRGRPO_REDIS_URL": "redis://127.0.0.1:1/0"}) as up:
        first = up.wait_for("[up] starting")
        state = "(in-memory state; logs below, prefixed with the name)"
        assert first == f"[up] starting {', '.join(ports)} on 127.0.0.1 {state}"
        up.wait_for(f"[up] {len(ports)} service(s) up; Ctrl-C or SIGTERM stops them")
        announced = {
            line.split()[1]: line for line in up.lines if line.startswith("[up] ") and "  ready" in line
        }
        assert set(announced) == set(ports)
        for name, port in ports.items():
            url = f"http://127.0.0.1:{port}"
            assert announced[name].startswith(f"[up] {name:<10} {url}  ready (store: ok")
            assert httpx.get(f"{url}/healthz").json()["service"] == name
            assert any(
                line.startswith(f"[{name}] ") and f"Uvicorn running on {url}" in line for line in up.lines
            )
        assert ", sandbox: bwrap, " in announced["code"]  # which isolation the code service uses
        services = up.services()
        assert len(services) >= len(ports)
        up.process.send_signal(signal.SIGTERM)
        lines = up.rest()
    assert up.process.returncode == 0
    assert lines[-1] == "[up] stopped" and f"[up] stopping {', '.join(ports)}" in lines
    assert not gone(services, 10), "a process started by `up` outlived it"
    for port in ports.values():
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/healthz")


def test_ctrl_c_stops_a_named_service() -> None:
    port = free_port()
    with launcher("toolcall", "--port", f"toolcall={port}") as up:
        up.wait_for("[up] 1 service(s) up")
        services = up.services()
        assert [line for line in up.lines if line.startswith("[up] toolcall ")] == [
            f"[up] toolcall   http://127.0.0.1:{port}  ready (store: ok, auth: none (CORRGRPO_API_TOKEN "
            f"unset): routes open)"
        ]
        up.process.send_signal(signal.SIGINT)
        assert up.rest()[-1] == "[up] stopped"
    assert up.process.returncode == 0 and not gone(services, 10)


def test_a_killed_launcher_takes_its_services_with_it() -> None:
    with launcher("toolcall", "--port", f"toolcall={free_port()}") as up:
        up.wait_for("[up] 1 service(s) up")
        services = up.services()
        up.process.kill()  # no chance to stop them: the kernel's parent-death signal does
        up.process.wait(10)
    assert services and not gone(services, 20), "a service outlived its SIGKILLed launcher"


def test_a_taken_port_is_refused_in_one_line_before_anything_starts() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run = subprocess.run(
            [*UP, "toolcall", "--port", f"toolcall={port}"], capture_output=True, text=True, timeout=60
        )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        f"python -m corrgrpo_devtools up: error: port {port} (toolcall) on 127.0.0.1 already in use: stop "
        f"what listens "
        "there (another `up`, `docker compose up`?) or move the service with --port NAME=PORT\n"
    )


def test_a_service_that_cannot_start_stops_the_launcher() -> None:
    with launcher(
        "toolcall", "--port", f"toolcall={free_port()}", env={"CORRGRPO_MAX_CONNECTIONS": "0"}
    ) as up:
        lines = up.rest(60)
    assert up.process.returncode == 1
    assert "[up] toolcall exited with code 1 before it answered; stopping the others" in lines
    refusal = (
        "[toolcall] toolcall: refusing to start: CORRGRPO_MAX_CONNECTIONS: Input should be greater than 0"
    )
    assert refusal in lines  # why, in one line of its log


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["up", "nope"], "unknown service nope; declared: " + ", ".join(declared())),
        (
            ["up", "toolcall", "--port", "code=8101"],
            "--port code=8101: expected NAME=PORT with NAME one of toolcall",
        ),
        (["up", "--port", "toolcall=x"], "--port toolcall=x: expected NAME=PORT with NAME one of"),
        (
            ["up", "code", "toolcall", "--port", "toolcall=8101"],
            "two services on one port: code=8101, toolcall=8101",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2
        and err.startswith(f"python -m corrgrpo_devtools up: error: {message}")
        and err.count("\n") == 1
    )
