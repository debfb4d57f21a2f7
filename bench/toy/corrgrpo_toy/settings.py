"""Settings of the toy service (`CORRGRPO_TOY_*`, on top of the kit's `CORRGRPO_*`)."""

from __future__ import annotations

from pydantic import Field

from corrgrpo_common import ServiceSettings
from corrgrpo_common.settings import cpu_count


class ToySettings(ServiceSettings):
    toy_item_ms: float = Field(0.0, ge=0, description="Simulated work per item, in milliseconds")
    toy_workers: int = Field(
        default_factory=cpu_count, description="Items worked on at once (default: CPU count)"
    )
