"""The kit's guards in-process: bearer auth, JSON shape checks, in-flight item budget, secret hygiene."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from corrgrpo_common import MemoryStore, Scored, ServiceSettings, add_score_route, create_app
from corrgrpo_common.app import OPEN_READINESS
from corrgrpo_common.guards.auth import BearerAuth
from corrgrpo_common.guards.json_checks import Checked, JsonLimits, Problem, check_json
from corrgrpo_common.guards.parsed_json import PARSED_BODY, PARSED_JSON, ParsedJsonRequest
from corrgrpo_common.store.redis_store import RedisStore, redacted
from corrgrpo_proto import ComponentSpec, ItemError, ScoreRequest
from corrgrpo_proto.common import WireModel

JSON = {"content-type": "application/json"}


class Item(WireModel):
    id: str | None = None
    value: float
    extra: object = None


class Request(ScoreRequest[Item]):
    pass


def make(
    settings: ServiceSettings,
    gate: asyncio.Event | None = None,
    root_path: str = "",
) -> httpx.AsyncClient:
    """A toy service's client; under `root_path` a path keeps that prefix, as behind Ray Serve's proxy."""

    async def scorer(items: list[Item]) -> Sequence[Scored | ItemError]:
        if gate is not None:
            await gate.wait()
        return [Scored({"a": item.value}, {"extra": item.extra}) for item in items]

    app = create_app("toy", "0", [ComponentSpec(name="a", min=0, max=None)], settings, store=MemoryStore())
    add_score_route(app, Request, scorer)
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    return httpx.AsyncClient(transport=transport, base_url="http://toy")


def test_defaults_bind_loopback_and_hide_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORRGRPO_HOST", raising=False)
    monkeypatch.setenv("CORRGRPO_API_TOKEN", "tok-abc123-secret")
    settings = ServiceSettings()
    assert settings.host == "127.0.0.1"
    assert settings.api_token is not None and settings.api_token.get_secret_value() == "tok-abc123-secret"
    assert "tok-abc123-secret" not in repr(settings) + str(settings) + settings.model_dump_json()


async def test_bearer_token_guards_every_route_but_the_open_ones() -> None:
    async with make(ServiceSettings(api_token="s3cret")) as client:
        body = {"items": [{"value": 1}]}
        refused = await client.post("/v1/score", json=body)
        assert refused.status_code == 401
        assert refused.json()["error"] == "unauthorized"
        assert refused.headers["www-authenticate"].startswith("Bearer")
        for wrong in ("Bearer wrong", "Basic s3cret", "Bearer ", "Bearer", "Bearer s3cret2"):
            refused = await client.post("/v1/score", json=body, headers={"Authorization": wrong})
            assert refused.status_code == 401, wrong
        assert (await client.get("/v1/components")).status_code == 401
        assert (await client.get("/nowhere")).status_code == 401  # open only when named: 401, not 404
        assert (
            await client.post("/v1/score", json=body, headers={"Authorization": "Bearer s3cret"})
        ).status_code == 200
        assert (
            await client.get("/v1/components", headers={"authorization": "bearer s3cret"})
        ).status_code == 200
        for open_path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
            assert (await client.get(open_path)).status_code == 200, open_path
        assert (await client.get("/readyz")).json()["checks"]["auth"] == "bearer token"
        metrics = (await client.get("/metrics")).text
        assert 'corrgrpo_rejections_total{reason="unauthorized",service="toy"} 8.0' in metrics


def test_an_empty_token_never_turns_auth_on() -> None:
    with pytest.raises(ValueError, match="empty"):
        ServiceSettings(api_token="")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("never reached")

    with pytest.raises(ValueError, match="empty bearer token"):
        BearerAuth(app, "", (), lambda: None)


async def test_no_token_configured_means_open_and_readyz_says_so() -> None:
    async with make(ServiceSettings()) as client:
        assert (await client.post("/v1/score", json={"items": [{"value": 1}]})).status_code == 200
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["checks"]["auth"] == OPEN_READINESS


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b'{"items":[{"value":1,"extra":' + b"[" * 100_000 + b"]" * 100_000 + b"}]}", 422, "json_too_deep"),
        (b'{"items":[{"value":1,"extra":' + b"[" * 500 + b"]" * 500 + b"}]}", 422, "json_too_deep"),
        (b'{"items":[{"value":NaN}]}', 422, "non_finite_number"),
        (b'{"items":[{"value":1,"extra":-Infinity}]}', 422, "non_finite_number"),
        (b'{"items":[{"value":1,"extra":1e999}]}', 422, "non_finite_number"),
        (b'{"items":[{"value":1,"id":"\xff\xfe"}]}', 400, "invalid_encoding"),
        (b'{"items":[{"value":1,"id":"\\ud800"}]}', 422, "invalid_string"),
        (b'{"items":[{"value":1,"extra":{"\\udc00":1}}]}', 422, "invalid_string"),
        (b'{"items":[{"value":1', 422, "validation_error"),
    ],
)
async def test_hostile_json_gets_a_4xx(body: bytes, status: int, error: str) -> None:
    async with make(ServiceSettings()) as client:
        response = await client.post("/v1/score", content=body, headers=JSON)
        assert (response.status_code, response.json()["error"]) == (status, error), response.text


def test_check_json_accepts_what_is_fine() -> None:
    paired = (
        b'{"s": "\\ud83d\\ude00", "code": "x = \'\\\\ud800\'", '
        b'"n": [1.5, -2e10, 0.1, 12345678901234567890123, [[{}]]]}'
    )
    checked = check_json(paired, JsonLimits(max_depth=8))
    assert isinstance(checked, Checked) and checked.document == json.loads(paired)
    assert isinstance(check_json(b'{"a": [[[]]]}', JsonLimits(max_depth=3)), Problem)
    assert not isinstance(check_json(b'{"a": [[]]}', JsonLimits(max_depth=3)), Problem)


async def test_fastapi_gets_the_guards_document_and_body_without_reading_or_copying_them_again() -> None:
    async def no_body() -> dict[str, object]:
        raise AssertionError("the body was read again")

    body = b'{"items": [1]}'
    scope = {"type": "http", "method": "POST", "headers": [], PARSED_JSON: {"items": [1]}, PARSED_BODY: body}
    request = ParsedJsonRequest(scope, no_body)
    assert await request.json() == {"items": [1]}
    assert await request.body() is body  # starlette's `body` joins a copy: megabytes for inline test cases


async def test_extra_deep_but_allowed_nesting_scores() -> None:
    async with make(ServiceSettings(max_json_depth=200)) as client:
        body = b'{"items":[{"value":1,"extra":' + b"[" * 150 + b"]" * 150 + b"}]}"
        assert (await client.post("/v1/score", content=body, headers=JSON)).status_code == 200


async def test_overload_gets_429_with_retry_after_and_recovers() -> None:
    gate = asyncio.Event()
    async with make(ServiceSettings(max_inflight_items=3, retry_after_s=7), gate) as client:
        first = asyncio.create_task(client.post("/v1/score", json={"items": [{"value": 1}, {"value": 2}]}))
        while 'corrgrpo_inflight_items{service="toy"} 2.0' not in (await client.get("/metrics")).text:
            await asyncio.sleep(0.01)  # the first batch is now held inside the scorer
        refused = await client.post("/v1/score", json={"items": [{"value": 3}, {"value": 4}]})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "7"
        assert refused.json()["error"] == "overloaded"
        gate.set()
        assert (await first).status_code == 200
        assert (
            await client.post("/v1/score", json={"items": [{"value": 3}, {"value": 4}]})
        ).status_code == 200
        # a batch larger than the whole budget still goes through when nothing else is in flight
        assert (
            await client.post("/v1/score", json={"items": [{"value": v} for v in range(5)]})
        ).status_code == 200
        metrics = (await client.get("/metrics")).text
        assert 'corrgrpo_rejections_total{reason="overload",service="toy"} 1.0' in metrics
        assert 'corrgrpo_inflight_items{service="toy"} 0.0' in metrics


async def test_redis_password_never_in_errors() -> None:
    assert redacted("redis://:pw123@127.0.0.1:1/0") == "redis://:***@127.0.0.1:1/0"
    store = RedisStore("redis://:pw123@127.0.0.1:1/0", secret="s" * 16, timeout_s=0.5)
    with pytest.raises(Exception) as caught:
        await store.ping()
    assert "pw123" not in str(caught.value) and "***" in str(caught.value)
    await store.close()


@pytest.mark.parametrize("prefix", ["", "/toy"])
async def test_full_budget_sheds_before_reading_the_body(prefix: str) -> None:
    gate = asyncio.Event()
    score, held_items = f"{prefix}/v1/score", {"items": [{"value": 1}, {"value": 2}]}
    async with make(ServiceSettings(max_inflight_items=2), gate, root_path=prefix) as client:
        held = asyncio.create_task(client.post(score, json=held_items))
        while 'inflight_items{service="toy"} 2.0' not in (await client.get(f"{prefix}/metrics")).text:
            await asyncio.sleep(0.01)
        shed = await client.post(score, content=b"{not even json", headers=JSON)
        assert (shed.status_code, shed.json()["error"]) == (429, "overloaded")  # refused before parsing
        gate.set()
        assert (await held).status_code == 200
        assert (await client.post(score, content=b"{not even json", headers=JSON)).status_code == 422
