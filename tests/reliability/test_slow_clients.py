"""Slow clients against a real service process: slowloris headers and bodies, idle sockets, a connection
flood.

Loopback only, bounded in count (at most 60 sockets) and time (each wait has a deadline).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from corrgrpo_testing.servers import ServiceProcess, start_service

LIMITS = {
    "CORRGRPO_HEADER_TIMEOUT_S": "1",
    "CORRGRPO_BODY_TIMEOUT_S": "2",
    "CORRGRPO_IDLE_TIMEOUT_S": "1",
    "CORRGRPO_MAX_CONNECTIONS": "30",
}
SLACK_S = 10  # a loaded 2-core machine may run the server's timers late, never this late


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    with start_service("toolcall", env=LIMITS) as running:
        yield running


def connect(service: ServiceProcess) -> socket.socket:
    host, port = service.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """True once the server closes `sock` (EOF or reset) before `deadline`."""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, min(0.5, deadline - time.monotonic())))
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def answers(service: ServiceProcess) -> bool:
    return httpx.get(f"{service.url}/healthz", timeout=10).status_code == 200


def test_slow_headers_are_cut_and_the_flood_is_capped(service: ServiceProcess) -> None:
    sockets = [connect(service) for _ in range(60)]
    try:
        for sock in sockets:
            sock.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        started = time.monotonic()
        closed = [closed_by_server(sock, started + 1 + SLACK_S) for sock in sockets]
        elapsed = time.monotonic() - started
    finally:
        for sock in sockets:
            sock.close()
    assert all(closed), f"{closed.count(False)} of 60 slow sockets still open after {elapsed:.1f}s"
    assert answers(service)


def test_connections_beyond_the_cap_are_closed_at_once(service: ServiceProcess) -> None:
    sockets = [connect(service) for _ in range(40)]
    try:
        time.sleep(0.3)  # let the server accept them all
        deadline = time.monotonic() + 0.9  # before any header timeout (1 s) fires
        early = sum(closed_by_server(sock, deadline) for sock in sockets[30:])
    finally:
        for sock in sockets:
            sock.close()
    assert early >= 5, (
        f"only {early} of the 10 connections over the cap of 30 were closed before the header timeout"
    )
    assert answers(service)


def test_a_dripped_body_is_cut(service: ServiceProcess) -> None:
    sock = connect(service)
    try:
        sock.sendall(
            b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{"
        )
        started = time.monotonic()
        cut = False
        for _ in range(int((2 + SLACK_S) / 0.25)):  # one byte every 0.25 s: 1000 bytes would take 250 s
            try:
                sock.sendall(b" ")
            except OSError:
                cut = True
                break
            if closed_by_server(sock, time.monotonic() + 0.25):
                cut = True
                break
        elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert cut, f"a body dripped for {elapsed:.1f}s was never cut"
    assert answers(service)


def test_idle_keep_alive_connection_is_closed(service: ServiceProcess) -> None:
    sock = connect(service)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in sock.recv(65536)
        assert closed_by_server(sock, time.monotonic() + 1 + SLACK_S)
    finally:
        sock.close()
