"""Shared sandboxes for the sandbox tests: starting workers costs ~0.1 s each, so they live per session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from corrgrpo_sandbox import Sandbox


@pytest.fixture
def require_bwrap(pool_sandbox: Sandbox) -> None:
    """Containment tests are meaningless in the fallback: skip locally, fail under CI (where bwrap is required)."""
    if pool_sandbox.isolation != "bwrap":
        message = f"bubblewrap is unavailable here ({pool_sandbox.isolation})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def pool_sandbox() -> Iterator[Sandbox]:
    with Sandbox("pool", workers=2) as sandbox:
        yield sandbox


@pytest.fixture(scope="session")
def fresh_sandbox() -> Iterator[Sandbox]:
    with Sandbox("fresh") as sandbox:
        yield sandbox


@pytest.fixture(params=["pool", "fresh"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    """Both modes: every test using this fixture runs once per mode."""
    return request.getfixturevalue(f"{request.param}_sandbox")
