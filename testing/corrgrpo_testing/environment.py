"""Where the test suite finds what lives outside the repository: the shared data folder and the test Redis.

Read from the environment (`CORRGRPO_SHARED_DATA`, `CORRGRPO_TEST_REDIS_URL`) with the defaults of this
workspace.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("CORRGRPO_SHARED_DATA", REPO.parent / "shared" / "data"))
REDIS_URL = os.environ.get("CORRGRPO_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def require_shared_data(relative: str) -> Path:
    """Path under ../shared/data; skips with a message when absent, fails under CI=true."""
    path = SHARED_DATA / relative
    if not path.exists():
        message = f"{path} is missing (the real datasets live in ../shared/data; see its README)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
