"""Wire models of the toy service (`bench/toy/`, the load bench's service and the fourth-service test's
template).

A service's wire models live here, in proto, whatever the service: the trainer and adapters, which may import
only proto, build some services' requests from them. The schemas under `proto/schemas/` are made from every
module here.
"""

from __future__ import annotations

from pydantic import Field

from .common import ScoreRequest, WireModel


class ToyItem(WireModel):
    """A completion scored by its length. It holds one of the toy's worker slots for the configured time."""

    id: str | None = None
    completion: str = Field(description="Scored by its length in characters")


class ToyScoreRequest(ScoreRequest[ToyItem]):
    pass


SCHEMA_MODELS = (
    ToyItem,
    ToyScoreRequest,
)
