"""Fixtures of the reliability suite: services started once per session, a throwaway Redis per test."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import httpx
import pytest

from corrgrpo_testing.bad_input import BODY_LIMIT
from corrgrpo_testing.redis_server import ThrowawayRedis
from corrgrpo_testing.servers import ServiceProcess, free_port, start_service


@pytest.fixture(scope="session")
def services() -> Iterator[Callable[[str], ServiceProcess]]:
    """`services(name)`: the running service (in-memory store, 4 MiB body limit), started on first use."""
    started: dict[str, ServiceProcess] = {}
    with ExitStack() as stack:

        def get(name: str) -> ServiceProcess:
            if name not in started:
                env = {"CORRGRPO_MAX_BODY_BYTES": str(BODY_LIMIT), "CORRGRPO_CODE_WORKERS": "2"}
                started[name] = stack.enter_context(start_service(name, env=env))
            return started[name]

        yield get


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    """One pooled client: `httpx.post` builds a TLS context per call (~0.3 s each)."""
    with httpx.Client(timeout=120) as client:
        yield client


@pytest.fixture
def throwaway_redis() -> Iterator[ThrowawayRedis]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed (.ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    redis = ThrowawayRedis(free_port())
    redis.start()
    yield redis
    redis.kill()
