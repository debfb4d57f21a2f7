"""HTTP clients of the reward services (sync and async, httpx).

Both clients split a large batch into chunks of at most `chunk_size` items and `chunk_bytes` of JSON (an item
larger than that goes alone), send at most `max_concurrency` chunks at a time, and return the results in the
order of the items. Chunking by size keeps a batch of inline problems (megabytes of test cases each) under the
service's body limit, and lets the service score one chunk while it reads the next. A request carries an
inline problem once, its other items naming that one (`problem_from`: a GRPO group's rollouts share their
problem). A request is retried with jittered exponential backoff on connection errors, timeouts, 5xx and 429
(honouring `Retry-After`): safe because scoring is idempotent. Other 4xx are raised at once as
`RewardServiceError` with the service's message. A request that still fails after `retries` retries raises
`RewardServiceUnavailable`. Both clients take these decisions in one place (`_Client._after`). Their loops
differ only in sending and waiting (blocking or awaited).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pydantic_core
from pydantic import BaseModel

from .code import PROBLEM_FIELDS
from .common import ComponentsResponse, ItemResult, ScoreResponse
from .items import ItemShape

Item = BaseModel | dict[str, Any] | bytes  # bytes: an item's JSON from `encode_item`, sent as it is
SCORE_PATH = "/v1/score"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
JSON_HEADERS = {"Content-Type": "application/json"}
CHUNK_BYTES = 1 << 21  # 2 MiB of JSON per request at most (a service's default body limit: 64 MiB)
# code items (`corrgrpo_proto.code`): an inline problem, its reference
SHARED_FIELD, _, REFERENCE_FIELD = PROBLEM_FIELDS


class RewardServiceError(RuntimeError):
    """The service refused the request (a 4xx other than 429): retrying would not help."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"{url}: HTTP {status}: {message}")
        self.url, self.status, self.message = url, status, message


class RewardServiceUnavailable(RuntimeError):
    """The service could not be reached, or kept failing, through every retry; `reason`: the last failure."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def _json(value: Any) -> bytes:
    """JSON of a body or part of one, encoded once for every attempt by pydantic-core's serializer (about
    three times json.dumps's speed on the megabytes of test cases an inline problem can carry). NaN and
    infinities are written as such: the service refuses them with a 422 that names them."""
    return pydantic_core.to_json(value, inf_nan_mode="constants")


@dataclass(frozen=True)
class _Chunk:
    """One `/v1/score` request of a batch: its encoded body and how many items it holds."""

    body: bytes
    items: int


def _body(items: list[bytes], tail: bytes) -> bytes:
    """A request's body from its encoded items, copied once: megabytes of inline test cases are copied once,
    not three times (a join, then two concatenations)."""
    separated = [b","] * (2 * len(items) - 1)
    separated[::2] = items
    return b"".join([b'{"items":[', *separated, tail])


class EncodedItem(bytes):
    """The JSON of an item with an inline `problem`, keeping apart the problem's (a view of it) and the other
    fields': a chunk sends a problem once, its later items name it by `problem_from` (a group's rollouts share
    one)."""

    HEAD = b'{"%s":' % SHARED_FIELD.encode()  # the problem comes first: its JSON starts after this
    problem: memoryview
    rest: bytes

    @classmethod
    def of(cls, fields: dict[str, Any]) -> EncodedItem:
        others = {name: value for name, value in fields.items() if name != SHARED_FIELD}
        # the problem first, encoded once
        encoded = cls(_json({SHARED_FIELD: fields[SHARED_FIELD], **others}))
        # the same text as after the problem: `{"problem":<problem>,<rest without its "{">`
        rest = _json(others)
        end = len(encoded) - len(rest) + (rest == b"{}")
        encoded.problem, encoded.rest = memoryview(encoded)[len(cls.HEAD) : end], rest
        return encoded

    def fingerprint(self) -> tuple[int, bytes, bytes]:
        """Equal for equal problems, and cheap: hashing megabytes of test cases would cost more than
        sending them."""
        return len(self.problem), bytes(self.problem[:64]), bytes(self.problem[-64:])

    def same_problem(self, other: EncodedItem) -> bool:
        # a memcmp
        return len(self.problem) == len(other.problem) and self.startswith(other.problem, len(self.HEAD))

    def naming(self, index: int) -> bytes:
        """This item with its problem named by the chunk's item `index`, which carries the same one."""
        separator = b"" if self.rest == b"{}" else b","
        return b'%s%s"%s":%d}' % (self.rest[:-1], separator, REFERENCE_FIELD.encode(), index)


