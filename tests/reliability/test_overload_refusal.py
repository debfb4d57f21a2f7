"""Past capacity a refusal must cost far less than scoring, or refusing eats the core the admitted requests
need.

While the in-flight budget is spent, a scoring request gets its 429 with `Retry-After` as soon as its request
line arrives: before its body is read (a client that declares 50 MB and sends none is answered at once), on a
fresh or a kept-alive connection, and also when the request line arrives split (the ASGI fallback). Other
routes stay served, and nginx in front passes the refusal on (and answers 503 + Retry-After itself when no
replica answers).
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corrgrpo_common import declared
from corrgrpo_testing.servers import ServiceProcess, nginx_in_front, start_service

from .helpers import inflight, post_and_leave, sleepers, wait_for

RETRY_AFTER_S = 3
ENV = {
    "CORRGRPO_CODE_WORKERS": "2",
    "CORRGRPO_CODE_WALL_S": "120",  # the two sleepers hold the budget for the whole module
    "CORRGRPO_CODE_CPU_S": "2",
    "CORRGRPO_MAX_INFLIGHT_ITEMS": "2",
    "CORRGRPO_RETRY_AFTER_S": str(RETRY_AFTER_S),
    "CORRGRPO_SHUTDOWN_GRACE_S": "1",
}
MAX_CONNECTIONS = 8  # the full service's connection cap
NGINX_DIR = Path(__file__).resolve().parents[2] / "deploy" / "nginx"
NGINX_SCORING_LIMIT = int(
    re.search(r"limit_conn scoring (\d+);", (NGINX_DIR / "nginx.conf").read_text()).group(1)
)  # type: ignore[union-attr]
# declared, never sent; under the 64 MiB body limit, so only the budget can refuse it
UNSENT_BODY = 50_000_000


@pytest.fixture(scope="module")
def full() -> Iterator[ServiceProcess]:
    """The code service with its budget of 2 items spent by a client whose 2 runs sleep."""
    with start_service("code", env={**ENV, "CORRGRPO_MAX_CONNECTIONS": str(MAX_CONNECTIONS)}) as service:
        holder = post_and_leave(service, sleepers(2))
        try:
            wait_for(lambda: inflight(service) == 2, 60, "the budget spent")
            yield service
        finally:
            holder.close()


def connect(service: ServiceProcess) -> socket.socket:
    host, port = service.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def head(path: str, length: int = UNSENT_BODY) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {length}\r\n\r\n".encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-case names), body (by its Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a whole response head: {data!r}"
        data += chunk
    head_bytes, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head_bytes.decode().split("\r\n")
    headers = {
        name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)
    }
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the response body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def assert_refused_for_overload(response: tuple[int, dict[str, str], bytes], took: float) -> None:
    status, headers, body = response
    assert status == 429, (status, body)
    assert headers["retry-after"] == str(RETRY_AFTER_S)
    assert json.loads(body)["error"] == "overloaded"
    assert took < 2.0, f"the refusal took {took:.1f}s: the server waited for a body it was never sent"


@pytest.mark.parametrize("path", ["/v1/score", "/v1/openrlhf"])
def test_refused_at_once_without_the_body(full: ServiceProcess, path: str) -> None:
    with connect(full) as sock:
        started = time.monotonic()
        sock.sendall(head(path))
        assert_refused_for_overload(read_response(sock), time.monotonic() - started)
        assert sock.recv(1) == b"", "the connection is closed after the refusal"


def test_refused_on_a_kept_alive_connection(full: ServiceProcess) -> None:
    with connect(full) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 200
        started = time.monotonic()
        sock.sendall(head("/v1/score"))
        assert_refused_for_overload(read_response(sock), time.monotonic() - started)


def test_a_request_line_split_over_two_sends_is_refused_before_the_body(full: ServiceProcess) -> None:
    with connect(full) as sock:
        whole = head("/v1/score")
        started = time.monotonic()
        sock.sendall(whole[:8])  # "POST /v1": too little to tell the route
        time.sleep(0.2)
        sock.sendall(whole[8:])
        assert_refused_for_overload(read_response(sock), time.monotonic() - started)


def counted(service: ServiceProcess, name: str, label: str) -> float:
    """The sum of the /metrics samples of `name` whose labels include `label` (like `status="429"`)."""
    text = httpx.get(f"{service.url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and label in line
    )


def test_refused_before_the_app_and_counted(full: ServiceProcess) -> None:
    """A whole request line is refused by the server's protocol: the app (its request log and counts) never
    sees it."""
    overload, app_429 = (
        ("corrgrpo_rejections_total", 'reason="overload"'),
        ("corrgrpo_requests_total", 'status="429"'),
    )
    before = counted(full, *overload), counted(full, *app_429)
    with connect(full) as sock:
        sock.sendall(head("/v1/score"))
        assert read_response(sock)[0] == 429
    assert (counted(full, *overload), counted(full, *app_429)) == (before[0] + 1, before[1])
    assert httpx.get(f"{full.url}/healthz", timeout=5).status_code == 200
    assert inflight(full) == 2, "the budget is still spent: every refusal here was for overload"


def test_places_of_requests_refused_before_admission_are_given_back() -> None:
    """A scoring request is admitted from its request line; refused after that by the auth guard (401) or left
    half-sent, its place in the budget comes back, so such requests cannot lock out everyone with 429."""
    env = {"CORRGRPO_API_TOKEN": "t" * 32, "CORRGRPO_MAX_INFLIGHT_ITEMS": "4"}
    with start_service("toolcall", env=env) as service:
        for _ in range(8):
            with connect(service) as sock:
                sock.sendall(head("/v1/score", 2))
                assert read_response(sock)[0] == 401
        for _ in range(8):
            with connect(service) as sock:
                sock.sendall(head("/v1/score")[:30])  # the request line, then gone
        wait_for(lambda: inflight(service) == 0, 10, "every place given back")
        item = declared()["toolcall"].example(None)
        auth = {"Authorization": f"Bearer {'t' * 32}"}
        response = httpx.post(f"{service.url}/v1/score", json={"items": [item]}, headers=auth, timeout=30)
        assert response.status_code == 200, response.text


def test_through_nginx_refusals_keep_their_retry_after(full: ServiceProcess) -> None:
    """deploy/nginx/nginx.conf passes a replica's 429 on with its Retry-After, and answers 503 + Retry-After
    with the kit's error body itself when no replica answers (compose's nginx, Kubernetes' clients back off
    the same way)."""
    with nginx_in_front(full.url, NGINX_DIR) as port:
        refused = httpx.post(f"http://127.0.0.1:{port}/v1/score", json={"items": []}, timeout=10)
        assert (refused.status_code, refused.headers["retry-after"]) == (429, str(RETRY_AFTER_S))
        assert refused.json()["error"] == "overloaded"
    with start_service("toolcall") as service, nginx_in_front(service.url, NGINX_DIR) as port:
        service.stop()
        unavailable = httpx.post(f"http://127.0.0.1:{port}/v1/score", json={"items": []}, timeout=30)
        assert (unavailable.status_code, unavailable.headers["retry-after"]) == (503, "1")
        assert unavailable.json()["error"] == "unavailable"


def test_a_fresh_connection_is_refused_at_accept_before_asyncio_takes_it(full: ServiceProcess) -> None:
    """Past capacity most connections are refused, so a refusal must cost a sliver of a scored batch's CPU:
    the listening socket answers a fresh connection's scoring request at accept, before asyncio makes a
    transport and a protocol of it (what that saves is a benchmark's figure: bench/bench_load.py). Told from
    outside by the connection cap, which asyncio's protocol enforces: with the cap's connections held open, a
    connection the protocol took would get the cap's 503; one refused at accept gets the budget's 429."""
    held = [connect(full) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:
            # half a head: served by asyncio, kept open till complete
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")

        def cap_reached() -> bool:
            with connect(full) as probe:
                probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                return read_response(probe)[0] == 503

        wait_for(cap_reached, 10, "the connection cap reached by the held connections")
        with connect(full) as sock:
            started = time.monotonic()
            sock.sendall(head("/v1/score"))
            assert_refused_for_overload(read_response(sock), time.monotonic() - started)
    finally:
        for sock in held:
            sock.close()


def test_nginx_refuses_scoring_past_its_limit_itself_and_still_answers_probes() -> None:
    """Past its scoring limit per service nginx answers 429 + Retry-After itself, without asking a replica
    that has room (a refusal there costs twice the CPU); health probes and other routes are not counted."""
    # the replica's budget has room
    env = {**ENV, "CORRGRPO_MAX_INFLIGHT_ITEMS": str(4 * NGINX_SCORING_LIMIT)}
    with start_service("code", env=env) as service, nginx_in_front(service.url, NGINX_DIR) as port:
        front = f"http://127.0.0.1:{port}"
        body = sleepers(1)
        request = head("/v1/score", len(body)) + body
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(NGINX_SCORING_LIMIT)]
        try:
            for sock in held:
                sock.sendall(request)
            wait_for(
                lambda: inflight(service) == NGINX_SCORING_LIMIT, 60, "the limit's requests in the replica"
            )
            refused = httpx.post(f"{front}/v1/score", json={"items": []}, timeout=10)
            assert (refused.status_code, refused.headers["retry-after"]) == (429, "1"), refused.text
            assert refused.json()["error"] == "overloaded" and "x-upstream-addr" not in refused.headers
            assert httpx.get(f"{front}/healthz", timeout=10).status_code == 200
            assert inflight(service) == NGINX_SCORING_LIMIT, "the refused request never reached the replica"
        finally:
            for sock in held:
                sock.close()
