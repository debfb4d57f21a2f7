"""A toy service on the kit, for bench/bench_load.py only: `PYTHONPATH=bench python -m corrgrpo_toy --port P`.

It exists so the kit's own behaviour (auth, limits, overload, idempotency, Redis faults) can be
load- and fault-tested over real HTTP without any service's scoring: each item holds one of
`CORRGRPO_TOY_WORKERS` slots for `CORRGRPO_TOY_ITEM_MS` milliseconds (a stand-in for a sandbox run) and scores
the length of its text. Not installed, not deployed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import FastAPI
from pydantic import Field

from corrgrpo_common.cli import serve
from corrgrpo_common.registry import ServiceDeclaration
from corrgrpo_common.scoring import Scored, add_score_route
from corrgrpo_common.settings import ServiceSettings, cpu_count
from corrgrpo_proto import ComponentSpec, ItemError, ScoreRequest
from corrgrpo_proto.common import WireModel

COMPONENTS = (
    ComponentSpec(name="length", min=0, max=None, weight=0.001, description="characters in `text`"),
    ComponentSpec(name="nonempty", min=0, max=1, description="`text` is not empty"),
)


class ToyItem(WireModel):
    id: str | None = None
    text: str


class ToyScoreRequest(ScoreRequest[ToyItem]):
    pass


class ToySettings(ServiceSettings):
    toy_item_ms: float = Field(0.0, ge=0, description="Simulated work per item, in milliseconds")
    toy_workers: int = Field(
        default_factory=cpu_count,
        description="Items worked on at once (default: CPU count)",
    )


def build(settings: ToySettings) -> FastAPI:
    app = SERVICE.create_app(settings)
    slots = asyncio.Semaphore(max(1, settings.toy_workers))

    async def one(item: ToyItem) -> Scored:
        async with slots:
            await asyncio.sleep(settings.toy_item_ms / 1000)
        return Scored({"length": float(len(item.text)), "nonempty": float(bool(item.text))})

    async def scorer(items: list[ToyItem]) -> Sequence[Scored | ItemError]:
        return await asyncio.gather(*(one(item) for item in items))

    add_score_route(app, ToyScoreRequest, scorer)
    return app


# Declared like a service but registered nowhere (no entry point): it never shows up in `declared()`.
SERVICE = ServiceDeclaration(
    name="toy",
    version="0.1.0",
    port=8199,
    components=COMPONENTS,
    settings=ToySettings,
    app="corrgrpo_toy:build",
    example=lambda completion: {"text": "abc" if completion is None else completion},
)

if __name__ == "__main__":
    serve(SERVICE)
