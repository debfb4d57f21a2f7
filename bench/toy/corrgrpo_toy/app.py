"""HTTP layer of the toy service: each item holds one of `toy_workers` slots for `toy_item_ms` (a stand-in for
a sandbox run), then scores the length of its completion."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from fastapi import FastAPI

from corrgrpo_common import Scored, add_score_route
from corrgrpo_proto import ItemError
from corrgrpo_proto.toy import ToyItem, ToyScoreRequest

from .declaration import SERVICE
from .settings import ToySettings


def build(settings: ToySettings) -> FastAPI:
    app = SERVICE.create_app(settings)
    slots = asyncio.Semaphore(max(1, settings.toy_workers))

    async def one(item: ToyItem) -> Scored:
        async with slots:
            await asyncio.sleep(settings.toy_item_ms / 1000)
        return Scored({"length": float(len(item.completion)), "nonempty": float(bool(item.completion))})

    async def scorer(items: list[ToyItem]) -> Sequence[Scored | ItemError]:
        return await asyncio.gather(*(one(item) for item in items))

    add_score_route(app, ToyScoreRequest, scorer)
    return app
