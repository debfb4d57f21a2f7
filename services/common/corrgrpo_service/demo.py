"""A minimal service on the kit: `python -m corrgrpo_service.demo --port P`.

It exists so the kit's own behaviour (auth, limits, overload, idempotency, Redis faults) can be
load- and fault-tested over real HTTP without any service's scoring: each item holds one of
`workers` slots for `CORRGRPO_DEMO_ITEM_MS` milliseconds (a stand-in for a sandbox run) and scores
the length of its text. Not deployed anywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import FastAPI
from pydantic import Field

from corrgrpo_proto import ComponentSpec, ItemError, ScoreRequest
from corrgrpo_proto.common import WireModel

from .cli import serve
from .registry import ServiceDeclaration
from .scoring import Scored, add_score_route
from .settings import ServiceSettings, cpu_count

COMPONENTS = (
    ComponentSpec(name="length", min=0, max=None, weight=0.001, description="characters in `text`"),
    ComponentSpec(name="nonempty", min=0, max=1, description="`text` is not empty"),
)


class DemoItem(WireModel):
    id: str | None = None
    text: str


class DemoScoreRequest(ScoreRequest[DemoItem]):
    pass


class DemoSettings(ServiceSettings):
    demo_item_ms: float = Field(0.0, ge=0, description="Simulated work per item, in milliseconds")
    demo_workers: int = Field(
        default_factory=cpu_count,
        description="Items worked on at once (default: CPU count)",
    )


def build(settings: DemoSettings) -> FastAPI:
    app = SERVICE.create_app(settings)
    slots = asyncio.Semaphore(max(1, settings.demo_workers))

    async def one(item: DemoItem) -> Scored:
        async with slots:
            await asyncio.sleep(settings.demo_item_ms / 1000)
        return Scored({"length": float(len(item.text)), "nonempty": float(bool(item.text))})

    async def scorer(items: list[DemoItem]) -> Sequence[Scored | ItemError]:
        return await asyncio.gather(*(one(item) for item in items))

    add_score_route(app, DemoScoreRequest, scorer)
    return app


# Declared like a service but registered nowhere (no entry point): it never shows up in `declared()`.
SERVICE = ServiceDeclaration(
    name="demo", version="0.1.0", port=8199, components=COMPONENTS, settings=DemoSettings, app="corrgrpo_service.demo:build"
)

if __name__ == "__main__":
    serve(SERVICE)
