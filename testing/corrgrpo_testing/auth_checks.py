"""The bearer-auth checks each deploy shape's test runs (tests/security/test_auth.py,
tests/ray_serve/test_auth.py).

`check_every_route` sends no token, a wrong one, an empty one (`Bearer ` and `Bearer`), spaces, another scheme
and the right one to every route of a service: its OpenAPI document's, /metrics and the docs, so that a route
added later is checked without editing a test. A shape gives `send`: how a request reaches the service there.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from corrgrpo_common import declared

DOCS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
OPEN = frozenset({"/healthz", "/readyz", "/metrics", *DOCS})


@dataclass(frozen=True)
class Answer:
    status: int
    challenge: str  # the WWW-Authenticate header, "" without one
    body: bytes


# (method, route, the Authorization header's value or None for none, body) -> the answer
Send = Callable[[str, str, str | None, bytes], Awaitable[Answer]]


def refused_credentials(token: str) -> dict[str, str | None]:
    """Name -> an `Authorization` value that must get 401 (None: no header)."""
    wrong = token[:-1] + ("x" if token[-1] != "x" else "y")
    return {
        "none": None,
        "wrong": f"Bearer {wrong}",
        "empty": "Bearer ",
        "bare": "Bearer",
        "spaces": "Bearer    ",
        "scheme": f"Basic {token}",
    }


def routes(openapi: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (method, route) of the app: its OpenAPI paths (a path parameter as `x`), /metrics, the docs."""
    found = [
        (method.upper(), re.sub(r"\{[^}]*\}", "x", path))
        for path, operations in openapi["paths"].items()
        for method in operations
    ]
    return found + [("GET", path) for path in sorted(OPEN - set(openapi["paths"]))]


def scoring_bodies(name: str) -> dict[str, bytes]:
    """What each scoring route answers 200 to: the declaration's example item, in a batch and as a label."""
    item = declared()[name].example(None)
    fields = {key: value for key, value in item.items() if key != "completion"}
    openrlhf = {"query": [item.get("completion", "")], "prompts": [""], "labels": [json.dumps(fields)]}
    return {
        "/v1/score": json.dumps({"items": [item]}).encode(),
        "/v1/openrlhf": json.dumps(openrlhf).encode(),
    }


async def check_every_route(name: str, token: str, send: Send) -> None:
    """Every route but the open ones answers each refused credential with 401 and a Bearer challenge; with the
    right token every route is reached: a read and a score answer 200 (another POST, given `{}`, its 4xx)."""
    openapi = json.loads((await send("GET", "/openapi.json", None, b"")).body)
    scoring, checked, wrong = scoring_bodies(name), routes(openapi), []
    assert {"/v1/score", "/v1/openrlhf", "/v1/components"} <= {route for _, route in checked}
    for method, route in checked:
        body = scoring.get(route, b"{}" if method == "POST" else b"")
        for credential, header in [*refused_credentials(token).items(), ("right", f"Bearer {token}")]:
            answer = await send(method, route, header, body)
            if route in OPEN or credential == "right":
                reads = method == "GET" or route in scoring
                ok = answer.status == 200 if reads else answer.status not in (401, 500)
            else:
                ok = answer.status == 401 and answer.challenge.startswith("Bearer")
            if not ok:
                wrong.append(f"{method} {route} {credential}: {answer.status} {answer.body[:120]!r}")
    assert not wrong, f"{name}: {len(wrong)} answers wrong:\n" + "\n".join(wrong)


def raw_request(url: str, method: str, path: str, authorization: str | None, body: bytes) -> Answer:
    """One request written byte for byte (an HTTP client refuses to send `Bearer ` with its trailing space),
    with `Connection: close`, its answer read to the end."""
    host, port = url.removeprefix("http://").split(":")
    head = [f"{method} {path} HTTP/1.1", "Host: test", "Connection: close", f"Content-Length: {len(body)}"]
    head += ["Content-Type: application/json"] if body else []
    head += [f"Authorization: {authorization}"] if authorization is not None else []
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    header, _, content = b"".join(chunks).partition(b"\r\n\r\n")
    status, *lines = header.decode("latin-1").split("\r\n")
    challenge = "www-authenticate:"
    challenges = [line[len(challenge) :].strip() for line in lines if line.lower().startswith(challenge)]
    return Answer(int(status.split()[1]), challenges[0] if challenges else "", content)


async def check_served(name: str, url: str, token: str) -> None:
    """`check_every_route` over real HTTP at `url`, a service's root (`http://host:port[/prefix]`)."""
    base, _, prefix = url.removeprefix("http://").partition("/")
    prefix = f"/{prefix}" if prefix else ""

    async def send(method: str, route: str, authorization: str | None, body: bytes) -> Answer:
        return raw_request(f"http://{base}", method, prefix + route, authorization, body)

    await check_every_route(name, token, send)
