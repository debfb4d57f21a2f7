"""What a candidate writes can fail nobody but itself (issue 26.5), against the real code service over HTTP.

A lone UTF-16 surrogate in one candidate's error text (a `str` can hold one, no UTF-8 encoder takes it) made
serialising the response fail: every neighbour lost its reward, and the client's retry failed the same way.
Each case is one item in a batch between two right solutions, with ids (the idempotency cache stores results).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from corrgrpo_testing.bodies import valid_utf8_json
from corrgrpo_testing.servers import ServiceProcess, start_service

ADD = {
    "task_id": "security/text",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    "reference": "def add(a, b):\n    return a + b\n",
}
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
CHAIN = ("format", "syntax", "compile", "runtime", "correct", "ast_similarity")


def solution(body: str) -> str:
    return f"```python\nimport json, os\n\n{body}\n```"


# (the candidate, the text its item's info.error must hold once made valid)
CANDIDATES = {
    "exception message": (
        solution("def add(a, b):\n    raise ValueError(chr(0xD800))"),
        "ValueError: \ufffd",
    ),
    # a class *name* cannot hold a surrogate (CPython refuses it), but what the exception says of itself can
    "exception that describes itself": (
        solution(
            "class Oops(Exception):\n    def __str__(self):\n        return 'x' + chr(0xDFFF)\n\ndef add(a, "
            "b):\n    raise Oops()"
        ),
        "Oops: x\ufffd",
    ),
    "bytes decoded with surrogateescape": (
        solution("def add(a, b):\n    raise ValueError(b'\\xff\\xfe ok'.decode('utf-8', 'surrogateescape'))"),
        "ValueError: \ufffd\ufffd ok",
    ),
    "NUL bytes around it": (
        solution("def add(a, b):\n    raise ValueError('\\x00' + chr(0xDBFF) + '\\x00')"),
        "\x00\ufffd\x00",
    ),
    "an assertion of its own, top-level": (
        solution("raise AssertionError(chr(0xDC80) * 3)"),
        "AssertionError: \ufffd\ufffd\ufffd",
    ),
    # straight onto the harness's channel, past the 300-character cap the harness puts on exception text
    "long text on the channel": (
        solution(
            "os.write(3, (json.dumps({'toplevel': ('\\ud800 long ' * 20000)}) + "
            "'\\n').encode())\nos._exit(1)\n"
            "def add(a, b):\n    return a + b"
        ),
        "\ufffd long \ufffd long ",
    ),
}


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    with start_service("code", env={"CORRGRPO_CODE_WORKERS": "2"}) as running:
        yield running


def score(service: ServiceProcess, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = httpx.post(f"{service.url}/v1/score", json={"items": items}, timeout=300)
    assert response.status_code == 200, response.text[:500]
    return valid_utf8_json(response)["results"]


@pytest.mark.parametrize(("candidate", "shown"), CANDIDATES.values(), ids=CANDIDATES.keys())
def test_one_candidate_s_text_never_fails_its_batch(
    service: ServiceProcess, candidate: str, shown: str
) -> None:
    problem = {**ADD, "reference": ADD["reference"] + f"# {uuid.uuid4().hex}\n"}
    ids = [uuid.uuid4().hex for _ in range(3)]
    items = [
        {"id": i, "completion": c, "problem": problem}
        for i, c in zip(ids, (RIGHT, candidate, RIGHT), strict=True)
    ]
    first, bad, last = results = score(service, items)
    for neighbour in (first, last):
        assert neighbour["error"] is None and all(neighbour["components"][name] == 1.0 for name in CHAIN), (
            neighbour
        )
    assert bad["error"] is None and bad["components"]["correct"] == 0.0
    assert shown in bad["info"]["error"], bad["info"]
    assert score(service, items) == results  # the retry is answered, from the idempotency cache


def test_a_reference_that_raises_one_fails_only_its_own_problem(service: ServiceProcess) -> None:
    """The problem's text is the client's, not a candidate's; its reference's failure is still only its
    items'."""
    broken = {
        **ADD,
        "task_id": "security/broken",
        "reference": "def add(a, b):\n    raise ValueError(chr(0xD800) + 'ref')\n",
    }
    fine, odd = score(
        service, [{"completion": RIGHT, "problem": ADD}, {"completion": RIGHT, "problem": broken}]
    )
    assert fine["components"]["correct"] == 1.0 and fine["info"]["t_ref"] is not None
    assert odd["components"]["correct"] == 1.0 and odd["components"]["efficiency"] == 0.0
    assert "\ufffdref" in odd["info"]["t_ref_error"]
