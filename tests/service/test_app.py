"""The server kit in-process: envelope, totals, idempotency, errors, limits (no network)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import httpx
import pytest

from corrgrpo_common import MemoryStore, Scored, ServiceSettings, add_score_route, create_app
from corrgrpo_proto import ComponentSpec, ItemError, ScoreRequest
from corrgrpo_proto.common import WireModel


class Item(WireModel):
    id: str | None = None
    value: float


class Request(ScoreRequest[Item]):
    pass


SPECS = [ComponentSpec(name="a", min=0, max=1), ComponentSpec(name="b", min=0, max=10, weight=0.5)]


def make(calls: list[int], settings: ServiceSettings | None = None) -> httpx.AsyncClient:
    async def scorer(items: list[Item]) -> Sequence[Scored | ItemError]:
        calls.append(len(items))
        out: list[Scored | ItemError] = []
        for item in items:
            if item.value < 0:
                out.append(ItemError(code="negative", message="value must be >= 0"))
            elif item.value == 13:
                raise RuntimeError("unlucky")
            else:
                out.append(Scored({"a": 1.0, "b": item.value}, {"seen": item.value}))
        return out

    app = create_app("toy", "0", SPECS, settings or ServiceSettings(), store=MemoryStore())
    add_score_route(app, Request, scorer)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://toy")


async def test_totals_use_default_and_request_weights() -> None:
    async with make([]) as client:
        body = (await client.post("/v1/score", json={"items": [{"value": 4}]})).json()
        assert body["results"][0]["total"] == pytest.approx(1.0 + 0.5 * 4)
        body = (await client.post("/v1/score", json={"items": [{"value": 4}], "weights": {"a": 0}})).json()
        assert body["results"][0]["total"] == pytest.approx(2.0)
        assert body["results"][0]["info"] == {"seen": 4.0}


async def test_same_id_same_content_is_scored_once() -> None:
    calls: list[int] = []
    async with make(calls) as client:
        items = [{"id": "x", "value": 1}, {"value": 2}]
        first = (await client.post("/v1/score", json={"items": items})).json()
        second = (await client.post("/v1/score", json={"items": items})).json()
        assert first == second
        assert calls == [2, 1]  # the item with an id came from the cache the second time
        changed = (await client.post("/v1/score", json={"items": [{"id": "x", "value": 3}]})).json()
        assert changed["results"][0]["components"]["b"] == 3.0


async def test_per_item_error_and_scorer_crash_do_not_fail_the_batch() -> None:
    async with make([]) as client:
        body = (await client.post("/v1/score", json={"items": [{"value": 1}, {"value": -1}]})).json()
        assert body["results"][0]["error"] is None
        assert body["results"][1]["error"] == {"code": "negative", "message": "value must be >= 0"}
        response = await client.post("/v1/score", json={"items": [{"value": 13}]})
        assert response.status_code == 200
        assert response.json()["results"][0]["error"]["code"] == "internal"


async def test_validation_errors_name_the_field() -> None:
    async with make([]) as client:
        response = await client.post("/v1/score", json={"items": [{"value": 1}, {"valu": 2}]})
        assert response.status_code == 422
        locs = {d["loc"] for d in response.json()["details"]}
        assert {"items.1.value", "items.1.valu"} <= locs
        response = await client.post("/v1/score", json={"items": [{"value": 1}], "weights": {"zzz": 1}})
        assert response.status_code == 422
        assert response.json()["details"][0]["loc"] == "weights.zzz"
        assert (await client.post("/v1/score", json={"items": []})).status_code == 422
        response = await client.post(
            "/v1/score", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert response.status_code == 422


async def test_body_limit_gives_413() -> None:
    async with make([], ServiceSettings(max_body_bytes=1000)) as client:
        response = await client.post("/v1/score", json={"items": [{"value": 1, "id": "x" * 2000}]})
        assert response.status_code == 413
        assert response.json()["error"] == "payload_too_large"


async def test_kit_endpoints() -> None:
    async with make([]) as client:
        assert (await client.get("/healthz")).json()["status"] == "ok"
        checks = {"store": "ok", "auth": "none (CORRGRPO_API_TOKEN unset): routes open"}
        assert (await client.get("/readyz")).json() == {"ready": True, "service": "toy", "checks": checks}
        assert [c["name"] for c in (await client.get("/v1/components")).json()["components"]] == ["a", "b"]
        await client.post("/v1/score", json={"items": [{"value": 1}]})
        metrics = (await client.get("/metrics")).text
        assert 'corrgrpo_items_total{outcome="scored",service="toy"} 1.0' in metrics
        assert (await client.get("/nope")).json()["error"] == "not_found"


async def test_every_request_is_counted_under_its_route_and_status_a_crash_as_500() -> None:
    app = create_app("toy", "0", SPECS, ServiceSettings(), store=MemoryStore())

    @app.get("/crash")
    async def crash() -> None:
        raise ValueError("boom")

    # starlette re-raises after its 500 is sent
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://toy") as toy:
        assert (await toy.get("/crash")).status_code == 500
        assert (await toy.get("/healthz")).status_code == 200
        assert (await toy.get("/nowhere")).status_code == 404
        metrics = (await toy.get("/metrics")).text
    counted = {
        (route, status): float(value)
        for route, status, value in re.findall(
            r'corrgrpo_requests_total\{route="([^"]*)",service="toy",status="(\d+)"\} (\S+)', metrics
        )
    }
    assert counted == {("/crash", "500"): 1.0, ("/healthz", "200"): 1.0, ("unmatched", "404"): 1.0}
