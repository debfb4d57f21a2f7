"""Bearer auth on the real Serve deployment (conftest.py: the nodes' `CORRGRPO_API_TOKEN` is `TOKEN`):
through Serve's proxy, each service under its route prefix (`/code`: kept in the path, named in
`root_path`), every route refuses no token, a wrong one, an empty one (`Bearer ` and `Bearer`) and another
scheme with 401, and the right one reaches it (`corrgrpo_testing.auth_checks`, as tests/security/test_auth.py
runs it on our server).
"""

from __future__ import annotations

import pytest

from corrgrpo_common import declared
from corrgrpo_testing.auth_checks import check_served

from .cluster import TOKEN, Deployed


@pytest.mark.parametrize("name", list(declared()))
async def test_every_route_through_serve_needs_the_token(deployed: Deployed, name: str) -> None:
    await check_served(name, f"{deployed.url}/{name}", TOKEN)
