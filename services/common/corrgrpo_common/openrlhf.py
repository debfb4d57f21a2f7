"""OpenRLHF's remote reward-model protocol for any service: `POST /v1/openrlhf`.

OpenRLHF (`--reward.remote_url` since 0.10.2, `--remote_rm_url` before) posts
`{"query": [...], "prompts": [...], "labels": [...]}`, where `query` is prompt + response decoded with
special tokens kept, and reads `{"rewards": [...], "scores": [...], "extra_logs": {...}}`. Here:

- the completion is the query with its prompt prefix removed (the whole query when it does not start
  with the prompt). Trailing end-of-turn tokens are the scorers' business (they ignore them);
- a label is the item's fields as a JSON object (e.g. `{"problem": {...}}`, `{"suite": ..., ...}`), or a
  bare string for the field the item declares (`x-corrgrpo-label`: `task_id` for code, `ground_truth` for
  tool calls). See `corrgrpo_proto.items`;
- `rewards` are the weighted totals (the declared weights); `extra_logs` holds one list per component, and
  `corrgrpo_error`;
- an item the service could not score fails the request (422 `unscored_items`, each item's reason at
  `labels.<index>`, as for a label that makes no valid item): OpenRLHF's rewards have no missing value, and a
  0 would be learned as the policy's (the rule of `corrgrpo_proto.common`); OpenRLHF 0.11 retries 5 times,
  then logs "Failed to fetch reward" and the sample has no reward. `?on_error=zero` opts into a reward, score
  and components of 0 with `corrgrpo_error` 1 instead;
- `scores` (what OpenRLHF's dynamic filtering compares with its range, (0, 1) by default) are the totals too,
  or with `?scores=normalized` the totals mapped onto [0, 1] by the components' declared ranges and default
  weights, or with `?scores=<component>` that component;
- an empty `query` is answered with empty lists: OpenRLHF 0.9.1–0.11.0 split every single sample over all
  the URLs given, so all servers but one receive empty lists.
A label is held to what the same item gets in a `/v1/score` body (`JsonLimits`: depth, entries, capped fields,
values, surrogates; all labels' values together count against the value cap): 413 or 422 naming
`labels.<index>`. A label that does not make a valid item is a 422 naming its index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError, model_validator

from corrgrpo_proto import ComponentSpec, ItemResult, ItemShape
from corrgrpo_proto.common import ErrorBody, ErrorDetail, WireModel

from .errors import error_response
from .guards.json_checks import JsonLimits, Problem, check_document, parse_json

TOTAL, NORMALIZED = "total", "normalized"


class OpenRLHFRequest(WireModel):
    query: list[str] = Field(description="Prompt + response, per sample; may be empty")
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


ITEM_DEPTH = 3  # where an item sits in a `/v1/score` body: {"items": [{...}]}


def label_item(
    label: str, completion: str, shape: ItemShape, limits: JsonLimits
) -> tuple[dict[str, Any], int] | Problem:
    """The item a label makes with its completion and the JSON values it holds, or its problem as that item.

    Only a text that opens an object can hold fields (`ItemShape.label_fields`): such a text is parsed and
    checked as a request body is. Any other label fills the item's label field unparsed."""
    fields: dict[str, Any] | None = None
    escapes = False
    if label.lstrip().startswith("{"):
        parsed = parse_json(label.encode(), limits)
        if isinstance(parsed, Problem):
            return parsed
        if parsed is not None and isinstance(parsed.document, dict):
            fields, escapes = parsed.document, parsed.escapes
    item = {**shape.label_fields(label if fields is None else fields), "completion": completion}
    found = check_document(item, limits, strings=escapes, depth=ITEM_DEPTH)
    return found if isinstance(found, Problem) else (item, found)


def _at(index: int, problem: Problem) -> JSONResponse:
    loc = f"labels.{index}" if problem.loc in (None, "body") else f"labels.{index}.{problem.loc}"
    return Problem(problem.status, problem.error, f"{loc}: {problem.message}", loc).response()


