"""An item the service could not score has no reward at all, and is not remembered as if it had been scored.

A total of 0 (or components) on an error would be a reward a policy learns from a service fault; a remembered
error would answer a later, healthy request with yesterday's fault."""

from __future__ import annotations

from .test_app import make


async def test_an_item_error_has_neither_total_nor_components() -> None:
    async with make([]) as client:
        refused = (await client.post("/v1/score", json={"items": [{"value": 1}, {"value": -1}]})).json()[
            "results"
        ]
        crashed = (await client.post("/v1/score", json={"items": [{"value": 13}]})).json()["results"]
    assert refused[0]["total"] == 1.5 and refused[0]["error"] is None  # the control: 1·1 + 0.5·1
    for result, code in ((refused[1], "negative"), (crashed[0], "internal")):
        assert result["error"]["code"] == code
        assert (result["total"], result["components"]) == (None, None), result


async def test_an_item_error_is_scored_again_next_time() -> None:
    calls: list[int] = []
    async with make(calls) as client:
        for _ in range(2):
            body = (await client.post("/v1/score", json={"items": [{"id": "bad", "value": -1}]})).json()
            assert body["results"][0]["error"]["code"] == "negative"
        assert calls == [1, 1]
        for _ in range(2):  # the control: a scored item with an id is scored once
            await client.post("/v1/score", json={"items": [{"id": "good", "value": 2}]})
        assert calls == [1, 1, 1]
