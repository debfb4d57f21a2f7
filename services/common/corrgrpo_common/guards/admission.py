"""Admission control for scoring: the in-flight item budget, the 429 that refuses a batch beyond it, and the shedding
of scoring requests before their body is read while the budget is spent."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

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
