"""HTTP layer of the code service: routes only; scoring lives in `scoring` (pure) and the sandbox."""

from __future__ import annotations

import atexit

from fastapi import FastAPI

from corrgrpo_proto.code import CodeScoreRequest
from corrgrpo_sandbox import Sandbox
from corrgrpo_service import add_score_route, make_store

from .declaration import SERVICE
from .problems import load_problems
from .scoring import CodeScorer
from .settings import CodeSettings


def build(settings: CodeSettings) -> FastAPI:
    sandbox = Sandbox(
        mode=settings.code_sandbox_mode,
        workers=settings.code_workers,
        limits=settings.limits(),
        allow_fallback=settings.code_allow_fallback,
    )
    atexit.register(sandbox.close)
    store = make_store(settings.redis_url)
    scorer = CodeScorer(sandbox, store, load_problems(settings.code_datasets), settings.scoring_config(), settings.code_workers)

    async def sandbox_isolation() -> str | None:
        """`ok` under bwrap; the loud `fallback: <reason>` string as a warning otherwise."""
        return None if sandbox.isolation == "bwrap" else sandbox.isolation

    app = SERVICE.create_app(settings, readiness={"sandbox": sandbox_isolation}, store=store)
    app.state.scorer = scorer
    add_score_route(app, CodeScoreRequest, scorer.score)
    return app
