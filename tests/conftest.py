"""Fixtures shared by all tests: real service processes, real Redis, the shared data folder."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from corrgrpo_testing.environment import REDIS_URL, SHARED_DATA

# the shipped configs' datasets: local copies (trainer/README.md)
os.environ.setdefault("CORRGRPO_DATA_DIR", str(SHARED_DATA))
# A service given a Redis URL refuses to start without the secret that authenticates what it reads back
os.environ.setdefault("CORRGRPO_STORE_SECRET", "corrgrpo-test-store-secret")


@pytest.fixture
def redis_url() -> Iterator[str]:
    """The real Redis server; fails (never skips) when it does not answer."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        pytest.fail(f"Redis at {REDIS_URL} does not answer ({error}); .ci/run starts it")
    yield REDIS_URL
    client.close()


@pytest.fixture
def key_prefix(redis_url: str) -> Iterator[str]:
    """A unique key prefix; every key under it is deleted after the test."""
    import redis

    prefix = f"corrgrpo-test:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


# The docker isolation needs an engine and the stand-in image: `make compose-test` sets
# CORRGRPO_TEST_DOCKER=1.
ISOLATIONS = ["bwrap"] + (["docker"] if os.environ.get("CORRGRPO_TEST_DOCKER") == "1" else [])


@pytest.fixture(scope="module", params=ISOLATIONS)
def one_worker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One warm sandbox worker per isolation, so a test's second run lands where its first ran."""
    from corrgrpo_sandbox import IsolationUnavailable, Sandbox

    try:
        sandbox = Sandbox("pool", workers=1, isolation=request.param)
    except IsolationUnavailable as error:
        pytest.fail(f"{request.param} is required here: {error}")
    with sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def humaneval_code_url() -> Iterator[str]:
    """A code service process serving HumanEval by task_id."""
    from corrgrpo_testing.servers import start_service

    with start_service("code", env={"CORRGRPO_CODE_DATASETS": "humaneval"}) as service:
        yield service.url
