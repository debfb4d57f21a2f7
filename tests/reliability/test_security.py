"""Bearer-token auth over real HTTP, and secrets (token, Redis password) kept out of logs and answers."""

from __future__ import annotations

import uuid

import httpx
import pytest

from corrgrpo_proto.client import RewardClient, RewardServiceError
from corrgrpo_testing.servers import start_service

from .helpers import valid_item


def test_token_guards_scoring_and_never_reaches_the_log(http: httpx.Client) -> None:
    token, password = f"tok-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    env = {
        "CORRGRPO_API_TOKEN": token,
        "CORRGRPO_REDIS_URL": f"redis://:{password}@127.0.0.1:1/0",
        "CORRGRPO_LOG_LEVEL": "DEBUG",
    }
    with start_service("toolcall", env=env) as service:
        item = {**valid_item(service), "id": "cached-by-id"}  # an id: the idempotency cache is consulted
        refused = http.post(f"{service.url}/v1/score", json={"items": [item]})
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        wrong = {"Authorization": f"Bearer {token[:-1]}x"}
        assert http.post(f"{service.url}/v1/score", json={"items": [item]}, headers=wrong).status_code == 401
        with (
            RewardClient(service.url, retries=0) as anonymous,
            pytest.raises(RewardServiceError, match="401"),
        ):
            anonymous.score([item])
        with RewardClient(service.url, token=token) as client:
            (result,) = client.score([item])
            assert result.error is None and result.total is not None
            assert client.components().service == "toolcall"
        # Redis is unreachable: the reason names it, password redacted
        ready = http.get(f"{service.url}/readyz")
        assert ready.status_code == 503 and "***" in ready.text and password not in ready.text
        assert http.get(f"{service.url}/healthz").status_code == 200
        log = service.log()
    assert '"status": 401' in log and '"path": "/v1/score"' in log  # the log did record these requests
    assert "redis://:***@" in log  # and the store failures, redacted
    assert token not in log and password not in log
