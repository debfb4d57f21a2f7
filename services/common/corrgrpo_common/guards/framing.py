"""Where a request body ends, and how long it may be: ambiguous framing gets 400, an oversized body 413."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import error_response


class UnambiguousFraming:
    """400 for a request with both `Content-Length` and `Transfer-Encoding`, and the connection closed (RFC
    9112 6.3).

    h11 reads such a body as chunked and passes both headers on. A proxy in front that trusts `Content-Length`
    sees another end of the request, and the rest as a second request of its own (request smuggling)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name for name, _ in scope["headers"]}
            if b"content-length" in names and b"transfer-encoding" in names:
                message = (
                    "both Content-Length and Transfer-Encoding: the body's length is ambiguous; "
                    "send one of them"
                )
                response = error_response(400, "ambiguous_framing", message)
                response.headers["Connection"] = "close"
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: 413 for a body over `limit` bytes, by header or by counting the stream."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._reject(scope, receive, send)
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "payload_too_large", f"request body over {self.limit} bytes")
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass
