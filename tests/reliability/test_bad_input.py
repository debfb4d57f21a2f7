"""Hostile and malformed requests against real service processes: a clear 4xx or a per-item error, never a 5xx."""

from __future__ import annotations

import random

import httpx
import pytest

from .helpers import BODY_LIMIT, SCORING_SERVICES, Services, assert_healthy, valid_item

JSON = {"content-type": "application/json"}
HOSTILE_BODIES = {
    "nested 100k lists": b'{"items": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}",
    "nested 200 objects": b'{"items": [' + b'{"a":' * 200 + b"1" + b"}" * 200 + b"]}",
    "NaN literal": b'{"items": [{"id": "x"}], "weights": {"format": NaN}}',
    "Infinity literal": b'{"items": [Infinity]}',
    "overflowing float": b'{"items": [{"id": "x"}], "weights": {"format": 1e999}}',
    "invalid UTF-8": b'{"items": [{"id": "\xc3\x28\xff"}]}',
    "unpaired surrogate": b'{"items": [{"id": "\\udbff"}]}',
    "truncated JSON": b'{"items": [{"id": ',
    "not JSON": b"\x00\x01\x02binary\xfe garbage",
    "JSON array": b"[1, 2, 3]",
    "empty body": b"",
    "over the body limit": b'{"items": ["' + b"a" * (BODY_LIMIT + 1) + b'"]}',
}


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_hostile_bodies_get_a_4xx_error_body(name: str, services: Services, http: httpx.Client) -> None:
    service = services(name)
    for label, body in HOSTILE_BODIES.items():
        response = http.post(f"{service.url}/v1/score", content=body, headers=JSON)
        assert 400 <= response.status_code < 500, f"{label}: {response.status_code} {response.text[:300]}"
        assert {"error", "message"} <= set(response.json()), label
    assert http.post(f"{service.url}/v1/score", content=HOSTILE_BODIES["over the body limit"], headers=JSON).status_code == 413
    assert_healthy(service, http)


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_schema_violations_are_422_naming_the_field(name: str, services: Services, http: httpx.Client) -> None:
    service = services(name)
    item = valid_item(service)
    first_field = next(iter(item))
    missing = {k: v for k, v in item.items() if k != first_field}
    cases = {
        f"items.0.{first_field}": {"items": [missing]},
        "items.0.surplus": {"items": [{**item, "surplus": 1}]},
        "items": {"items": []},
        "weights.no_such_component": {"items": [item], "weights": {"no_such_component": 1.0}},
        "extra_top_level": {"items": [item], "extra_top_level": True},
    }
    for loc, body in cases.items():
        response = http.post(f"{service.url}/v1/score", json=body)
        assert response.status_code == 422, f"{loc}: {response.status_code} {response.text[:300]}"
        assert any(loc in d["loc"] for d in response.json()["details"]), (loc, response.json())
    assert_healthy(service, http)


def garbage_completions() -> list[str]:
    rng = random.Random(9)
    noise = bytes(rng.randrange(256) for _ in range(4000)).decode("latin-1")
    return [
        noise,
        "```python\n" + noise + "\n```",
        "```python\n\x00\x00import os\x00\n```",
        "```python\n" + "(" * 5000 + "\n```",  # deeper than the parser's nesting limit
        "```python\n" + "x = 1\n" * 2_000 + "```",  # a long program (200k lines take the code service ~1 min)
        '\ufeff\u202e\U0001f4a9 <tool_call>\n{"name": \x7f}\n</tool_call>',
        "a" * (3 * 1024 * 1024),  # a 3 MB completion, under the 4 MiB body limit
    ]


@pytest.mark.parametrize("name", ["toolcall", "code"])
def test_garbage_and_huge_completions_get_per_item_results(name: str, services: Services, http: httpx.Client) -> None:
    service = services(name)
    completions = garbage_completions()
    for completion in completions:
        response = http.post(f"{service.url}/v1/score", json={"items": [valid_item(service, completion)]})
        assert response.status_code == 200, f"{completion[:40]!r}: {response.status_code} {response.text[:300]}"
        (result,) = response.json()["results"]
        assert result["error"] is not None or result["components"], result
        if name == "code" and result["error"] is None:
            assert result["components"]["correct"] == 0.0, (completion[:40], result)
    assert_healthy(service, http)
