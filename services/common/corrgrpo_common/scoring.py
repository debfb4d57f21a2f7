"""`POST /v1/score` for any service: validation, weights, totals, idempotency, per-item errors.

A service supplies a pure async `scorer(items) -> list[Scored | ItemError]`, one entry per item in
order. This module turns that into the wire envelope: it checks `weights`, sums the weighted
components into `total`, answers items it has seen (same `id`, same content) from the store, and
turns an exception in the scorer into per-item errors instead of a failed batch.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_args

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from corrgrpo_proto import (
    ComponentSpec,
    ErrorBody,
    ItemError,
    ItemResult,
    ScoreRequest,
    ScoreResponse,
    resolve_weights,
)
from corrgrpo_proto.common import ErrorDetail

from .errors import error_response
from .guards.admission import CURRENT_RESERVATION, Reservation, overloaded
from .openrlhf import add_openrlhf_route
from .store.errors import StoreUnavailable
from .store.interface import Store
from .text import valid_json, valid_text

log = logging.getLogger("corrgrpo.scoring")
ItemT = TypeVar("ItemT", bound=BaseModel)


@dataclass
class Scored:
    """A scorer's answer for one item: every component, and diagnostic info."""

    components: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)


Scorer = Callable[[list[Any]], Awaitable[Sequence[Scored | ItemError]]]


def to_result(item_id: str | None, answer: Scored | ItemError, weights: dict[str, float]) -> ItemResult:
    """Built without validation (a batch's results are the bulk of a response): every field is of its type
    here.

    The one place a scorer's text becomes a result: `info` and error messages echo what a candidate wrote, so
    they are made encodable here (`valid_json`). One item's lone surrogate cannot fail its batch's
    serialisation."""
    if isinstance(answer, ItemError):
        error = ItemError.model_construct(code=answer.code, message=valid_text(answer.message))
        return ItemResult.model_construct(id=item_id, components=None, total=None, info={}, error=error)
    components = {name: float(value) for name, value in answer.components.items()}
    total = sum(weights[name] * value for name, value in components.items())
    return ItemResult.model_construct(
        id=item_id, components=components, total=total, info=valid_json(answer.info), error=None
    )


def cache_key(service: str, item: BaseModel, weights: dict[str, float]) -> str:
    """Same id and same content and weights → same key. A reused id with new content misses."""
    payload = json.dumps([item.model_dump(mode="json"), weights], sort_keys=True)
    return f"corrgrpo:{service}:score:{hashlib.sha256(payload.encode()).hexdigest()}"


async def score_batch(
    service: str,
    items: list[Any],
    weights: dict[str, float],
    scorer: Scorer,
    store: Store,
    ttl_s: float,
) -> list[ItemResult]:
    """Score `items` in order, answering the ones with an `id` from the store when seen before."""
    keys = [cache_key(service, item, weights) if item.id is not None else None for item in items]
    cached: list[bytes | None] = [None] * len(items)
    wanted = [k for k in keys if k is not None]
    if wanted:
        try:
            found = iter(await store.get_many(wanted))
            cached = [next(found) if k is not None else None for k in keys]
        except StoreUnavailable as error:
            log.warning("idempotency cache unavailable; scoring anyway", extra={"error": str(error)})
    todo = [i for i, hit in enumerate(cached) if hit is None]
    try:
        answers = list(await scorer([items[i] for i in todo])) if todo else []
        if len(answers) != len(todo):
            raise RuntimeError(f"scorer returned {len(answers)} answers for {len(todo)} items")
    except Exception as error:
        log.exception("scorer failed for the whole batch")
        answers = [ItemError(code="internal", message=f"{type(error).__name__}: {error}")] * len(todo)
    results: list[ItemResult | None] = [
        ItemResult.model_validate_json(hit) if hit is not None else None for hit in cached
    ]
    fresh: dict[str, bytes] = {}
    for index, answer in zip(todo, answers, strict=True):
        results[index] = to_result(items[index].id, answer, weights)
        if keys[index] is not None and not isinstance(answer, ItemError):
            fresh[keys[index]] = results[index].model_dump_json().encode()  # type: ignore[union-attr]
    if fresh:
        try:
            await store.set_many(fresh, ttl_s, evictable=True)
        except StoreUnavailable as error:
            log.warning("idempotency cache unavailable; results not remembered", extra={"error": str(error)})
    return [r for r in results if r is not None]


