"""Bearer-token auth for the /v1 routes."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import error_response

PROTECTED_PREFIX = "/v1"


def is_protected(path: str) -> bool:
    """Routes under /v1 need the token; /healthz, /readyz, /metrics and the OpenAPI docs stay open."""
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/")


class BearerAuth:
    """401 for a /v1 request without `Authorization: Bearer <token>`; the comparison is constant-time."""

    def __init__(self, app: ASGIApp, token: str, on_reject: Callable[[], None]) -> None:
        self.app, self.token, self.on_reject = app, token.encode(), on_reject

    def allowed(self, header: bytes) -> bool:
        scheme, _, credentials = header.partition(b" ")
        # compare_digest even for a wrong scheme, so timing tells nothing about which part was wrong
        matches = hmac.compare_digest(credentials.strip(), self.token)
        return scheme.lower() == b"bearer" and matches

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_protected(scope["path"]):
            return await self.app(scope, receive, send)
        if self.allowed(dict(scope["headers"]).get(b"authorization", b"")):
            return await self.app(scope, receive, send)
        self.on_reject()
        response = error_response(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer <token>)")
        response.headers["WWW-Authenticate"] = 'Bearer realm="corrgrpo"'
        await response(scope, receive, send)
