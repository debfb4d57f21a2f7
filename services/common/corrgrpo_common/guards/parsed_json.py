"""The JSON guard's ASGI half: reads a JSON body once, refuses it per `check_json`, and hands FastAPI the
parsed document so that the body is parsed once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .json_checks import Checked, JsonLimits, Problem, check_json

# the scope key JsonGuard leaves the checked document under (ParsedJsonRequest)
PARSED_JSON = "corrgrpo.parsed_json"
PARSED_BODY = "corrgrpo.parsed_body"  # and the body it was parsed from


def _is_json(scope: Scope) -> bool:
    content_type = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
    return content_type == b"application/json" or content_type.endswith(b"+json")


class JsonGuard:
    """Reads a JSON request body once, refuses it per `check_json` (in a worker thread), else replays it to
    the app with the parsed document in the scope (`ParsedJsonRequest` hands it to FastAPI: the body is parsed
    once)."""

    def __init__(self, app: ASGIApp, limits: JsonLimits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH") or not _is_json(scope):
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks  # one copy of the body, not two
        checked = await asyncio.to_thread(check_json, body, self.limits) if body else None
        if isinstance(checked, Problem):
            return await checked.response()(scope, receive, send)
        if isinstance(checked, Checked):
            # in place: the router's `route` must reach the outer middleware
            scope[PARSED_JSON] = checked.document
            scope[PARSED_BODY] = body
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class ParsedJsonRequest(Request):
    """A request whose JSON body JsonGuard has parsed and checked already."""

    async def body(self) -> bytes:
        """The body as JsonGuard read it: starlette's `body` joins the replayed body with the stream's empty
        end, a copy of megabytes of inline test cases (FastAPI reads the body before it asks for the JSON)."""
        return self.scope[PARSED_BODY] if PARSED_BODY in self.scope else await super().body()

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = self.scope[PARSED_JSON] if PARSED_JSON in self.scope else await super().json()
        return self._json


class ParsedJsonRoute(APIRoute):
    """FastAPI's route with `ParsedJsonRequest` (FastAPI's documented way to customise the request class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(ParsedJsonRequest(request.scope, request.receive))

        return handle
