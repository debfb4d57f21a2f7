"""Dataset rows a service cannot take, found when the dataset loads: dropped with one line, before they cost
a step.

A row goes to every configured service as an item (its item fields and the completion). Each service's
`/openapi.json` names the request model of `POST /v1/score`. That model is a wire model of `corrgrpo_proto`,
the one the service validates requests with, so the check here is the service's own validation run on a
one-item request with an empty completion, not a copy of it. What the model does not decide (a service's size
limits, a `task_id` it did not load) is refused at scoring; rewards.py then leaves that rollout missing rather
than failing the step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from corrgrpo_proto import ItemShape, RewardClient
from corrgrpo_proto.client import SCORE_PATH
from corrgrpo_proto.schemas import MODELS

from .config_shape import Service
from .rewards import client_options, sync_options

SHOWN = 5  # rows named in the line. The rest are counted


def request_model(document: Mapping[str, Any]) -> type[BaseModel] | None:
    """The `corrgrpo_proto` model of a service's score request, by the name its OpenAPI document gives it
    (None for a service whose request is no proto model: its rows are checked at scoring only)."""
    body = document["paths"][SCORE_PATH]["post"]["requestBody"]["content"]["application/json"]["schema"]
    # "-Input": pydantic's name for the input side of a model
    name = body.get("$ref", "").rsplit("/", 1)[-1].removesuffix("-Input")
    return next((model for model in MODELS if model.__name__ == name), None)


def refusal(model: type[BaseModel], item: dict[str, Any]) -> str | None:
    """Why the service's request model refuses a one-item request of `item` (its first error), or None."""
    try:
        model.model_validate({"items": [item]})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"][2:]) or "item"  # past ("items", 0)
        return f"{where}: {first['msg']}"
    return None


def refused_rows(rows: Sequence[Mapping[str, Any]], services: Mapping[str, Service]) -> dict[int, str]:
    """Index → why, for each row some configured service's request model refuses (the first that does)."""
    refused: dict[int, str] = {}
    for name, spec in services.items():
        with RewardClient(spec.url, **sync_options(client_options(spec))) as client:
            document = client.request("GET", "/openapi.json")
        model = request_model(document)
        if model is None:
            continue
        shape = ItemShape.of_openapi(document)
        for index, row in enumerate(rows):
            if index not in refused and (why := refusal(model, shape.item("", row))):
                refused[index] = f"{name}: {why}"
    return refused


def checked_rows(
    rows: list[dict[str, Any]], services: Mapping[str, Service], first: int = 0, label: str = "dataset"
) -> list[dict[str, Any]]:
    """`rows` (from row `first` of their source) without those a configured service cannot take. One line says
    how many, which (row numbers of the source) and why."""
    refused = refused_rows(rows, services)
    if not refused:
        return rows
    named = ", ".join(f"row {first + index} ({why})" for index, why in list(refused.items())[:SHOWN])
    more = f" and {len(refused) - SHOWN} more" if len(refused) > SHOWN else ""
    dropped = f"dropped {len(refused)} of {len(rows)} rows the services cannot take"
    print(f"[data] {label}: {dropped}: {named}{more}", flush=True)
    return [row for index, row in enumerate(rows) if index not in refused]
