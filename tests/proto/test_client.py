"""RewardClient retries, backoff, chunking and errors, against a scripted transport and a real service at
its cap."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from corrgrpo_proto import (
    AsyncRewardClient,
    RewardClient,
    RewardServiceError,
    RewardServiceUnavailable,
    encode_item,
)
from corrgrpo_proto.code import CodeItem, CodeScoreRequest
from corrgrpo_testing.servers import start_service


def echo_scores(request: httpx.Request) -> httpx.Response:
    items = json.loads(request.content)["items"]
    results = [
        {"id": item.get("id"), "components": {"x": float(item["v"])}, "total": float(item["v"])}
        for item in items
    ]
    return httpx.Response(200, json={"service": "t", "results": results})


class Script:
    """Answers with the given statuses first, then scores; records every request body."""

    def __init__(self, *statuses: int | type[Exception], retry_after: str | None = None) -> None:
        self.statuses = list(statuses)
        self.retry_after = retry_after
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content) if request.content else {})
        if self.statuses:
            status = self.statuses.pop(0)
            if isinstance(status, type):
                raise status("scripted failure", request=request)
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return httpx.Response(
                status, json={"error": "x", "message": f"scripted {status}"}, headers=headers
            )
        return echo_scores(request)


ITEMS = [{"id": str(i), "v": i} for i in range(10)]


def test_sync_chunks_keep_order() -> None:
    script = Script()
    client = RewardClient("http://svc", chunk_size=3, transport=httpx.MockTransport(script))
    results = client.score(ITEMS)
    assert [r.id for r in results] == [str(i) for i in range(10)]
    assert sorted(len(b["items"]) for b in script.bodies) == [1, 3, 3, 3]


def test_chunks_stay_under_their_byte_budget_and_a_larger_item_goes_alone() -> None:
    script = Script()
    items = [
        {"id": str(i), "v": i, "text": "x" * size} for i, size in enumerate([300, 300, 300, 2000, 10, 10])
    ]
    client = RewardClient("http://svc", chunk_bytes=1000, transport=httpx.MockTransport(script))
    results = client.score(items)
    assert [r.id for r in results] == [str(i) for i in range(6)]
    assert sorted([item["id"] for item in body["items"]] for body in script.bodies) == [
        ["0", "1", "2"],
        ["3"],
        ["4", "5"],
    ]


def test_an_empty_batch_sends_nothing() -> None:
    script = Script()
    assert RewardClient("http://svc", transport=httpx.MockTransport(script)).score([]) == []
    assert script.bodies == []


async def test_async_chunks_keep_order_and_bound_concurrency() -> None:
    script = Script()
    client = AsyncRewardClient(
        "http://svc", chunk_size=4, max_concurrency=2, transport=httpx.MockTransport(script)
    )
    results = await client.score(ITEMS, weights={"x": 2.0})
    assert [r.components["x"] for r in results] == [float(i) for i in range(10)]
    assert all(b["weights"] == {"x": 2.0} for b in script.bodies)
    await client.aclose()


@pytest.mark.parametrize("failure", [503, 500, 429, httpx.ConnectError, httpx.ReadError])
def test_retries_then_succeeds(failure: int | type[Exception]) -> None:
    script = Script(failure, failure)
    client = RewardClient("http://svc", backoff=0.001, transport=httpx.MockTransport(script))
    assert len(client.score(ITEMS)) == 10
    assert len(script.bodies) == 3


def test_the_body_is_encoded_once_as_json_for_every_attempt() -> None:
    sent: list[httpx.Request] = []

    def fail_then_score(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return echo_scores(request) if len(sent) > 1 else httpx.Response(503)

    client = RewardClient("http://svc", backoff=0.001, transport=httpx.MockTransport(fail_then_score))
    client.score(ITEMS, weights={"x": 0.5})
    assert sent[0].content == sent[1].content and sent[0].headers["content-type"] == "application/json"
    assert json.loads(sent[0].content) == {"items": ITEMS, "weights": {"x": 0.5}}


def test_a_non_finite_weight_reaches_the_service_and_comes_back_as_its_422() -> None:
    item = {"completion": "<tool_call>\n{}\n</tool_call>", "ground_truth": "[]"}
    refused = pytest.raises(RewardServiceError, match="HTTP 422: NaN is not valid JSON; send finite numbers")
    with start_service("toolcall") as service, RewardClient(service.url) as client, refused:
        client.score([item], weights={"format": float("nan")})


def test_gives_up_after_retries() -> None:
    script = Script(*([503] * 10))
    client = RewardClient("http://svc", retries=2, backoff=0.001, transport=httpx.MockTransport(script))
    with pytest.raises(RewardServiceUnavailable, match=r"3 attempts.*scripted 503"):
        client.score(ITEMS)
    assert len(script.bodies) == 3


@pytest.mark.parametrize("failure", [503, httpx.ReadError])
async def test_the_async_client_retries_and_gives_up_as_the_sync_one(failure: int | type[Exception]) -> None:
    recovering, failing = Script(failure, failure), Script(*([failure] * 10))
    async with AsyncRewardClient(
        "http://svc", backoff=0.001, transport=httpx.MockTransport(recovering)
    ) as client:
        assert len(await client.score(ITEMS)) == 10
    async with AsyncRewardClient(
        "http://svc", retries=2, backoff=0.001, transport=httpx.MockTransport(failing)
    ) as client:
        with pytest.raises(RewardServiceUnavailable, match=r"svc/v1/score: no answer after 3 attempts"):
            await client.score(ITEMS)
    assert (len(recovering.bodies), len(failing.bodies)) == (3, 3)


def test_client_error_is_not_retried() -> None:
    script = Script(422)
    client = RewardClient("http://svc", backoff=0.001, transport=httpx.MockTransport(script))
    with pytest.raises(RewardServiceError, match="HTTP 422: scripted 422"):
        client.score(ITEMS)
    assert len(script.bodies) == 1


def test_retry_after_is_honoured_and_spread() -> None:
    client = RewardClient("http://svc", backoff=5, max_backoff=30)
    response = httpx.Response(429, headers={"Retry-After": "0.25"})
    delays = [client.retry_delay(0, response) for _ in range(200)]
    # never before the service asked, at most one window later
    assert all(0.25 <= delay <= 0.5 for delay in delays)
    assert max(delays) - min(delays) > 0.1  # clients refused together come back spread over the window
    assert client.retry_delay(0, httpx.Response(503, headers={"Retry-After": "3600"})) == 30  # capped
    assert 0 <= client.retry_delay(3, None) <= 30


def test_wrong_result_count_is_an_error() -> None:
    def short(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"service": "t", "results": []})

    client = RewardClient("http://svc", transport=httpx.MockTransport(short))
    with pytest.raises(RewardServiceError, match="0 results for 10 items"):
        client.score(ITEMS)


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_at_the_connection_cap_a_real_service_answers_503_and_the_client_waits_its_retry_after() -> None:
    env = {"CORRGRPO_MAX_CONNECTIONS": "2", "CORRGRPO_RETRY_AFTER_S": "1"}
    with start_service("toolcall", env=env) as service:
        address = service.url.removeprefix("http://").split(":")
        held = [socket.create_connection((address[0], int(address[1])), timeout=10) for _ in range(2)]
        time.sleep(0.3)  # let the server accept both: the cap is full
        with socket.create_connection((address[0], int(address[1])), timeout=10) as extra:
            extra.sendall(b"GET /v1/components HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _, body = read_until_closed(extra).partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 503 Service Unavailable"
        assert b"retry-after: 1" in head.split(b"\r\n") and b"connection: close" in head.split(b"\r\n")
        message = "connection limit (2) reached; retry after 1s"
        assert json.loads(body) == {"error": "overloaded", "message": message, "details": []}
        # Without Retry-After a backoff of 1 ms would spend all three attempts before the cap frees up (at 0.5
        # s).
        threading.Timer(0.5, lambda: [sock.close() for sock in held]).start()
        started = time.monotonic()
        with RewardClient(service.url, retries=2, backoff=0.001) as client:
            names = [c.name for c in client.components().components]
        assert names and time.monotonic() - started >= 1.0


def group_items(problems: list[dict], group: int) -> list[dict]:
    """A GRPO step's items: `group` rollouts of each problem, each item with its own copy of the problem's
    dict."""
    return [
        {"id": f"{p['task_id']}.{k}", "v": k, "problem": json.loads(json.dumps(p))}
        for p in problems
        for k in range(group)
    ]


STDIN = [{"task_id": name, "stdin_cases": [{"input": name * 300, "output": "1\n"}]} for name in ("a", "b")]


def test_a_chunk_sends_each_inline_problem_once_and_the_request_resolves_to_the_items_sent() -> None:
    script = Script()
    items = group_items(STDIN, 4)
    RewardClient("http://svc", transport=httpx.MockTransport(script)).score(items)
    (body,) = script.bodies
    assert [item.get("problem_from") for item in body["items"]] == [None, 0, 0, 0, None, 4, 4, 4]
    assert [("problem" in item) for item in body["items"]] == [True, False, False, False] * 2
    as_code = [
        {**{k: v for k, v in item.items() if k != "v"}, "completion": str(item["v"])}
        for item in body["items"]
    ]
    sent = [{**{k: v for k, v in item.items() if k != "v"}, "completion": str(item["v"])} for item in items]
    resolved = CodeScoreRequest.model_validate({"items": as_code}).items
    assert resolved == [CodeItem.model_validate(item) for item in sent]
    assert resolved[1].problem is resolved[0].problem, (
        "one problem object for the group: parsed and validated once"
    )


def test_a_problem_is_sent_again_in_each_chunk_it_spans_and_pre_encoded_items_share_it_too() -> None:
    script = Script()
    items = [encode_item(item) for item in group_items(STDIN[:1], 5)]
    RewardClient("http://svc", chunk_size=3, transport=httpx.MockTransport(script)).score(items)
    # chunks go out concurrently: in any order
    assert sorted([item.get("problem_from") for item in body["items"]] for body in script.bodies) == [
        [None, 0],
        [None, 0, 0],
    ]
    assert all(body["items"][0]["problem"] == STDIN[0] for body in script.bodies)


def test_a_problem_larger_than_a_chunk_goes_once_with_the_items_that_name_it() -> None:
    script = Script()
    big = [{"task_id": "big", "stdin_cases": [{"input": "x" * 3000, "output": "1\n"}]}]
    items = [*group_items(big, 3), {"id": "other", "v": 9, "text": "y" * 300}]
    RewardClient("http://svc", chunk_bytes=1000, transport=httpx.MockTransport(script)).score(items)
    assert sorted([item.get("problem_from") for item in body["items"]] for body in script.bodies) == [
        [None],
        [None, 0, 0],
    ]


def test_problems_alike_at_both_ends_but_not_between_are_each_sent() -> None:
    script = Script()
    # same length, same first and last bytes
    cases = ["a" * 200 + middle + "z" * 200 for middle in ("b", "c")]
    problems = [{"task_id": "t", "stdin_cases": [{"input": text, "output": "1\n"}]} for text in cases]
    RewardClient("http://svc", transport=httpx.MockTransport(script)).score(group_items(problems, 2))
    (body,) = script.bodies
    assert [item.get("problem_from") for item in body["items"]] == [None, 0, None, 2]
    assert [
        item["problem"]["stdin_cases"][0]["input"] for item in body["items"] if "problem" in item
    ] == cases
