"""Bearer-token auth for every route but the open ones (health, readiness, metrics, the OpenAPI docs)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable

from starlette._utils import get_route_path
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import error_response

OPEN_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
_REFUSAL = "missing or wrong bearer token (Authorization: Bearer <token>)"


def route_path(scope: Scope) -> str:
    """The route a request is for: its path less the prefix a proxy mounted the app under (`root_path`; Ray
    Serve's proxy keeps the prefix in the path). The router's own function: a guard and it cannot disagree."""
    return get_route_path(scope)


class BearerAuth:
    """401 for a request without `Authorization: Bearer <token>`, unless its route is one of `open_routes`.

    Decided on the route the app serves (`route_path`), whatever prefix a proxy adds. A path that is no open
    route needs the token, an unknown one too (401 before 404). The credentials are compared by their SHA-256
    digests with `hmac.compare_digest`: the time taken tells nothing of the token's content or length. An
    empty credential is refused whatever the token.
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        open_routes: Iterable[str],
        on_reject: Callable[[], None],
    ) -> None:
        if not token:
            raise ValueError("an empty bearer token would admit an empty credential")
        self.app, self.open_routes, self.on_reject = app, frozenset(open_routes), on_reject
        self.digest = hashlib.sha256(token.encode()).digest()

    def allowed(self, header: bytes) -> bool:
        scheme, _, credentials = header.partition(b" ")
        credentials = credentials.strip()
        # compared even for a wrong scheme or an empty credential: timing tells not which part was wrong
        matches = hmac.compare_digest(hashlib.sha256(credentials).digest(), self.digest)
        return matches and scheme.lower() == b"bearer" and credentials != b""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or route_path(scope) in self.open_routes:
            return await self.app(scope, receive, send)
        if self.allowed(dict(scope["headers"]).get(b"authorization", b"")):
            return await self.app(scope, receive, send)
        self.on_reject()
        response = error_response(401, "unauthorized", _REFUSAL)
        response.headers["WWW-Authenticate"] = 'Bearer realm="corrgrpo"'
        await response(scope, receive, send)
