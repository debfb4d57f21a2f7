"""OpenRLHF's remote reward-model protocol for any service: `POST /v1/openrlhf`.

OpenRLHF (`--remote_rm_url http://host:port/v1/openrlhf`, several comma-separated URLs to shard)
posts `{"query": [...], "prompts": [...], "labels": [...]}`, where `query` is prompt + response, and
reads `{"rewards": [...], "scores": [...], "extra_logs": {...}}`. Here:

- the completion is the query with its prompt prefix removed (the whole query when it does not start
  with the prompt);
- a label is the item as JSON, less `completion` (e.g. `{"problem": {...}}`, `{"suite": ..., ...}`), or
  a plain string that fills the item's `ground_truth` field (tool calls) or else its `task_id` (code);
- `rewards` and `scores` are the weighted totals; `extra_logs` holds one list per component, and
  `corrgrpo_error` (1 for an item the service could not score, whose reward and components are 0).
A label that does not make a valid item is a 422 naming its index.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError, model_validator

from corrgrpo_proto.common import ErrorBody, ErrorDetail, WireModel

from .errors import error_response


class OpenRLHFRequest(WireModel):
    query: list[str] = Field(min_length=1, description="Prompt + response, per sample")
    prompts: list[str]
    labels: list[str]

    @model_validator(mode="after")
    def _same_lengths(self) -> OpenRLHFRequest:
        if not len(self.query) == len(self.prompts) == len(self.labels):
            raise ValueError("query, prompts and labels must have the same length")
        return self


class OpenRLHFResponse(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]


def completion_of(query: str, prompt: str) -> str:
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


def item_fields(label: str, item_model: type[BaseModel]) -> dict[str, Any]:
    """The item fields a label carries: a JSON object, or a plain string for the model's label field."""
    try:
        parsed = json.loads(label)
    except ValueError:
        parsed = label
    if isinstance(parsed, dict):
        return parsed
    field = "ground_truth" if "ground_truth" in item_model.model_fields else "task_id"
    return {field: label}


def build_items(request: OpenRLHFRequest, item_model: type[BaseModel]) -> list[BaseModel] | JSONResponse:
    items, details = [], []
    for index, (query, prompt, label) in enumerate(zip(request.query, request.prompts, request.labels, strict=True)):
        try:
            items.append(
                item_model.model_validate({**item_fields(label, item_model), "completion": completion_of(query, prompt)})
            )
        except ValidationError as error:
            details += [
                ErrorDetail(loc=f"labels.{index}." + ".".join(map(str, e["loc"])), message=e["msg"]) for e in error.errors()
            ]
    if details:
        return error_response(422, "validation_error", f"{len(details)} label error(s), first: {details[0].loc}", details)
    return items


def add_openrlhf_route(
    app: FastAPI, item_model: type[BaseModel], score_items: Callable[[list[BaseModel]], Awaitable[Any]]
) -> None:
    """Register `POST /v1/openrlhf`; `score_items(items)` is the kit's scoring path (limits, cache, metrics)."""
    names = [spec.name for spec in app.state.components]

    async def openrlhf(request: OpenRLHFRequest) -> OpenRLHFResponse | JSONResponse:
        items = build_items(request, item_model)
        if isinstance(items, JSONResponse):
            return items
        results = await score_items(items)
        if isinstance(results, JSONResponse):
            return results
        totals = [float(r.total) if r.error is None and r.total is not None else 0.0 for r in results]
        logs = {name: [float((r.components or {}).get(name, 0.0)) for r in results] for name in names}
        logs["corrgrpo_error"] = [float(r.error is not None) for r in results]
        return OpenRLHFResponse(rewards=totals, scores=totals, extra_logs=logs)

    app.post(
        "/v1/openrlhf",
        response_model=OpenRLHFResponse,
        responses={status: {"model": ErrorBody} for status in (400, 401, 413, 422, 429)},
        summary="OpenRLHF remote reward-model protocol",
    )(openrlhf)