class ScoreRoute:
    # The endpoint of `POST /v1/score` (FastAPI calls the instance) and the one scoring path of both scoring
    # routes. `__signature__` names the service's request model, which FastAPI validates the body against and
    # publishes: the annotation of `__call__` can only say `ScoreRequest[Any]`. No docstring: FastAPI would
    # publish it as the route's description.

    def __init__(self, app: FastAPI, request_model: type[ScoreRequest[Any]], scorer: Scorer) -> None:
        self.app, self.scorer = app, scorer
        self.service: str = app.state.service
        self.specs: list[ComponentSpec] = app.state.components
        request = inspect.Parameter(
            "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=request_model
        )
        self.__signature__ = inspect.Signature([request], return_annotation=Response)

    async def __call__(self, request: ScoreRequest[Any]) -> Response:
        try:
            weights = resolve_weights(self.specs, request.weights)
        except KeyError as unknown:
            names = ", ".join(s.name for s in self.specs)
            detail = ErrorDetail(
                loc=f"weights.{unknown.args[0]}", message=f"unknown component; known: {names}"
            )
            return error_response(
                422, "validation_error", f"unknown component in weights: {unknown.args[0]}", [detail]
            )
        results = await self.score_items(request.items, weights)
        if isinstance(results, JSONResponse):
            return results
        # serialized here: FastAPI would validate the results a second time against `response_model` (docs
        # only)
        return Response(
            ScoreResponse(service=self.service, results=results).model_dump_json(),
            media_type="application/json",
        )

    async def score_items(
        self, items: list[Any], weights: dict[str, float]
    ) -> list[ItemResult] | JSONResponse:
        """The one scoring path of both routes: in-flight budget, idempotency cache, metrics."""
        state, service = self.app.state, self.service
        settings, metrics, inflight = state.settings, state.metrics, state.inflight
        # one request holds at most its share of the budget: a larger batch is scored in chunks of it
        share = min(len(items), settings.max_request_inflight_items, inflight.limit or len(items))
        reservation = CURRENT_RESERVATION.get() or Reservation(inflight, 0)  # made at the door (AdmitScoring)
        if not reservation.resize(share):
            metrics.rejections.labels(service, "overload").inc()
            return overloaded(inflight, settings.retry_after_s)
        results: list[ItemResult] = []
        try:
            for start in range(0, len(items), share):
                chunk = items[start : start + share]
                results += await score_batch(
                    service, chunk, weights, self.scorer, state.store, settings.cache_ttl_s
                )
        finally:
            reservation.release()
        errors = sum(result.error is not None for result in results)
        metrics.items.labels(service, "error").inc(errors)
        metrics.items.labels(service, "scored").inc(len(results) - errors)
        return results

    async def score_with_default_weights(self, items: list[Any]) -> list[ItemResult] | JSONResponse:
        """OpenRLHF's scoring path: its protocol carries no weights."""
        return await self.score_items(items, resolve_weights(self.specs, None))


def add_score_route(app: FastAPI, request_model: type[ScoreRequest[Any]], scorer: Scorer) -> None:
    """Register `POST /v1/score` taking `request_model`, and OpenRLHF's shape of it at `POST /v1/openrlhf`."""
    route = ScoreRoute(app, request_model, scorer)
    app.post(
        "/v1/score",
        name="score",
        response_model=ScoreResponse,
        responses={status: {"model": ErrorBody} for status in (400, 401, 413, 422, 429)},
        summary=f"Score a batch of {route.service} items",
    )(route)
    (item_model,) = get_args(request_model.model_fields["items"].annotation)
    add_openrlhf_route(app, item_model, route.score_with_default_weights)
