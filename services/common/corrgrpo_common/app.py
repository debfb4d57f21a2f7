"""The app factory every service uses: health, readiness, metrics, guards, errors, logging.

`create_app` assembles an app from this module's parts: the kit's `router` (health, readiness, metrics,
components; each handler reads the app's state), the guards, the `Observe` middleware and the error
handlers. A service builds its routes on top of it. Scoring routes come from
`corrgrpo_common.scoring.add_score_route`, so the envelope, totals and idempotency are the same
everywhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corrgrpo_proto import ComponentSpec, ComponentsResponse, Health, Readiness
from corrgrpo_proto.common import ErrorDetail

from .errors import error_response
from .guards.admission import AdmitScoring, EarlyAdmission, InflightItems
from .guards.auth import OPEN_ROUTES, BearerAuth
from .guards.cancellation import CancelOnDisconnect
from .guards.framing import BodyLimit, UnambiguousFraming
from .guards.json_checks import JsonLimits
from .guards.parsed_json import JsonGuard, ParsedJsonRoute
from .settings import ServiceSettings
from .store.factory import make_store
from .store.interface import Store

log = logging.getLogger("corrgrpo.service")
ReadinessCheck = Callable[[], Awaitable[str | None]]
"""Raises when a dependency is down. May return a warning (e.g. a sandbox fallback) shown in /readyz."""


def _loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    return ".".join(parts[1:] if parts and parts[0] == "body" else parts) or "body"


class Metrics:
    """Prometheus metrics of one app (own registry, so several apps can live in one process)."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "corrgrpo_requests", "HTTP requests", ["service", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "corrgrpo_request_seconds",
            "HTTP request latency",
            ["service", "route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.items = Counter("corrgrpo_items", "Scored items", ["service", "outcome"], registry=self.registry)
        self.inflight_items = Gauge(
            "corrgrpo_inflight_items", "Items in the scorer now", ["service"], registry=self.registry
        )
        self.rejections = Counter(
            "corrgrpo_rejections",
            "Requests refused before scoring",
            ["service", "reason"],
            registry=self.registry,
        )
        self.service = service


# ---------------------------------------------------------------- the kit's routes (every service's)

router = APIRouter(route_class=ParsedJsonRoute)


@router.get("/healthz", response_model=Health)
async def healthz(request: Request) -> Health:
    state = request.app.state
    return Health(service=state.service, version=state.version)


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(request: Request) -> JSONResponse:
    state = request.app.state
    results: dict[str, str] = {}
    ready = True
    for name, check in state.readiness.items():
        try:
            results[name] = await check() or "ok"
        except Exception as error:  # a failed check is a reason, not a crash
            results[name], ready = f"{type(error).__name__}: {error}", False
    body = Readiness(ready=ready, service=state.service, checks=results)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/components", response_model=ComponentsResponse)
async def list_components(request: Request) -> ComponentsResponse:
    return ComponentsResponse(service=request.app.state.service, components=request.app.state.components)


# ---------------------------------------------------------------- errors: the kit's error body for every
# refusal


async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
    details = [ErrorDetail(loc=_loc(tuple(e["loc"])), message=e["msg"]) for e in exc.errors()]
    summary = "; ".join(f"{d.loc}: {d.message}" for d in details[:5])
    return error_response(422, "validation_error", f"invalid request: {summary}", details)


async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
    response = error_response(exc.status_code, code, str(exc.detail))
    response.headers.update(exc.headers or {})
    return response


async def crash(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", extra={"path": request.url.path})
    return error_response(500, "internal", f"{type(exc).__name__}: {exc}")


# ---------------------------------------------------------------- request pipeline


class Observe:
    """Counts, times and logs each request under its route's path. Plain ASGI: starlette's
    `BaseHTTPMiddleware` (what `app.middleware("http")` makes) passes every body message through a task group,
    ~8 ms of CPU for 6 MB inline."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500  # 500 unless a response starts: the app raised

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            # the router sets it on this scope when it matches
            path = getattr(scope.get("route"), "path", "unmatched")
            seconds = time.perf_counter() - start
            state = scope["app"].state
            state.metrics.requests.labels(state.service, path, str(status)).inc()
            state.metrics.latency.labels(state.service, path).observe(seconds)
            log.info(
                "request",
                extra={
                    "method": scope["method"],
                    "path": path,
                    "status": status,
                    "ms": round(seconds * 1e3, 2),
                },
            )


def add_guards(app: FastAPI, settings: ServiceSettings, json_limits: JsonLimits) -> None:
    """The guards of the `guards` package, added last = run first: framing, auth, load shedding, cancellation
    on disconnect, the body limit, the JSON shape check."""
    service, counters = app.state.service, app.state.metrics
    app.add_middleware(JsonGuard, limits=json_limits)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(CancelOnDisconnect, on_cancel=counters.rejections.labels(service, "disconnected").inc)
    inflight, retry_after_s = app.state.inflight, settings.retry_after_s
    on_overload = counters.rejections.labels(service, "overload").inc
    app.add_middleware(AdmitScoring, inflight=inflight, retry_after_s=retry_after_s, on_reject=on_overload)
    # the server's protocol asks it first
    app.state.early_admission = EarlyAdmission(inflight, retry_after_s, on_overload)
    if settings.api_token is not None:
        # the OpenAPI docs stay open with health, readiness and metrics: they describe routes, score nothing
        docs = (app.openapi_url, app.docs_url, app.swagger_ui_oauth2_redirect_url, app.redoc_url)
        app.add_middleware(
            BearerAuth,
            token=settings.api_token.get_secret_value(),
            open_routes=OPEN_ROUTES | {route for route in docs if route},
            on_reject=counters.rejections.labels(service, "unauthorized").inc,
        )
    app.add_middleware(UnambiguousFraming)  # first of all: nothing reads a body whose end is in doubt


OPEN_READINESS = "none (CORRGRPO_API_TOKEN unset): routes open"


def auth_readiness(settings: ServiceSettings) -> ReadinessCheck:
    """/readyz's `auth`: whether a token guards the routes, so an open service says so where it is probed."""
    said = "bearer token" if settings.api_token is not None else OPEN_READINESS

    async def check() -> str:
        return said

    return check


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    log.info("service started", extra={"service": app.state.service, "store": app.state.store.kind})
    yield
    await app.state.store.close()


def create_app(
    service: str,
    version: str,
    components: list[ComponentSpec],
    settings: ServiceSettings,
    *,
    readiness: dict[str, ReadinessCheck] | None = None,
    store: Store | None = None,
    field_limits: Mapping[str, int] | None = None,
) -> FastAPI:
    """A FastAPI app with the kit's endpoints; `app.state` holds `settings`, `store`, `metrics`, `inflight`.

    `field_limits` caps string fields by name (`{"ground_truth": 32768}`): a longer one gets 413 naming its
    path.
    """
    store = store or make_store(settings)
    app = FastAPI(title=f"corrgrpo {service} service", version=version, lifespan=lifespan)
    app.router.route_class = ParsedJsonRoute  # JSON bodies are parsed once, by JsonGuard
    state = app.state
    state.service, state.version, state.components, state.settings, state.store = (
        service,
        version,
        components,
        settings,
        store,
    )
    state.readiness = {"store": store.ping, "auth": auth_readiness(settings), **(readiness or {})}
    state.metrics = Metrics(service)
    state.inflight = InflightItems(
        settings.max_inflight_items, state.metrics.inflight_items.labels(service).set
    )
    # OpenRLHF's labels are held to the same JSON limits (state.json_limits).
    state.json_limits = JsonLimits(
        settings.max_json_depth, settings.max_json_nodes, settings.max_batch_items, field_limits or {}
    )
    add_guards(app, settings, state.json_limits)
    app.add_middleware(Observe)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, crash)
    app.include_router(router)
    return app