class _Carriers:
    """A chunk's items that carry an inline problem (by fingerprint), with their indices in the chunk."""

    def __init__(self) -> None:
        self.by_fingerprint: dict[tuple[int, bytes, bytes], list[tuple[EncodedItem, int]]] = {}

    def naming(self, item: bytes) -> bytes | None:
        """`item` naming the chunk's carrier of its problem; None without one (or without an inline
        problem)."""
        if isinstance(item, EncodedItem):
            for carrier, index in self.by_fingerprint.get(item.fingerprint(), ()):
                if item.same_problem(carrier):
                    return item.naming(index)
        return None

    def add(self, item: bytes, index: int) -> None:
        if isinstance(item, EncodedItem):
            self.by_fingerprint.setdefault(item.fingerprint(), []).append((item, index))


def encode_item(item: BaseModel | dict[str, Any]) -> bytes:
    """An item's JSON as the clients send it: encode a batch once when you also need its bytes (e.g. to key a
    cache), then give the bytes to `score`. An `EncodedItem` when it has an inline problem."""
    fields = item.model_dump(mode="json", exclude_none=True) if isinstance(item, BaseModel) else item
    return EncodedItem.of(fields) if fields.get(SHARED_FIELD) is not None else _json(fields)


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    if isinstance(body, dict) and "message" in body:
        details = "; ".join(f"{d.get('loc')}: {d.get('message')}" for d in body.get("details", []))
        return f"{body['message']}" + (f" ({details})" if details else "")
    return str(body)[:500]


@dataclass(frozen=True)
class _Answer:
    """The decoded body of a final response (a retry step's other outcome is the seconds to wait)."""

    body: Any


def _describe(outcome: httpx.Response | httpx.TransportError) -> str:
    if isinstance(outcome, httpx.Response):
        return f"HTTP {outcome.status_code}: {_error_message(outcome)}"
    return f"{type(outcome).__name__}: {outcome}"


