"""HTTP layer of the code service: routes only; scoring lives in `scoring` (pure) and the sandbox."""

from __future__ import annotations

import atexit
import logging

from fastapi import FastAPI

from corrgrpo_code.harness import CHILD_FILE
from corrgrpo_common import add_score_route, make_store
from corrgrpo_proto.code import CodeScoreRequest
from corrgrpo_sandbox import IsolationUnavailable, Sandbox

from .declaration import SERVICE
from .problems import load_problems
from .scorer import CodeScorer
from .settings import CodeSettings

log = logging.getLogger("corrgrpo.code")


def build(settings: CodeSettings) -> FastAPI:
    try:
        sandbox = Sandbox(
            mode=settings.code_sandbox_mode,
            workers=settings.code_workers,
            limits=settings.limits(),
            isolation=settings.code_isolation,
            preload=[CHILD_FILE],
        )
    except IsolationUnavailable as error:
        raise IsolationUnavailable(
            f"the code service refuses to run untrusted code without isolation: {error} "
            "(for the code service: CORRGRPO_CODE_ISOLATION=unsafe-none)"
        ) from error
    (log.warning if sandbox.isolation == "unsafe-none" else log.info)("code service: sandbox isolation %s", sandbox.isolation)
    atexit.register(sandbox.close)
    store = make_store(settings)
    scorer = CodeScorer(sandbox, store, load_problems(settings.code_datasets), settings.scoring_config(), settings.code_workers)

    async def sandbox_isolation() -> str | None:
        """Ready only with isolation: `unsafe-none` runs (opted in by name) but is never reported ready."""
        if sandbox.isolation == "unsafe-none":
            raise RuntimeError("isolation unsafe-none: untrusted code runs unsandboxed")
        return sandbox.isolation

    readiness = {"sandbox": sandbox_isolation}
    app = SERVICE.create_app(settings, readiness=readiness, store=store, field_limits=settings.field_limits())
    app.state.scorer = scorer
    add_score_route(app, CodeScoreRequest, scorer.score)
    return app
