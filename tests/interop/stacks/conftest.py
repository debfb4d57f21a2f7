"""The real services for the NeMo Gym, verifiers and OpenEnv tests (verl's and OpenRLHF's start their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corrgrpo_testing.servers import ServiceProcess, start_service


@pytest.fixture(scope="module")
def services() -> Iterator[dict[str, ServiceProcess]]:
    with (
        start_service("code", env={"CORRGRPO_CODE_DATASETS": "humaneval"}) as code,
        start_service("toolcall") as toolcall,
        start_service("agentdojo") as agentdojo,
    ):
        yield {"code": code, "toolcall": toolcall, "agentdojo": agentdojo}
