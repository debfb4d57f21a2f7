"""Property-based fuzzing of every operation in each service's OpenAPI spec (schemathesis): no 5xx, no
hang."""

from __future__ import annotations

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from .helpers import SCORING_SERVICES, Services, assert_healthy

EXAMPLES = 8
"""Per operation and mode; with derandomize the same cases run every time, so a failure reproduces."""
REQUEST_TIMEOUT_S = 20
"""A request taking longer counts as a hang."""


def fuzz_operation(
    operation: schemathesis.schemas.APIOperation,
    base_url: str,
    mode: GenerationMode,
    session: requests.Session,
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        response = case.call(base_url=base_url, session=session, timeout=REQUEST_TIMEOUT_S)
        case.validate_response(response, checks=[not_a_server_error])
        if response.status_code >= 400:
            assert {"error", "message"} <= set(response.json()), response.text[:300]

    run()


@pytest.mark.parametrize("name", SCORING_SERVICES)
def test_every_operation_survives_fuzzing(name: str, services: Services, http: httpx.Client) -> None:
    service = services(name)
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/healthz", "/readyz", "/v1/components", "/v1/score"}
    with requests.Session() as session:
        for operation in operations:
            fuzz_operation(operation, service.url, GenerationMode.POSITIVE, session)
            if list(operation.iter_parameters()) or operation.get_request_payload_content_types():
                # only inputs can be made invalid
                fuzz_operation(operation, service.url, GenerationMode.NEGATIVE, session)
    assert_healthy(service, http)
