"""Bearer auth in each shape a service is reached in (issue 48): no token, a wrong one, an empty one (`Bearer ` and
`Bearer`), another scheme and the right one, on every route of every declared service.

- served: `python -m corrgrpo_<name>` (our server) over real HTTP, each request written on a raw socket (an HTTP
  client refuses to send `Bearer ` with its trailing space);
- prefixed: the app under a prefix as Ray Serve's proxy mounts it, the prefix kept in the path and named in
  `root_path` (tests/ray_serve/test_auth.py runs the same checks on a real Serve deployment).
The routes are the app's OpenAPI document's and /metrics, so a route added later is checked without editing this.
An empty `CORRGRPO_API_TOKEN` refuses to start in one line.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from corrgrpo_common import declared
from corrgrpo_testing.servers import SERVICE_PYTHON, ServiceProcess, start_service

TOKEN = f"tok-{uuid.uuid4().hex}"
RIGHT = f"Bearer {TOKEN}"
REFUSED = {  # credential name -> the Authorization header's value (None: no header)
    "none": None,
    "wrong": f"Bearer {TOKEN[:-1]}{'x' if TOKEN[-1] != 'x' else 'y'}",
    "empty": "Bearer ",
    "bare": "Bearer",
    "scheme": f"Basic {TOKEN}",
    "spaces": "Bearer    ",
}
OPEN = {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
PREFIX = "/svc"  # as serve.yaml's route_prefix `/code`


@dataclass(frozen=True)
class Answer:
    status: int
    challenge: str  # the WWW-Authenticate header, "" without one
    body: bytes


Send = Callable[[str, str, str | None, bytes], Awaitable[Answer]]  # method, route, Authorization, body


def routes(openapi: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (method, route) of the app: its OpenAPI paths (a path parameter as `x`), /metrics and the docs."""
    found = [
        (method.upper(), re.sub(r"\{[^}]*\}", "x", path))
        for path, operations in openapi["paths"].items()
        for method in operations
    ]
    return found + [("GET", path) for path in sorted(OPEN - set(openapi["paths"]))]


def bodies(name: str) -> dict[str, bytes]:
    """What each scoring route answers 200 to with the right token: the declaration's example item."""
    item = declared()[name].example(None)
    fields = {key: value for key, value in item.items() if key != "completion"}
    openrlhf = {"query": [item.get("completion", "")], "prompts": [""], "labels": [json.dumps(fields)]}
    return {"/v1/score": json.dumps({"items": [item]}).encode(), "/v1/openrlhf": json.dumps(openrlhf).encode()}


async def check_every_route(name: str, send: Send) -> None:
    """Every route refuses each refused credential with 401 and a Bearer challenge, unless it is open; the right
    token reaches every route, and the scoring routes score."""
    openapi = json.loads((await send("GET", "/openapi.json", None, b"")).body)
    scoring = bodies(name)
    checked, wrong = routes(openapi), []
    assert {"/v1/score", "/v1/openrlhf", "/v1/components"} <= {route for _, route in checked}
    for method, route in checked:
        body = scoring.get(route, b"{}" if method == "POST" else b"")
        for credential, header in [*REFUSED.items(), ("right", RIGHT)]:
            answer = await send(method, route, header, body)
            if route in OPEN or credential == "right":  # a read or a score answers 200, another POST here its 4xx
                ok = answer.status == 200 if method == "GET" or route in scoring else answer.status not in (401, 500)
            else:
                ok = answer.status == 401 and answer.challenge.startswith("Bearer")
            if not ok:
                wrong.append(f"{method} {route} {credential}: {answer.status} {answer.body[:120]!r}")
    assert not wrong, f"{name}: {len(wrong)} answers wrong:\n" + "\n".join(wrong)


# ---------------------------------------------------------------- served: our server, real HTTP


def raw_request(url: str, method: str, path: str, authorization: str | None, body: bytes) -> Answer:
    """One request written byte for byte (`Authorization: Bearer ` as it is), `Connection: close`, read to the end."""
    host, port = url.removeprefix("http://").split(":")
    head = [f"{method} {path} HTTP/1.1", "Host: test", "Connection: close", f"Content-Length: {len(body)}"]
    head += ["Content-Type: application/json"] if body else []
    head += [f"Authorization: {authorization}"] if authorization is not None else []
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks)
    header, _, content = response.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    fields = dict(line.split(":", 1) for line in lines[1:])
    challenge = {key.lower(): value.strip() for key, value in fields.items()}.get("www-authenticate", "")
    return Answer(int(lines[0].split()[1]), challenge, content)


@pytest.fixture(scope="module", params=list(declared()))
def served(request: pytest.FixtureRequest) -> Iterator[ServiceProcess]:
    with start_service(request.param, env={"CORRGRPO_API_TOKEN": TOKEN}, timeout_s=120) as service:
        yield service


async def test_every_route_of_a_served_service_needs_the_token(served: ServiceProcess) -> None:
    async def send(method: str, route: str, authorization: str | None, body: bytes) -> Answer:
        return raw_request(served.url, method, route, authorization, body)

    await check_every_route(served.name, send)


# ---------------------------------------------------------------- prefixed: under a route prefix, as Ray Serve's proxy


@pytest.mark.parametrize("name", list(declared()))
async def test_every_route_under_a_proxy_prefix_needs_the_token(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("CORRGRPO_API_TOKEN", TOKEN)
    app = declared()[name].build()
    transport = httpx.ASGITransport(app=app, root_path=PREFIX)  # path `/svc/v1/score`, root_path `/svc`: Serve's scope
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://x") as client:

        async def send(method: str, route: str, authorization: str | None, body: bytes) -> Answer:
            headers = {"content-type": "application/json"} if body else {}
            headers |= {"authorization": authorization} if authorization is not None else {}
            answer = await client.request(method, PREFIX + route, content=body, headers=headers, timeout=60)
            return Answer(answer.status_code, answer.headers.get("www-authenticate", ""), answer.content)

        await check_every_route(name, send)
        metrics = (await client.get(f"{PREFIX}/metrics")).text
    # counted under the route, never the prefixed path
    assert re.search(r'corrgrpo_requests_total\{route="/v1/score",service="\w+",status="200"\} 1.0', metrics), metrics
    assert f'"{PREFIX}' not in metrics


# ---------------------------------------------------------------- an unusable token: no start


@pytest.mark.parametrize("token", ["", " ", "k7q2 z9x4", "w3m8\tv6p1"])
def test_an_empty_or_unsendable_token_refuses_to_start_in_one_line(token: str) -> None:
    env = {**os.environ, "CORRGRPO_API_TOKEN": token}
    command = [SERVICE_PYTHON, "-m", "corrgrpo_toolcall", "--port", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "refusing to start: CORRGRPO_API_TOKEN: set but empty" in done.stderr
    assert all(part not in done.stderr for part in token.split())  # a secret is never echoed
