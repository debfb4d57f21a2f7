"""Hostile and malformed requests that a service must answer with a clear 4xx or a per-item result, never a
5xx, in each shape it is served in: tests/reliability/test_bad_input.py runs the checks on the service
process, tests/ray_serve through Serve's proxy under a route prefix with the token.
"""

from __future__ import annotations

import random
from typing import Any

import httpx

from corrgrpo_common import declared

BODY_LIMIT = 4 * 1024 * 1024
"""The services' `CORRGRPO_MAX_BODY_BYTES` here: a 5 MB body is refused, multi-megabyte completions scored."""

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


def check_hostile_bodies(
    http: httpx.Client, url: str, headers: dict[str, str] | None = None, limit: int = BODY_LIMIT
) -> None:
    """Each of HOSTILE_BODIES gets a 4xx with an error body; the one over BODY_LIMIT a 413 where the
    service's body limit (`limit`) is BODY_LIMIT."""
    for label, body in HOSTILE_BODIES.items():
        response = http.post(f"{url}/v1/score", content=body, headers={**JSON, **(headers or {})})
        assert 400 <= response.status_code < 500, f"{label}: {response.status_code} {response.text[:300]}"
        assert {"error", "message"} <= set(response.json()), label
        refused = label == "over the body limit" and limit == BODY_LIMIT
        assert not refused or response.status_code == 413, response.text[:300]


def check_schema_violations(
    http: httpx.Client, url: str, name: str, headers: dict[str, str] | None = None
) -> None:
    """Bodies that break the schema of service `name` are 422 naming the field."""
    item = declared()[name].example(None)
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
        response = http.post(f"{url}/v1/score", json=body, headers=headers)
        assert response.status_code == 422, f"{loc}: {response.status_code} {response.text[:300]}"
        assert any(loc in d["loc"] for d in response.json()["details"]), (loc, response.json())


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
        "a" * (3 * 1024 * 1024),  # a 3 MB completion, under BODY_LIMIT
    ]


def check_garbage_completions(
    http: httpx.Client, url: str, name: str, headers: dict[str, str] | None = None
) -> None:
    """Garbage and huge completions to service `name` get a per-item result (code: not correct)."""
    for completion in garbage_completions():
        item: dict[str, Any] = declared()[name].example(completion)
        response = http.post(f"{url}/v1/score", json={"items": [item]}, headers=headers)
        assert response.status_code == 200, (
            f"{completion[:40]!r}: {response.status_code} {response.text[:300]}"
        )
        (result,) = response.json()["results"]
        assert result["error"] is not None or result["components"], result
        if name == "code" and result["error"] is None:
            assert result["components"]["correct"] == 0.0, (completion[:40], result)
