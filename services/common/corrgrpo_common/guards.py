"""ASGI guards in front of every route: bearer auth, body size, JSON shape, cancellation on disconnect;
and the in-flight item budget.

They run before FastAPI parses anything, so a hostile body is refused with the kit's error body
(401, 413, 400, 422) instead of reaching pydantic or a scorer, and a refusal costs no more than
reading the body once.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import re
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corrgrpo_proto.common import ErrorDetail

from .errors import error_response

log = logging.getLogger("corrgrpo.service")
PROTECTED_PREFIX = "/v1"
SCORING_PATHS = frozenset({"/v1/score", "/v1/openrlhf"})
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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


class UnambiguousFraming:
    """400 for a request with both `Content-Length` and `Transfer-Encoding`, and the connection closed (RFC 9112 6.3).

    h11 reads such a body as chunked and passes both headers on; a proxy in front that trusts `Content-Length` sees
    another end of the request, and the rest as a second request of its own (request smuggling)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name for name, _ in scope["headers"]}
            if b"content-length" in names and b"transfer-encoding" in names:
                message = "both Content-Length and Transfer-Encoding: the body's length is ambiguous; send one of them"
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


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999 parses to inf without ever being a NaN/Infinity literal
        raise _NonFinite(literal[:40])
    return value


@dataclass(frozen=True)
class JsonLimits:
    """What one JSON body may hold (0 = no limit); `fields` caps named string fields, e.g. `{"ground_truth": 32768}`."""

    max_depth: int = 64
    max_values: int = 0
    max_items: int = 0
    fields: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """Why a body is refused: HTTP status, machine-readable error, message, and the offending field."""

    status: int
    error: str
    message: str
    loc: str | None = None

    def response(self) -> JSONResponse:
        details = [ErrorDetail(loc=self.loc, message=self.message)] if self.loc is not None else None
        return error_response(self.status, self.error, self.message, details)


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[,\[{]')  # a whole string, or a mark that opens a value


def too_many_values(body: bytes, limit: int) -> bool:
    """Whether a JSON body holds more than `limit` values, decided without parsing it or copying it.

    Every value but the first follows a `,`, `[` or `{`. Counted over the raw bytes first (fast,
    but strings may hold such marks too); only when that count is over the limit are the marks
    outside strings counted, stopping as soon as the limit is passed.
    """
    # In valid JSON a comma comes after a value and a bracket before its closing one, bytes that are no marks: marks
    # are at most 2/3 of the bytes. A short body needs no count (invalid JSON may hold more marks, and fails its parse).
    if 2 * len(body) + 3 <= 3 * limit:
        return False
    if len(body) - len(body.translate(None, b",[{")) + 1 <= limit:  # one pass, where three counts took twice as long
        return False
    count = 1
    for token in _TOKEN.finditer(body):
        if body[token.start()] != 0x22:  # not a string
            count += 1
            if count > limit:
                return True
    return False


def _path_to(document: Any, target: Any) -> str:
    """Dotted path of the node `target` (by identity) in `document`, e.g. `items.3.ground_truth`."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(document, ())]
    while stack:
        node, path = stack.pop()
        if node is target:
            return ".".join(path) or "body"
        if isinstance(node, dict):
            stack.extend((value, (*path, str(key))) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, (*path, str(index))) for index, value in enumerate(node))
    return "body"


@dataclass(frozen=True)
class Checked:
    """A JSON body that passed `check_json`, parsed: FastAPI validates this document instead of parsing the body again."""

    document: Any


@dataclass(frozen=True)
class Parsed:
    """A JSON text `parse_json` parsed; `escapes`: it spells a surrogate escape, so its strings need `check_document`'s
    look (a rare case: looking at every string of every body would cost each request a pass over its text)."""

    document: Any
    escapes: bool


PARSED_JSON = "corrgrpo.parsed_json"  # the scope key JsonGuard leaves the checked document under (ParsedJsonRequest)


def parse_json(body: bytes, limits: JsonLimits = JsonLimits()) -> Problem | Parsed | None:
    """The first half of `check_json`: decoding, the value count, the parse. None for a syntax error.

    A body within the value count is parsed by pydantic-core (about twice json's speed on megabytes of inline test
    cases, and no decoded copy of the text): it refuses what this module must refuse or classify (invalid UTF-8,
    unpaired surrogates, NaN and infinities, nesting past its own limit), and such a body is parsed again as before,
    so that its error says why. An overflowing number (`1e999`) it reads as infinity: `check_document` refuses it."""
    over_count = bool(limits.max_values) and too_many_values(body, limits.max_values)
    if not over_count:
        try:
            return Parsed(pydantic_core.from_json(body, allow_inf_nan=False), escapes=False)
        except ValueError:
            pass
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return Problem(400, "invalid_encoding", f"request body is not valid UTF-8 (byte {error.start})")
    if over_count:
        return Problem(413, "too_many_values", f"more than {limits.max_values} JSON values in one request", "body")
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NonFinite as constant:
        return Problem(422, "non_finite_number", f"{constant} is not valid JSON; send finite numbers")
    except RecursionError:
        return Problem(422, "json_too_deep", f"JSON nested deeper than {limits.max_depth} levels")
    except ValueError:
        return None
    return Parsed(document, _SURROGATE_ESCAPE.search(text) is not None)


def check_document(document: Any, limits: JsonLimits, *, strings: bool = True, depth: int = 1) -> Problem | int:
    """The second half of `check_json`: why a parsed document must be refused, else how many values it holds.

    `strings`: whether to look for unpaired surrogates; `depth`: the level `document` sits at (an OpenRLHF label
    is checked as the item it becomes, which sits at level 3 of a `/v1/score` body)."""
    values = 1
    stack: list[tuple[Any, int]] = [(document, depth)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            if level > limits.max_depth:
                return Problem(422, "json_too_deep", f"JSON nested deeper than {limits.max_depth} levels")
            if limits.max_items and len(node) > limits.max_items:
                message = f"{len(node)} entries, over the limit of {limits.max_items} per array or object"
                return Problem(413, "too_many_items", message, _path_to(document, node))
            values += len(node)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((value, level + 1) for value in children)
            if isinstance(node, dict):
                if strings:
                    stack.extend((key, level) for key in node)
                for name in limits.fields.keys() & node.keys():
                    value = node[name]
                    if isinstance(value, str) and len(value) > limits.fields[name]:
                        message = f"{len(value)} characters, over the limit of {limits.fields[name]}"
                        return Problem(413, "field_too_long", message, _path_to(document, value))
        elif isinstance(node, float) and not math.isfinite(node):  # `1e999`, parsed by pydantic-core
            return Problem(422, "non_finite_number", "a number overflows to infinity; send finite numbers")
        elif strings and isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return Problem(422, "invalid_string", "a JSON string holds an unpaired UTF-16 surrogate (\\ud800-\\udfff)")
    return values


def check_json(body: bytes, limits: JsonLimits = JsonLimits()) -> Problem | Checked | None:
    """Why a JSON body must be refused before FastAPI parses it, else the parsed document; None to let FastAPI
    parse it (a syntax error).

    Refused: bytes that are not UTF-8 (400); more than `max_values` values (413, counted before
    parsing, so the parse itself stays bounded), an array or object over `max_items` entries (the
    batch's `items`, a `weights` map) or a capped field over its length (413, naming the field);
    `NaN`/`Infinity` literals and overflowing numbers like `1e999` (not finite; they would slip
    through `Any` fields as null); nesting deeper than `max_depth` (the response serializer and the
    recursion limit would turn it into a 500); and unpaired UTF-16 surrogates (`"\\ud800"`: valid
    JSON escapes no UTF-8 response can carry).
    A syntax error is left to FastAPI's 422.
    """
    parsed = parse_json(body, limits)
    if not isinstance(parsed, Parsed):
        return parsed
    found = check_document(parsed.document, limits, strings=parsed.escapes)
    return found if isinstance(found, Problem) else Checked(parsed.document)


def _is_json(scope: Scope) -> bool:
    content_type = dict(scope["headers"]).get(b"content-type", b"").split(b";")[0].strip().lower()
    return content_type == b"application/json" or content_type.endswith(b"+json")


class JsonGuard:
    """Reads a JSON request body once, refuses it per `check_json` (in a worker thread), else replays it to the app with
    the parsed document in the scope (`ParsedJsonRequest` hands it to FastAPI: the body is parsed once)."""

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
            scope[PARSED_JSON] = checked.document  # in place: the router's `route` must reach the outer middleware
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


class CancelOnDisconnect:
    """Cancels a POST's handler when its client goes away before the answer, so its scoring stops.

    The cancellation reaches the scorer as `asyncio.CancelledError` in every task it awaits:
    `asyncio.gather` cancels its children, and a future from `loop.run_in_executor` that has not
    started is removed from the pool's queue. Work already running in a thread or a sandbox is not
    interrupted by asyncio; a scorer that can stop it should do so when it sees the cancellation
    (e.g. `except asyncio.CancelledError: kill the run; raise`). The budget is released by the
    route's `finally`, at once.
    """

    def __init__(self, app: ASGIApp, on_cancel: Callable[[], None]) -> None:
        self.app, self.on_cancel = app, on_cancel

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body_read = asyncio.Event()
        gone: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        answered = False

        async def tracked_receive() -> Message:
            if body_read.is_set():  # only `http.disconnect` can follow the body: the watcher waits for it
                return await asyncio.shield(gone)
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read.set()
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal answered
            answered = answered or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        handler = asyncio.ensure_future(self.app(scope, tracked_receive, tracked_send))

        async def watch() -> None:
            await body_read.wait()
            message = await receive()  # uvicorn answers it when the client disconnects (or the response is done)
            gone.set_result(message)
            if message["type"] == "http.disconnect" and not answered and not handler.done():
                handler.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({handler})
        except asyncio.CancelledError:  # the server is cancelling us (shutdown grace spent): pass it on
            handler.cancel()
            raise
        finally:
            watcher.cancel()
        if handler.cancelled():
            self.on_cancel()
            log.info("client disconnected; its request was cancelled", extra={"path": scope["path"]})
            return
        handler.result()  # re-raise what the handler raised
