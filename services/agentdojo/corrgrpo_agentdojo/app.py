"""HTTP layer of the AgentDojo episode service: routes only. The work is in `task_listing`, `live_episodes`
and `trajectory_replay`, over one catalog and one start-environment cache."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse

from corrgrpo_common import StoreUnavailable, add_score_route, error_response
from corrgrpo_common.store.errors import StoreTampered
from corrgrpo_proto import ErrorBody
from corrgrpo_proto.agentdojo import (
    AgentDojoScoreRequest,
    Episode,
    EpisodeCreate,
    FinishRequest,
    FinishResponse,
    StepRequest,
    StepResponse,
    TasksResponse,
)
from corrgrpo_proto.common import ErrorDetail

from .catalog import Catalog
from .declaration import SERVICE
from .live_episodes import LiveEpisodes
from .request_checks import EpisodeError
from .settings import AgentDojoSettings
from .start_environments import StartCache
from .task_listing import TaskListing
from .trajectory_replay import TrajectoryReplay

ERRORS = {status: {"model": ErrorBody} for status in (404, 409, 422, 429, 500, 503)}
T = TypeVar("T")


async def answer(work: Callable[[], Awaitable[T]]) -> T | JSONResponse:
    """The route's result, or the refusal as the kit's error body."""
    try:
        return await work()
    except EpisodeError as error:
        details = [ErrorDetail(loc=error.loc, message=error.message)] if error.loc else None
        response = error_response(error.status, error.code, error.message, details)
        if error.retry_after_s is not None:
            response.headers["Retry-After"] = str(error.retry_after_s)
        return response
    except StoreTampered as error:  # logged by the store. The forged state was never unpickled
        return error_response(500, "store_tampered", f"episode state refused: {error}")
    except StoreUnavailable as error:
        return error_response(503, "store_unavailable", f"episode state is unreachable: {error}")


def listing_of(request: Request) -> TaskListing:
    return request.app.state.listing


def episodes_of(request: Request) -> LiveEpisodes:
    return request.app.state.episodes


Listing = Annotated[TaskListing, Depends(listing_of)]
Episodes = Annotated[LiveEpisodes, Depends(episodes_of)]
router = APIRouter()


@router.get("/v1/tasks", response_model=TasksResponse, responses=ERRORS)
async def tasks(
    listing: Listing,
    suite: Annotated[
        list[str] | None, Query(description="Suites to list (repeatable); all by default")
    ] = None,
) -> TasksResponse | JSONResponse:
    return await answer(lambda: listing.tasks(suite))


def client_of(request: Request) -> str:
    """Whom per-client limits count: the peer's address, or what a trusted proxy
    (`CORRGRPO_FORWARDED_ALLOW_IPS`) says."""
    return request.client.host if request.client else "unknown"


@router.post("/v1/episodes", response_model=Episode, responses=ERRORS)
async def create(
    request: EpisodeCreate, episodes: Episodes, client: Annotated[str, Depends(client_of)]
) -> Episode | JSONResponse:
    return await answer(lambda: episodes.create(request, client))


@router.post("/v1/episodes/{episode_id}/step", response_model=StepResponse, responses=ERRORS)
async def step(episode_id: str, request: StepRequest, episodes: Episodes) -> StepResponse | JSONResponse:
    return await answer(lambda: episodes.step(episode_id, request))


@router.post("/v1/episodes/{episode_id}/finish", response_model=FinishResponse, responses=ERRORS)
async def finish(
    episode_id: str, request: FinishRequest, episodes: Episodes
) -> FinishResponse | JSONResponse:
    return await answer(lambda: episodes.finish(episode_id, request))


def build(settings: AgentDojoSettings) -> FastAPI:
    app = SERVICE.create_app(settings)
    catalog = Catalog(settings.agentdojo_version, settings.agentdojo_attack, settings.agentdojo_model_name)
    starts = StartCache(settings.agentdojo_env_cache_size)
    app.state.listing = TaskListing(settings, catalog, starts)
    app.state.episodes = LiveEpisodes(settings, app.state.store, catalog, starts)
    app.include_router(router)
    add_score_route(app, AgentDojoScoreRequest, TrajectoryReplay(settings, catalog, starts).score_items)
    return app
