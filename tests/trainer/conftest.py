"""A live tool-call service for the trainer tests that score through one (a module's tests share it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corrgrpo_testing.servers import ServiceProcess, start_service


@pytest.fixture(scope="module")
def toolcall() -> Iterator[ServiceProcess]:
    with start_service("toolcall") as service:
        yield service
