"""The byte quotas' settings (issue 48.5): derived from the in-memory store's cap when unset, and a service
whose quotas cannot keep the store from filling first, or one client from locking others out, refuses to
start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from corrgrpo_agentdojo.settings import REDIS_LIVE_BYTES, AgentDojoSettings


def test_unset_byte_limits_derive_from_the_store_cap() -> None:
    assert AgentDojoSettings(memory_store_max_bytes=400_000).live_bytes() == (75_000, 300_000)
    redis = AgentDojoSettings(redis_url="redis://127.0.0.1:6379/0", memory_store_max_bytes=400_000)
    assert redis.live_bytes() == (REDIS_LIVE_BYTES // 4, REDIS_LIVE_BYTES)  # Redis's cap is Redis's own
    given = AgentDojoSettings(agentdojo_max_live_bytes=200_000, agentdojo_max_live_bytes_per_client=90_000)
    assert given.live_bytes() == (90_000, 200_000)


@pytest.mark.parametrize(
    ("env", "refusal"),
    [
        (
            {"CORRGRPO_MEMORY_STORE_MAX_BYTES": "100000", "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES": "100001"},
            "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES (100001) exceeds CORRGRPO_MEMORY_STORE_MAX_BYTES (100000)",
        ),
        (
            {
                "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES": "5000",
                "CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES_PER_CLIENT": "6000",
            },
            "MAX_LIVE_BYTES_PER_CLIENT (6000) must be below CORRGRPO_AGENTDOJO_MAX_LIVE_BYTES (5000)",
        ),
    ],
    ids=["total over the store", "share not below the total"],
)
def test_quotas_that_cannot_hold_refuse_to_start_in_one_line(env: dict[str, str], refusal: str) -> None:
    command = [sys.executable, "-m", "corrgrpo_agentdojo", "--port", "1"]
    done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "agentdojo: refusing to start: " in done.stderr and refusal in done.stderr, done.stderr
