"""Admission control for scoring: the in-flight item budget, the 429 that refuses a batch beyond it, and the shedding
of scoring requests before their body is read while the budget is spent.

Shedding must cost far less than scoring, or past capacity the refusals eat the core the admitted requests need
(goodput fell to a fifth at 10x load when a 429 went through the ASGI stack: ~0.6 ms of CPU each, mostly the
middleware's response streaming, h11's header checks and the request log). `EarlyRefusal` refuses from a request's
first bytes, before h11 parses it, with a prepared response; `ShedWhenFull` is the ASGI fallback for a request line
that arrived split or in another form, and for servers other than ours (Ray Serve's proxy).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import formatdate

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from corrgrpo_proto import ErrorBody

from ..errors import error_response

SCORING_PATHS = frozenset({"/v1/score", "/v1/openrlhf"})


class InflightItems:
    """Admission control for scoring: at most `limit` items in the scorer at once (0 = no limit).

    A batch that would exceed the limit is refused (the route answers 429 + Retry-After) rather than
    queued, so memory and latency stay bounded under overload; the client backs off and retries.
    The route asks for at most one request's share (`max_request_inflight_items`, never more than
    the limit), so a large batch is slow, never refused forever. One event loop per process: no lock.
    """

    def __init__(self, limit: int, on_change: Callable[[int], None]) -> None:
        self.limit, self.count, self.on_change = limit, 0, on_change

    @property
    def full(self) -> bool:
        return bool(self.limit) and self.count >= self.limit

    def try_acquire(self, items: int) -> bool:
        if self.limit and self.count + items > self.limit:
            return False
        self.count += items
        self.on_change(self.count)
        return True

    def release(self, items: int) -> None:
        self.count -= items
        self.on_change(self.count)


def overloaded(inflight: InflightItems, retry_after_s: int) -> JSONResponse:
    message = f"{inflight.count} items in flight (limit {inflight.limit}); retry after {retry_after_s}s"
    response = error_response(429, "overloaded", message)
    response.headers["Retry-After"] = str(retry_after_s)
    return response


def raw_refusal(status: str, message: str, retry_after_s: int) -> bytes:
    """A whole HTTP/1.1 refusal (`status` like `429 Too Many Requests`) with the kit's error body, `Retry-After` and
    `Connection: close`, for a server to write before it has parsed the request."""
    body = ErrorBody(error="overloaded", message=message).model_dump_json().encode()
    head = (
        f"HTTP/1.1 {status}\r\n"
        f"date: {formatdate(usegmt=True)}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        f"retry-after: {retry_after_s}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


# The request lines of scoring requests, origin-form, as a client's first bytes spell them.
_SCORING_REQUEST_LINES = tuple(f"POST {path}{end}".encode() for path in sorted(SCORING_PATHS) for end in (" ", "?"))


class EarlyRefusal:
    """429 for a scoring request while the item budget is spent, decided from the first bytes of the request.

    The server's protocol asks `refuses(data)` with the first data of a request, before parsing anything; on True it
    writes `response()` and closes the connection, so a refusal costs an accept, a read and a write (no h11 parse, no
    ASGI task, no middleware, no log line: `corrgrpo_rejections{reason="overload"}` counts it). The bearer token is not
    checked first: a client without it learns only that the service is busy.
    """

    def __init__(self, inflight: InflightItems, retry_after_s: int, on_reject: Callable[[], None]) -> None:
        self.inflight, self.retry_after_s, self.on_reject = inflight, retry_after_s, on_reject
        self.message = f"the in-flight item budget ({inflight.limit}) is spent; retry after {retry_after_s}s"
        self._response, self._made_at = b"", 0

    def refuses(self, data: bytes) -> bool:
        if self.inflight.full and data.startswith(_SCORING_REQUEST_LINES):
            self.on_reject()
            return True
        return False

    def response(self) -> bytes:
        """Made once a second (its `Date` header), not once a refusal: building it took a seventh of one."""
        now = int(time.time())
        if now != self._made_at:
            self._response, self._made_at = raw_refusal("429 Too Many Requests", self.message, self.retry_after_s), now
        return self._response


class ShedWhenFull:
    """429 for `POST /v1/score` and `/v1/openrlhf` while the item budget is already spent, before the body is read or parsed.

    Refusing after parsing would let rejected requests eat the CPU the admitted ones need; this
    makes a refusal cost a few microseconds. Batches that would only partly fit are refused by the
    route, once their item count is known.
    """

    def __init__(self, app: ASGIApp, inflight: InflightItems, retry_after_s: int, on_reject: Callable[[], None]) -> None:
        self.app, self.inflight, self.retry_after_s, self.on_reject = app, inflight, retry_after_s, on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in SCORING_PATHS and self.inflight.full:
            self.on_reject()
            return await overloaded(self.inflight, self.retry_after_s)(scope, receive, send)
        await self.app(scope, receive, send)
