"""OpenRLHF labels are held to what the same item gets on `/v1/score` (issue 26.6), against real service
processes.

Each label used to be `json.loads`ed bare: a 3 MB inline reference refused with 413 on `/v1/score` was taken
there (30 s, the code service's RSS 70 MB -> 1 GB), and a label of 100,000 `[` answered 500.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from .helpers import PROBLEM, SCORING_SERVICES, Services, assert_healthy, valid_item

LIMIT_DEPTH = 64  # CORRGRPO_MAX_JSON_DEPTH's default; an item sits at level 3 of a /v1/score body


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def with_key(body: str) -> str:
    return '{"x": ' + body + "}"


# Labels that are JSON objects over a limit, written as the item they make (completion added by
# `as_score_body`).
OVER_LIMITS = {
    "nested past the depth limit": (with_key(nested(LIMIT_DEPTH - 2)), 422, "json_too_deep", None),
    "NaN": (with_key("NaN"), 422, "non_finite_number", None),
    "overflowing number": (with_key("1e999"), 422, "non_finite_number", None),
    "unpaired surrogate": (with_key(r'"\ud800"'), 422, "invalid_string", None),
    "an array over the entry cap": (with_key(json.dumps([0] * 4097)), 413, "too_many_items", "x"),
    "over the value cap": (with_key(json.dumps([[0] * 4000] * 251)), 413, "too_many_values", None),
}


def openrlhf(http: httpx.Client, url: str, labels: list[str], completion: str = "answer") -> httpx.Response:
    n = len(labels)
    return http.post(
        f"{url}/v1/openrlhf", json={"query": [completion] * n, "prompts": [""] * n, "labels": labels}
    )


def as_score_body(label: str, completion: str = "answer") -> bytes:
    """The /v1/score body whose one item is what the object label `label` makes."""
    return (
        b'{"items": [' + label[:-1].encode() + b', "completion": ' + json.dumps(completion).encode() + b"}]}"
    )


def good_label(service_name: str, item: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in item.items() if k != "completion"})


def refused(response: httpx.Response, status: int, error: str, loc: str) -> None:
    assert response.status_code == status, response.text[:300]
    body = response.json()
    assert body["error"] == error and body["message"].startswith(f"{loc}: "), body
    assert body["details"][0]["loc"] == loc, body


@pytest.mark.parametrize("name", SCORING_SERVICES)
@pytest.mark.parametrize(("label", "status", "error", "at"), OVER_LIMITS.values(), ids=OVER_LIMITS.keys())
def test_a_label_over_a_limit_is_refused_as_its_item_is_on_score(
    name: str, services: Services, http: httpx.Client, label: str, status: int, error: str, at: str | None
) -> None:
    service = services(name)
    good = good_label(name, valid_item(service))
    refused(openrlhf(http, service.url, [good, label]), status, error, "labels.1" + (f".{at}" if at else ""))
    on_score = http.post(
        f"{service.url}/v1/score", content=as_score_body(label), headers={"content-type": "application/json"}
    )
    assert (on_score.status_code, on_score.json()["error"]) == (status, error), on_score.text[:300]
    assert_healthy(service, http)


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_depth_counts_as_it_does_for_the_item_on_score(
    name: str, services: Services, http: httpx.Client
) -> None:
    """One level under the limit passes the limits on both routes (then fails the schema: `x` is no field)."""
    url = services(name).url
    within = with_key(nested(LIMIT_DEPTH - 3))
    for response in (
        openrlhf(http, url, [within]),
        http.post(f"{url}/v1/score", content=as_score_body(within)),
    ):
        assert response.status_code == 422 and response.json()["error"] == "validation_error", response.text[
            :300
        ]


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_labels_share_one_value_budget(name: str, services: Services, http: httpx.Client) -> None:
    url = services(name).url
    half = with_key(json.dumps([[0] * 4000] * 150))  # 600k values: one passes the limits, two do not
    alone = openrlhf(http, url, [half])
    assert alone.status_code == 422 and alone.json()["error"] == "validation_error"
    refused(openrlhf(http, url, [half, half]), 413, "too_many_values", "labels.1")


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_100k_open_brackets_never_answer_500(name: str, services: Services, http: httpx.Client) -> None:
    """In an object: too deep for the parser, 422. Bare: the label fills the service's label field, and is
    answered as that item on /v1/score (code: an unknown task_id; toolcall: a ground truth over its cap;
    agentdojo has none)."""
    service = services(name)
    good = good_label(name, valid_item(service))
    refused(openrlhf(http, service.url, [good, '{"x": ' + "[" * 100_000]), 422, "json_too_deep", "labels.1")
    bare = openrlhf(http, service.url, [good, "[" * 100_000])
    if name == "code":
        # unscored
        assert bare.status_code == 422 and bare.json()["details"][0]["loc"] == "labels.1", bare.text[:300]
        (item,) = http.post(
            f"{service.url}/v1/score", json={"items": [{"task_id": "[" * 100_000, "completion": "x"}]}
        ).json()["results"]
        assert item["error"]["code"] == "unknown_task"
    elif name == "toolcall":
        refused(bare, 413, "field_too_long", "labels.1.ground_truth")
    else:
        assert bare.status_code == 422 and bare.json()["details"][0]["loc"] == "labels.1", bare.text[:300]
    assert_healthy(service, http)


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def test_a_3_mb_inline_reference_is_413_naming_the_label_quickly_and_cheaply(
    services: Services, http: httpx.Client
) -> None:
    service = services("code")
    good = json.dumps({"problem": PROBLEM})
    huge = json.dumps({"problem": {**PROBLEM, "reference": PROBLEM["reference"] + "#" * 3_000_000}})
    before, started = peak_rss_kib(service.process.pid), time.monotonic()
    for index in range(3):
        labels = [good] * index + [huge]
        refused(
            openrlhf(http, service.url, labels), 413, "field_too_long", f"labels.{index}.problem.reference"
        )
    assert time.monotonic() - started < 20  # the issue measured 30 s for one
    assert peak_rss_kib(service.process.pid) - before < 150 * 1024  # and +930 MB
    on_score = http.post(f"{service.url}/v1/score", json={"items": [{"completion": "x", **json.loads(huge)}]})
    assert on_score.status_code == 413 and on_score.json()["details"][0]["loc"] == "items.0.problem.reference"


def test_a_bare_ground_truth_over_its_cap_is_413_as_on_score(services: Services, http: httpx.Client) -> None:
    service = services("toolcall")
    long = "<tool_call>\n" + "x" * 40_000 + "\n</tool_call>"
    refused(openrlhf(http, service.url, ["plain", long]), 413, "field_too_long", "labels.1.ground_truth")
    refused(
        openrlhf(http, service.url, [json.dumps({"ground_truth": long})]),
        413,
        "field_too_long",
        "labels.0.ground_truth",
    )
    call = json.dumps({"name": "f", "parameters": {"x": "x" * 100}})  # a scorable ground truth under the cap
    fine = openrlhf(http, service.url, ["plain", f"<tool_call>\n{call}\n</tool_call>"])
    assert fine.status_code == 200 and len(fine.json()["rewards"]) == 2
