"""The bwrap sandbox the containment tests share: meaningless without isolation, so CI fails where it is
missing."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from corrgrpo_code.harness import CHILD_FILE
from corrgrpo_sandbox import IsolationUnavailable, Sandbox


@pytest.fixture(scope="module")
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Two bwrap workers under the test module's `LIMITS`; skips locally without bubblewrap, fails under
    CI."""
    try:
        box = Sandbox(workers=2, limits=request.module.LIMITS, isolation="bwrap", preload=[CHILD_FILE])
    except IsolationUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(str(error))
        pytest.skip(str(error))
    with box:
        yield box
