"""What a replica does before it builds its app, and the Serve config as Serve itself reads it (no
cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from corrgrpo_common import declared
from corrgrpo_common.ray_serve import application, replica_settings
from corrgrpo_devtools.ray_config import SERVE_CONFIG
from corrgrpo_testing.environment import REDIS_URL

REPO = Path(__file__).resolve().parents[2]


def test_serve_reads_the_generated_config() -> None:
    schema = ServeDeploySchema.model_validate(yaml.safe_load((REPO / SERVE_CONFIG).read_text()))
    assert [app.name for app in schema.applications] == list(declared())


@pytest.mark.parametrize(("cpus", "workers"), [(0.25, 1), (1.0, 1), (1.5, 2), (4.0, 4)])
def test_code_workers_follow_the_replica_cpus(
    monkeypatch: pytest.MonkeyPatch, cpus: float, workers: int
) -> None:
    monkeypatch.setenv("CORRGRPO_REDIS_URL", REDIS_URL)
    monkeypatch.delenv("CORRGRPO_CODE_WORKERS", raising=False)
    assert replica_settings(declared()["code"], cpus).code_workers == workers


def test_a_workers_variable_set_on_the_node_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRGRPO_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("CORRGRPO_CODE_WORKERS", "3")
    assert replica_settings(declared()["code"], 0.5).code_workers == 3


@pytest.mark.parametrize("name", list(declared()))
def test_a_replica_without_redis_refuses_to_start(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.delenv("CORRGRPO_REDIS_URL", raising=False)
    with pytest.raises(RuntimeError, match="CORRGRPO_REDIS_URL is not set"):
        replica_settings(declared()[name], 1.0)


@pytest.mark.parametrize("token", ["", "two words"])
def test_a_replica_refuses_an_unusable_token(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    monkeypatch.setenv("CORRGRPO_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("CORRGRPO_API_TOKEN", token)
    with pytest.raises(RuntimeError) as refused:
        replica_settings(declared()["toolcall"], 1.0)
    line = "toolcall: refusing to start: CORRGRPO_API_TOKEN: set but empty or not a bearer credential"
    assert str(refused.value).startswith(line) and "\n" not in str(refused.value)
    assert "words" not in str(refused.value)  # a secret is never echoed


def test_an_unknown_service_is_refused_before_anything_is_deployed() -> None:
    with pytest.raises(ValueError, match="unknown service 'nope'"):
        application({"service": "nope"})