class _Client:
    """Settings, chunking and retry policy of both clients, which differ only in how they send and wait."""

    _http_class: type[httpx.Client] | type[httpx.AsyncClient]

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        max_concurrency: int = 4,
        chunk_size: int = 256,
        chunk_bytes: int = CHUNK_BYTES,
        token: str | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if max_concurrency < 1 or chunk_size < 1 or chunk_bytes < 1 or retries < 0:
            raise ValueError("max_concurrency, chunk_size and chunk_bytes must be >= 1, retries >= 0")
        self.base_url = base_url.rstrip("/")
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.max_concurrency, self.chunk_size, self.chunk_bytes = max_concurrency, chunk_size, chunk_bytes
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = self._http_class(
            base_url=self.base_url, timeout=timeout, headers=headers, transport=transport
        )  # type: ignore[arg-type]

    def retry_delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait before retry `attempt` (0-based): jittered backoff, or with a Retry-After of `a`
        seconds a time in [a, 2a]: clients refused at the same instant (every rank of a job) must not all
        return at once."""
        if response is not None and (after := response.headers.get("Retry-After")):
            try:
                return min(float(after) * random.uniform(1, 2), self.max_backoff)
            except ValueError:
                pass
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))

    def _after(
        self, path: str, attempt: int, outcome: httpx.Response | httpx.TransportError
    ) -> _Answer | float:
        """What follows attempt `attempt` (0-based): the answer, or the seconds to wait before the next
        attempt. Raises `RewardServiceError` on a refusal, `RewardServiceUnavailable` when the last attempt
        failed too."""
        if isinstance(outcome, httpx.Response) and outcome.status_code not in RETRY_STATUSES:
            if outcome.status_code >= 400:
                raise RewardServiceError(self.base_url + path, outcome.status_code, _error_message(outcome))
            return _Answer(outcome.json())
        if attempt >= self.retries:
            last = _describe(outcome)
            raise RewardServiceUnavailable(
                f"{self.base_url + path}: no answer after {attempt + 1} attempts: {last}", last
            )
        return self.retry_delay(attempt, outcome if isinstance(outcome, httpx.Response) else None)

    def _chunks(self, items: Sequence[Item], weights: dict[str, float] | None) -> list[_Chunk]:
        """The batch's requests, in order: each item encoded once, a new chunk begun where the next item would
        take the current one over `chunk_size` items or `chunk_bytes`. Within a chunk an inline problem goes
        once: the items after the first that carries it name that one (`problem_from`), and such an item
        counts against the bytes of the chunk less its largest item (a problem over `chunk_bytes` goes once
        too, with the items naming it)."""
        tail = b"]}" if weights is None else b'],"weights":' + _json(weights) + b"}"
        groups: list[list[bytes]] = []
        carriers = _Carriers()
        size = largest = 0
        for item in items:
            encoded = item if isinstance(item, bytes) else encode_item(item)
            named = carriers.naming(encoded)
            sent = encoded if named is None else named
            counted = size - (largest if named is not None else 0) + len(sent)
            if not groups or len(groups[-1]) == self.chunk_size or counted > self.chunk_bytes:
                groups.append([])
                carriers, size, largest, sent = _Carriers(), 0, 0, encoded
            if sent is encoded:
                carriers.add(encoded, len(groups[-1]))
            groups[-1].append(sent)
            size, largest = size + len(sent) + 1, max(largest, len(sent) + 1)
        return [_Chunk(_body(group, tail), len(group)) for group in groups]  # no items, no request

    def _results(self, chunk: _Chunk, answer: Any) -> list[ItemResult]:
        results = ScoreResponse.model_validate(answer).results
        if len(results) != chunk.items:
            raise RewardServiceError(
                self.base_url + SCORE_PATH, 200, f"{len(results)} results for {chunk.items} items"
            )
        return results


class AsyncRewardClient(_Client):
    """Async client of one reward service: `await client.score(items)`."""

    _http_class = httpx.AsyncClient
    _http: httpx.AsyncClient

    @functools.cached_property
    def _slots(self) -> asyncio.Semaphore:
        """At most `max_concurrency` chunks in flight, across all of this client's calls."""
        return asyncio.Semaphore(self.max_concurrency)

    async def request(self, method: str, path: str, json: Any = None) -> Any:
        """One retried request. Returns the decoded JSON body."""
        return await self._send(method, path, None if json is None else _json(json))

    async def _send(self, method: str, path: str, content: bytes | None) -> Any:
        for attempt in itertools.count():
            try:
                outcome: httpx.Response | httpx.TransportError = await self._http.request(
                    method, path, content=content, headers=JSON_HEADERS
                )
            except httpx.TransportError as error:
                outcome = error
            step = self._after(path, attempt, outcome)
            if isinstance(step, _Answer):
                return step.body
            await asyncio.sleep(step)

    async def score(self, items: Sequence[Item], weights: dict[str, float] | None = None) -> list[ItemResult]:
        """Score `items` (models, dicts or `encode_item` bytes). One result per item, in order."""

        async def one(chunk: _Chunk) -> list[ItemResult]:
            async with self._slots:
                return self._results(chunk, await self._send("POST", SCORE_PATH, chunk.body))

        parts = await asyncio.gather(*(one(chunk) for chunk in self._chunks(items, weights)))
        return [result for part in parts for result in part]

    async def components(self) -> ComponentsResponse:
        return ComponentsResponse.model_validate(await self.request("GET", "/v1/components"))

    async def item_shape(self) -> ItemShape:
        """The service's item fields, from its `/openapi.json` (see `corrgrpo_proto.items`)."""
        return ItemShape.of_openapi(await self.request("GET", "/openapi.json"))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class RewardClient(_Client):
    """Blocking client of one reward service: `client.score(items)`. Chunks go out on threads."""

    _http_class = httpx.Client
    _http: httpx.Client

    def request(self, method: str, path: str, json: Any = None) -> Any:
        """One retried request. Returns the decoded JSON body."""
        return self._send(method, path, None if json is None else _json(json))

    def _send(self, method: str, path: str, content: bytes | None) -> Any:
        for attempt in itertools.count():
            try:
                outcome: httpx.Response | httpx.TransportError = self._http.request(
                    method, path, content=content, headers=JSON_HEADERS
                )
            except httpx.TransportError as error:
                outcome = error
            step = self._after(path, attempt, outcome)
            if isinstance(step, _Answer):
                return step.body
            time.sleep(step)

    def score(self, items: Sequence[Item], weights: dict[str, float] | None = None) -> list[ItemResult]:
        """Score `items` (models, dicts or `encode_item` bytes). One result per item, in order."""
        chunks = self._chunks(items, weights)

        def one(chunk: _Chunk) -> list[ItemResult]:
            return self._results(chunk, self._send("POST", SCORE_PATH, chunk.body))

        if len(chunks) == 1:
            return one(chunks[0])
        with ThreadPoolExecutor(self.max_concurrency) as pool:
            return [result for part in pool.map(one, chunks) for result in part]

    def components(self) -> ComponentsResponse:
        return ComponentsResponse.model_validate(self.request("GET", "/v1/components"))

    def item_shape(self) -> ItemShape:
        """The service's item fields, from its `/openapi.json` (see `corrgrpo_proto.items`)."""
        return ItemShape.of_openapi(self.request("GET", "/openapi.json"))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
