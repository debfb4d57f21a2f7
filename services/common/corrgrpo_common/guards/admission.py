"""Admission control for scoring: the in-flight item budget, reserved by each scoring request before its body
is read, and the 429 that refuses a request the budget has no room for.

Refusing must cost far less than scoring, or past capacity the refusals eat the core the admitted requests
need. Goodput fell to a half at 4x load and a fifth at 10x when (a) most 429s came from the route, after the
body was read, parsed and validated (the budget counted only batches in the scorer, so any number of requests
were let in to be parsed) and (b) the others went through the whole ASGI stack (~0.6 ms of CPU each: the
request middleware's response streaming, h11's header checks, the request log). So a request reserves its
expected share at the door and the route only resizes it; `EarlyAdmission` reserves or refuses from a
request's first bytes, before h11 parses them, with a prepared 429; `AdmitScoring` hands the reservation to
the route, and decides itself for a request line that arrived split and on servers other than ours (Ray
Serve)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from email.utils import formatdate

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from corrgrpo_proto import ErrorBody

from ..errors import error_response
from .auth import route_path

SCORING_PATHS = frozenset({"/v1/score", "/v1/openrlhf"})


class InflightItems:
    """Admission control for scoring: at most `limit` items reserved or in the scorer at once (0 = no limit).

    A scoring request reserves its expected size at the door, before its body is read (`reserve`, a running
    mean of recent shares), and the route resizes the reservation to its batch's share once the items are
    known: a request is refused (429 + Retry-After) rather than queued, nearly always before it costs a parse,
    so memory, latency and the CPU spent on refusals stay bounded under overload. The client backs off and
    retries. A request asks for at most one request's share (`max_request_inflight_items`, never more than the
    limit), so a large batch is slow, never refused forever. One event loop per process: no lock.
    """

    def __init__(self, limit: int, on_change: Callable[[int], None]) -> None:
        self.limit, self.count, self.on_change = limit, 0, on_change
        self.expected = 1.0  # items a scoring request holds: a running mean of the shares

    def _reservation_size(self) -> int:
        return max(1, math.ceil(self.expected))

    def admits_another(self) -> bool:
        return not self.limit or self.count + self._reservation_size() <= self.limit

    def reserve(self) -> Reservation | None:
        """A reservation of the expected size, or None when it would pass the limit."""
        if not self.admits_another():
            return None
        reservation = Reservation(self, 0)
        reservation.take(self._reservation_size())
        return reservation

    def add(self, items: int) -> None:
        self.count += items
        self.on_change(self.count)


@dataclass
class Reservation:
    """The items one scoring request holds of the budget, from the door to its answer."""

    inflight: InflightItems
    items: int

    def take(self, items: int) -> None:
        self.inflight.add(items - self.items)
        self.items = items

    def resize(self, items: int) -> bool:
        """Hold `items` instead (the batch's share, once known); False, holding as before, if that passes
        the limit."""
        inflight = self.inflight
        inflight.expected += (items - inflight.expected) / 4
        if inflight.limit and inflight.count - self.items + items > inflight.limit:
            return False
        self.take(items)
        return True

    def release(self) -> None:
        self.take(0)


# the scope key of a reservation made by the server's protocol (EarlyAdmission)
RESERVATION_KEY = "corrgrpo.reservation"
CURRENT_RESERVATION: ContextVar[Reservation | None] = ContextVar("corrgrpo_reservation", default=None)
"""The reservation `AdmitScoring` made for the request being handled, for its route to resize."""


def overloaded(inflight: InflightItems, retry_after_s: int) -> JSONResponse:
    message = f"{inflight.count} items in flight (limit {inflight.limit}); retry after {retry_after_s}s"
    response = error_response(429, "overloaded", message)
    response.headers["Retry-After"] = str(retry_after_s)
    return response


def raw_refusal(status: str, message: str, retry_after_s: int) -> bytes:
    """A whole HTTP/1.1 refusal (`status` like `429 Too Many Requests`) with the kit's error body,
    `Retry-After` and `Connection: close`, for a server to write before it has parsed the request."""
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
_SCORING_REQUEST_LINES = tuple(
    f"POST {path}{end}".encode() for path in sorted(SCORING_PATHS) for end in (" ", "?")
)


class EarlyAdmission:
    """Admission of a scoring request from the first bytes of the request, before h11 parses anything.

    The listening socket (`listener.py`, at accept: the first bytes of a fresh connection, peeked at) and the
    server's protocol (later ones) call `screen(data)` with the first data of each request: a scoring request
    the budget has room for gets its reservation there (the protocol puts it in the request's scope under
    `RESERVATION_KEY`, where `AdmitScoring` takes it: no other request can take its place meanwhile), one
    without room gets the bytes of a prepared 429 to write before the connection is closed: a refusal costs an
    accept, a read and a write (no h11 parse, no ASGI task, no middleware, no log line;
    `corrgrpo_rejections{reason="overload"}` counts it). The bearer token is not checked first: a client
    without it learns only that the service is busy. Our server sets no `root_path`, so a request line's path
    is the route. One this misses (percent-escaped) is `AdmitScoring`'s.
    """

    def __init__(self, inflight: InflightItems, retry_after_s: int, on_reject: Callable[[], None]) -> None:
        self.inflight, self.retry_after_s, self.on_reject = inflight, retry_after_s, on_reject
        self.message = f"the in-flight item budget ({inflight.limit}) is spent; retry after {retry_after_s}s"
        self._response, self._made_at = b"", 0

    def screen(self, data: bytes) -> Reservation | bytes | None:
        """A reservation for a scoring request with room, the refusal to write for one without, None for
        others."""
        if not data.startswith(_SCORING_REQUEST_LINES):
            return None
        reservation = self.inflight.reserve()
        if reservation is None:
            self.on_reject()
            return self.response()
        return reservation

    def response(self) -> bytes:
        """Made once a second (its `Date` header), not once a refusal: building it took a seventh of one."""
        now = int(time.time())
        if now != self._made_at:
            self._response, self._made_at = (
                raw_refusal("429 Too Many Requests", self.message, self.retry_after_s),
                now,
            )
        return self._response


class AdmitScoring:
    """`POST /v1/score` and `/v1/openrlhf` reserve their expected share of the budget before the body is read
    or parsed, or get 429 at once. The reservation is the route's (`CURRENT_RESERVATION`) and is released when
    the request ends. Decided on the route (`route_path`), whatever prefix a proxy mounts the app under.

    Refusing after parsing would let rejected requests eat the CPU the admitted ones need. Batches that turn
    out larger than expected and no longer fit are refused by the route, once their item count is known.
    """

    def __init__(
        self, app: ASGIApp, inflight: InflightItems, retry_after_s: int, on_reject: Callable[[], None]
    ) -> None:
        self.app, self.inflight, self.retry_after_s, self.on_reject = app, inflight, retry_after_s, on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or route_path(scope) not in SCORING_PATHS:
            return await self.app(scope, receive, send)
        reservation = scope.pop(RESERVATION_KEY, None) or self.inflight.reserve()
        if reservation is None:
            self.on_reject()
            return await overloaded(self.inflight, self.retry_after_s)(scope, receive, send)
        token = CURRENT_RESERVATION.set(reservation)
        try:
            await self.app(scope, receive, send)
        finally:
            reservation.release()
            CURRENT_RESERVATION.reset(token)