def build_items(
    request: OpenRLHFRequest, item_model: type[BaseModel], shape: ItemShape, limits: JsonLimits
) -> list[BaseModel] | JSONResponse:
    """The items the labels make. A label over a limit refuses the request (its problem, at
    `labels.<index>`)."""
    items, details = [], []
    values = 0  # every label's values, against one request's cap
    for index, (query, prompt, label) in enumerate(
        zip(request.query, request.prompts, request.labels, strict=True)
    ):
        left = replace(limits, max_values=max(limits.max_values - values, 1)) if limits.max_values else limits
        try:
            made = label_item(label, completion_of(query, prompt), shape, left)
            if isinstance(made, Problem):
                return _at(index, made)
            item, count = made
            values += count
            items.append(item_model.model_validate(item))
        except ValidationError as error:
            details += [
                ErrorDetail(loc=f"labels.{index}." + ".".join(map(str, e["loc"])), message=e["msg"])
                for e in error.errors()
            ]
        except ValueError as error:
            details.append(ErrorDetail(loc=f"labels.{index}", message=str(error)))
    if details:
        return error_response(
            422, "validation_error", f"{len(details)} label error(s), first: {details[0].loc}", details
        )
    return items


def total_range(specs: Sequence[ComponentSpec]) -> tuple[float, float] | str:
    """(lowest, highest) total under the default weights, or the name of an unbounded component."""
    low = high = 0.0
    for spec in specs:
        if spec.min is None or spec.max is None:
            return spec.name
        ends = (spec.weight * spec.min, spec.weight * spec.max)
        low, high = low + min(ends), high + max(ends)
    return low, high


def score_column(choice: str, specs: Sequence[ComponentSpec]) -> Callable[[ItemResult], float] | str:
    """How `scores` is made from a result for `?scores=choice`, or why it cannot be."""
    names = [spec.name for spec in specs]
    if choice == TOTAL:
        return lambda result: float(result.total or 0.0) if result.error is None else 0.0
    if choice == NORMALIZED:
        bounds = total_range(specs)
        if isinstance(bounds, str):
            return f"cannot normalise: component {bounds!r} is unbounded"
        low, high = bounds
        return lambda result: (
            (float(result.total or 0.0) - low) / (high - low) if result.error is None else 0.0
        )
    if choice in names:
        return lambda result: float((result.components or {}).get(choice, 0.0))
    return f"unknown scores {choice!r}; give {TOTAL}, {NORMALIZED} or a component: {', '.join(names)}"


def add_openrlhf_route(
    app: FastAPI, item_model: type[BaseModel], score_items: Callable[[list[BaseModel]], Awaitable[Any]]
) -> None:
    """Register `POST /v1/openrlhf`; `score_items(items)` is the kit's scoring path (limits, cache,
    metrics)."""
    specs: list[ComponentSpec] = app.state.components
    names = [spec.name for spec in specs]
    shape = ItemShape.of_schema(item_model.model_json_schema())

    async def openrlhf(
        request: OpenRLHFRequest, scores: str = TOTAL, on_error: Literal["fail", "zero"] = "fail"
    ) -> OpenRLHFResponse | JSONResponse:
        column = score_column(scores, specs)
        if isinstance(column, str):
            return error_response(
                422, "validation_error", column, [ErrorDetail(loc="query.scores", message=column)]
            )
        # labels are parsed and checked here, as JsonGuard checks a body: off the event loop
        items = await asyncio.to_thread(build_items, request, item_model, shape, app.state.json_limits)
        if isinstance(items, JSONResponse):
            return items
        results = await score_items(items) if items else []
        if isinstance(results, JSONResponse):
            return results
        failed = [
            ErrorDetail(loc=f"labels.{index}", message=f"{result.error.code}: {result.error.message}")
            for index, result in enumerate(results)
            if result.error is not None
        ]
        if failed and on_error == "fail":
            message = (
                f"{len(failed)} item(s) could not be scored, first: {failed[0].loc}: {failed[0].message}"
            )
            return error_response(422, "unscored_items", message, failed)
        totals = [float(r.total) if r.error is None and r.total is not None else 0.0 for r in results]
        logs = {name: [float((r.components or {}).get(name, 0.0)) for r in results] for name in names}
        logs["corrgrpo_error"] = [float(r.error is not None) for r in results]
        return OpenRLHFResponse(rewards=totals, scores=[column(r) for r in results], extra_logs=logs)

    app.post(
        "/v1/openrlhf",
        response_model=OpenRLHFResponse,
        responses={status: {"model": ErrorBody} for status in (400, 401, 413, 422, 429)},
        summary="OpenRLHF remote reward-model protocol",
        description="`scores`: `total` (default), `normalized` (total mapped onto [0, 1]) or a component "
        "name. "
        "`on_error`: `fail` (default: an item that could not be scored fails the request) or `zero`.",
    )(openrlhf)
