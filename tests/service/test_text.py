"""Text a scorer echoes is made valid UTF-8 JSON where results and error bodies are built (in-process; the
real services are driven in tests/security/test_candidate_text.py and tests/agentdojo/test_untrusted.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx

from corrgrpo_common import MemoryStore, Scored, ServiceSettings, add_score_route, create_app
from corrgrpo_common.text import valid_json, valid_text
from corrgrpo_proto import ComponentSpec, ItemError, ScoreRequest
from corrgrpo_proto.common import WireModel

LONE = "\ud800"


def test_lone_surrogates_become_replacement_characters_and_pairs_their_character() -> None:
    assert valid_text("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert valid_text("\ud83d\ude00") == "\U0001f600"  # a high-low pair is one character, as UTF-16 spells it
    assert valid_text("\udc00\ud800") == "\ufffd\ufffd"  # low before high is no pair
    text = "plain \x00 é 😀"
    assert valid_text(text) is text
    info = {"stage": "passed", "t": 0.1, "n": 3, "ok": True, "error": None}
    assert valid_json(info) is info  # the usual info is passed on without a copy
    nested = {LONE: [LONE, {"k": (LONE, 1)}], "x": 1.5}
    assert valid_json(nested) == {"\ufffd": ["\ufffd", {"k": ["\ufffd", 1]}], "x": 1.5}


class Item(WireModel):
    id: str | None = None
    kind: str


class Request(ScoreRequest[Item]):
    pass


async def scorer(items: list[Item]) -> Sequence[Scored | ItemError]:
    if any(item.kind == "raise" for item in items):
        raise RuntimeError(f"the scorer quotes a candidate: {LONE}")
    return [
        ItemError(code="candidate", message=f"echo {LONE}")
        if item.kind == "error"
        else Scored(
            {"a": 1.0}, {"error": f"echo {LONE}", LONE: [{"deep": LONE}]} if item.kind == "info" else {}
        )
        for item in items
    ]


def client() -> httpx.AsyncClient:
    app = create_app(
        "toy", "0", [ComponentSpec(name="a", min=0, max=1)], ServiceSettings(), store=MemoryStore()
    )
    add_score_route(app, Request, scorer)

    @app.get("/crash")
    async def crash() -> None:
        raise ValueError(LONE)

    # Starlette re-raises an unhandled error after its 500 is sent (for the server to log): the answer is what
    # counts
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://toy"
    )


def strict(response: httpx.Response) -> dict:
    document = json.loads(response.content.decode("utf-8"))
    assert LONE not in json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass").decode(
        "utf-8"
    )
    return document


async def test_results_and_errors_echoing_a_surrogate_are_valid_utf8_json() -> None:
    async with client() as toy:
        items = [{"id": "1", "kind": "info"}, {"id": "2", "kind": "error"}, {"id": "3", "kind": "fine"}]
        response = await toy.post("/v1/score", json={"items": items})
        assert response.status_code == 200, response.text
        with_info, with_error, fine = strict(response)["results"]
        assert with_info["info"] == {"error": "echo \ufffd", "\ufffd": [{"deep": "\ufffd"}]}
        assert with_error["error"] == {"code": "candidate", "message": "echo \ufffd"}
        assert fine["components"] == {"a": 1.0}
        # from the cache
        assert strict(await toy.post("/v1/score", json={"items": items})) == strict(response)
        batch = await toy.post("/v1/score", json={"items": [{"kind": "raise"}, {"kind": "fine"}]})
        assert batch.status_code == 200 and strict(batch)["results"][0]["error"]["message"].endswith("\ufffd")
        crashed = await toy.get("/crash")
        assert crashed.status_code == 500 and strict(crashed)["message"] == "ValueError: \ufffd"
