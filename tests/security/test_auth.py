"""Bearer auth in each shape a service is reached in (issue 48), by `corrgrpo_testing.auth_checks`: no token,
a wrong one, an empty one (`Bearer ` and `Bearer`), another scheme and the right one, on every route of every
declared service.

- served: `python -m corrgrpo_<name>` (our server) over real HTTP, each request written on a raw socket, and
  the same behind the compose stack's nginx (deploy/nginx);
- prefixed: the app under a prefix as Ray Serve's proxy mounts it, the prefix kept in the path and named in
  `root_path` (tests/ray_serve/test_auth.py runs the same checks on a real Serve deployment).
An empty or unsendable `CORRGRPO_API_TOKEN` refuses to start in one line.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corrgrpo_common import declared
from corrgrpo_testing.auth_checks import Answer, check_every_route, check_served
from corrgrpo_testing.servers import SERVICE_PYTHON, ServiceProcess, nginx_in_front, start_service

TOKEN = f"tok-{uuid.uuid4().hex}"
PREFIX = "/svc"  # as serve.yaml's route_prefix `/code`
NGINX_DIR = Path(__file__).resolve().parents[2] / "deploy" / "nginx"
SCORED = re.compile(r'corrgrpo_requests_total\{route="/v1/score",service="\w+",status="200"\} 1.0')


@pytest.fixture(scope="module", params=list(declared()))
def served(request: pytest.FixtureRequest) -> Iterator[ServiceProcess]:
    with start_service(request.param, env={"CORRGRPO_API_TOKEN": TOKEN}, timeout_s=120) as service:
        yield service


async def test_every_route_of_a_served_service_needs_the_token(served: ServiceProcess) -> None:
    await check_served(served.name, served.url, TOKEN)


async def test_every_route_behind_nginx_needs_the_token(served: ServiceProcess) -> None:
    with nginx_in_front(served.url, NGINX_DIR) as port:
        await check_served(served.name, f"http://127.0.0.1:{port}", TOKEN)


@pytest.mark.parametrize("name", list(declared()))
async def test_every_route_under_a_prefix_needs_the_token(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("CORRGRPO_API_TOKEN", TOKEN)
    app = declared()[name].build()
    # the path `/svc/v1/score` with root_path `/svc`: the scope Serve's proxy gives
    transport = httpx.ASGITransport(app=app, root_path=PREFIX)
    client = httpx.AsyncClient(transport=transport, base_url="http://x")
    async with app.router.lifespan_context(app), client:

        async def send(method: str, route: str, authorization: str | None, body: bytes) -> Answer:
            headers = {"content-type": "application/json"} if body else {}
            headers |= {"authorization": authorization} if authorization is not None else {}
            answer = await client.request(method, PREFIX + route, content=body, headers=headers, timeout=60)
            return Answer(answer.status_code, answer.headers.get("www-authenticate", ""), answer.content)

        await check_every_route(name, TOKEN, send)
        metrics = (await client.get(f"{PREFIX}/metrics")).text
    assert SCORED.search(metrics) and f'"{PREFIX}' not in metrics, metrics  # the route, never the path


@pytest.mark.parametrize("token", ["", " ", "k7q2 z9x4", "w3m8\tv6p1"])
def test_an_empty_or_unsendable_token_refuses_to_start_in_one_line(token: str) -> None:
    env = {**os.environ, "CORRGRPO_API_TOKEN": token}
    command = [SERVICE_PYTHON, "-m", "corrgrpo_toolcall", "--port", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "refusing to start: CORRGRPO_API_TOKEN: set but empty" in done.stderr
    assert all(part not in done.stderr for part in token.split())  # a secret is never echoed
