"""Wire models shared by every reward service: the score envelope, component descriptors, health.

A service's `POST /v1/score` takes a `ScoreRequest[ItemT]` (its own item type) and returns a
`ScoreResponse`: one `ItemResult` per item, in the order asked. An item that cannot be scored
gets an `error` instead of components. The batch itself never fails because of one item.

Weights: `resolve_weights`, the one rule of every path (declared defaults, overrides, components not trained
at 0).

A failed item has no reward, on every path. Its `error` says the service could not score it (the service's
fault or the request's; what a candidate causes is scored, never an error), so a 0 would be learned as the
policy's failure. Where the stack has a missing value the item is missing, out of its group's statistics with
advantage 0: TRL (None in every column: TRL 1.16 leaves such a rollout out of its group's mean and std),
verl's `corrgrpo` estimator (`corrgrpo_on_error=zero`), verifiers (a trace error, every component unscored),
OpenEnv (reward None), OpenRLHF (422 `unscored_items` naming the item: OpenRLHF retries, then
leaves the sample without a reward; `?on_error=zero` opts into 0 with a flag). verl, which has no missing
reward, fails the step naming the item (`compute_score`'s default). NeMo Gym's `/verify` answers 0 with
`mask_sample` true.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

ItemT = TypeVar("ItemT", bound=BaseModel)


class WireModel(BaseModel):
    """Base of every request model: unknown fields and NaN/infinity are errors, not silently accepted."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ComponentSpec(BaseModel):
    """One reward component a service returns, with its declared range and default weight."""

    name: str
    min: float | None = Field(description="Smallest value the component takes; null if unbounded")
    max: float | None = Field(description="Largest value the component takes; null if unbounded")
    weight: float = Field(1.0, description="Default weight of the component in `total`")
    description: str = ""


class ComponentsResponse(BaseModel):
    """`GET /v1/components`."""

    service: str
    components: list[ComponentSpec]


def resolve_weights(
    specs: Sequence[ComponentSpec],
    overrides: Mapping[str, float] | None = None,
    only: Iterable[str] | None = None,
) -> dict[str, float]:
    """The weight of every declared component: the override where one is given, else the declared default.

    The one weighting rule of every path: a service's `total`, the trainer's reward weights, the adapters'.
    With `only` (the components a trainer optimises), every other component weighs 0, so that the `total` of a
    request sent with these weights is the sum the trainer optimises. Raises KeyError naming a component not
    declared."""
    declared = {spec.name: spec.weight for spec in specs}
    overrides = overrides or {}
    kept = list(declared) if only is None else list(only)
    if unknown := next((name for name in [*overrides, *kept] if name not in declared), None):
        raise KeyError(unknown)
    return {
        name: float(overrides.get(name, weight)) if name in kept else 0.0 for name, weight in declared.items()
    }


class ItemError(BaseModel):
    """Why one item of a batch could not be scored."""

    code: str = Field(description="Machine-readable reason, e.g. `unknown_task`, `internal`")
    message: str


class ItemResult(BaseModel):
    """Reward vector of one item, or the error that kept it from being scored."""

    id: str | None = None
    components: dict[str, float] | None = None
    total: float | None = Field(None, description="Weighted sum of the components")
    info: dict[str, Any] = Field(default_factory=dict)
    error: ItemError | None = None


class ScoreRequest(WireModel, Generic[ItemT]):
    """A batch of items to score; `weights` overrides the components' default weights."""

    items: list[ItemT] = Field(min_length=1)
    weights: dict[str, float] | None = None


class ScoreResponse(BaseModel):
    service: str
    results: list[ItemResult]


class ErrorDetail(BaseModel):
    loc: str = Field(description="Dotted path of the offending field, e.g. `items.3.completion`")
    message: str


class ErrorBody(BaseModel):
    """Every non-2xx response of every service has this body."""

    error: str = Field(description="Machine-readable reason, e.g. `validation_error`")
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class Health(BaseModel):
    """`GET /healthz`: the process is alive."""

    status: str = "ok"
    service: str
    version: str


class Readiness(BaseModel):
    """`GET /readyz`: every dependency answered (HTTP 503 when `ready` is false)."""

    ready: bool
    service: str
    checks: dict[str, str] = Field(description="Dependency name → `ok` or the reason it failed")


SCHEMA_MODELS = (
    ComponentSpec,
    ComponentsResponse,
    ItemResult,
    ScoreResponse,
    ErrorBody,
    Health,
    Readiness,
)
