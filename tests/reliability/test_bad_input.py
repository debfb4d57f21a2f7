"""Hostile and malformed requests against real service processes: a clear 4xx or a per-item error, never a
5xx (corrgrpo_testing.bad_input's checks, which tests/ray_serve runs through Serve too)."""

from __future__ import annotations

import httpx
import pytest

from corrgrpo_testing.bad_input import (
    check_garbage_completions,
    check_hostile_bodies,
    check_schema_violations,
)

from .helpers import SCORING_SERVICES, Services, assert_healthy


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_hostile_bodies_get_a_4xx_error_body(name: str, services: Services, http: httpx.Client) -> None:
    service = services(name)
    check_hostile_bodies(http, service.url)
    assert_healthy(service, http)


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_schema_violations_are_422_naming_the_field(
    name: str, services: Services, http: httpx.Client
) -> None:
    service = services(name)
    check_schema_violations(http, service.url, name)
    assert_healthy(service, http)


@pytest.mark.parametrize("name", ["toolcall", "code"])
def test_garbage_and_huge_completions_get_per_item_results(
    name: str, services: Services, http: httpx.Client
) -> None:
    service = services(name)
    check_garbage_completions(http, service.url, name)
    assert_healthy(service, http)
