"""The code service's hostile-completion checks (corrgrpo_testing.shape_checks, as
tests/security/test_shapes.py runs them locally) through Serve's proxy under the `/code` prefix with the
token, on the shipped settings (efficiency measured). The worker-kill case kills a sandbox worker of whichever
replica runs the item.
"""

from __future__ import annotations

import httpx
import pytest

from corrgrpo_testing.shape_checks import Shape, ShapeChecks

from .cluster import TOKEN, Deployed


@pytest.fixture(scope="module")
def shape(deployed: Deployed) -> Shape:
    url = f"{deployed.url}/code"
    ready = httpx.get(f"{url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text

    def replicas() -> list[int]:
        return [replica["pid"] for replica in deployed.replicas("code")]

    return Shape("ray", url, ready.json(), replicas, {"Authorization": f"Bearer {TOKEN}"})


class TestRayServe(ShapeChecks):
    """corrgrpo_testing.shape_checks' bodies through Ray Serve."""
