"""Shared sandboxes for the sandbox tests: starting workers costs ~0.1 s each, so they live per session."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from corrgrpo_sandbox import IsolationUnavailable, Sandbox

# The `docker` isolation needs an engine and the stand-in image: `make compose-test` runs that file with both.
collect_ignore = [] if os.environ.get("CORRGRPO_TEST_DOCKER") == "1" else ["test_docker_backend.py"]


def isolated_sandbox(mode: str, workers: int, preload: Sequence[Path] = ()) -> Sandbox:
    """A bwrap sandbox; without bubblewrap skip locally, fail under CI (where bwrap is required)."""
    try:
        return Sandbox(mode, workers=workers, isolation="bwrap", preload=preload)  # type: ignore[arg-type]
    except IsolationUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(str(error))
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def new_isolated_sandbox() -> Callable[..., Sandbox]:
    """`isolated_sandbox` for tests that need a sandbox of their own (the caller closes it)."""
    return isolated_sandbox


@pytest.fixture
def require_bwrap(pool_sandbox: Sandbox) -> None:
    """Containment tests need bubblewrap (the pool fixture skips or fails without it)."""
    assert pool_sandbox.isolation == "bwrap"


@pytest.fixture(scope="session")
def pool_sandbox() -> Iterator[Sandbox]:
    with isolated_sandbox("pool", 2) as sandbox:
        yield sandbox


@pytest.fixture(scope="session")
def fresh_sandbox() -> Iterator[Sandbox]:
    with isolated_sandbox("fresh", 1) as sandbox:
        yield sandbox


@pytest.fixture(params=["pool", "fresh"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    """Both modes: every test using this fixture runs once per mode."""
    return request.getfixturevalue(f"{request.param}_sandbox")
