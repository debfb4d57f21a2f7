"""HTTP layer of the code service: routes only; scoring lives in `scoring` (pure) and the sandbox."""

from __future__ import annotations

import atexit

from fastapi import FastAPI

from corrgrpo_proto import ComponentSpec
from corrgrpo_proto.code import CodeScoreRequest
from corrgrpo_sandbox import Sandbox
from corrgrpo_service import add_score_route, create_app, make_store

from .problems import load_problems
from .scoring import CodeScorer, ScoringConfig
from .settings import CodeSettings

SERVICE = "code"
VERSION = "0.1.0"
DEFAULT_PORT = 8101

COMPONENTS = [
    ComponentSpec(name="format", min=0, max=1, description="exactly one fenced Python code block"),
    ComponentSpec(name="syntax", min=0, max=1, description="the extracted code parses"),
    ComponentSpec(name="compile", min=0, max=1, description="requires syntax; the module's top level runs"),
    ComponentSpec(name="runtime", min=0, max=1, description="requires compile; tests run without an uncaught error"),
    ComponentSpec(name="correct", min=0, max=1, description="requires runtime; every test passes"),
    ComponentSpec(
        name="ast_similarity",
        min=0,
        max=1,
        description="AST similarity to the reference, names and literals abstracted",
    ),
    ComponentSpec(name="efficiency", min=0, max=2, description="correct only: min(t_ref / t, 2)"),
]


def scoring_config(settings: CodeSettings) -> ScoringConfig:
    return ScoringConfig(
        limits=settings.limits(),
        extract=settings.code_extract,
        languages=settings.languages(),
        cache_prefix=settings.code_cache_prefix,
        reference_runs=settings.code_reference_runs,
        efficiency_cap=settings.code_efficiency_cap,
        efficiency=settings.code_efficiency,
        max_code_chars=settings.code_max_chars,
    )


def build(settings: CodeSettings) -> FastAPI:
    sandbox = Sandbox(
        mode=settings.code_sandbox_mode,
        workers=settings.workers,
        limits=settings.limits(),
        allow_fallback=settings.code_allow_fallback,
    )
    atexit.register(sandbox.close)
    store = make_store(settings.redis_url)
    scorer = CodeScorer(sandbox, store, load_problems(settings.code_datasets), scoring_config(settings), settings.workers)

    async def sandbox_isolation() -> str | None:
        """`ok` under bwrap; the loud `fallback: <reason>` string as a warning otherwise."""
        return None if sandbox.isolation == "bwrap" else sandbox.isolation

    app = create_app(SERVICE, VERSION, COMPONENTS, settings, readiness={"sandbox": sandbox_isolation}, store=store)
    app.state.scorer = scorer
    add_score_route(app, CodeScoreRequest, scorer.score)
    return app
