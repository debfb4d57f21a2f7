"""Secure default (issue 14.7): the code service runs code only with isolation, and says which one it has."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx

from corrgrpo_testing.servers import launch, start_service

SQUARE = {
    "task_id": "square",
    "entry_point": "square",
    "test": "def check(candidate):\n    assert candidate(3) == 9\n",
    "reference": "def square(x):\n    return x * x\n",
}


def test_without_bubblewrap_the_service_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    path = os.path.dirname(os.path.realpath(sys.executable))  # the interpreter, and no bwrap
    assert not os.path.exists(os.path.join(path, "bwrap"))
    env = {"PATH": path, "CORRGRPO_CODE_WORKERS": "1"}
    service = launch("code", env=env, log_path=str(tmp_path / "code.log"))
    assert service.process.wait(60) == 1
    lines = service.log().splitlines()
    assert len(lines) == 1 and lines[0].startswith("code: refusing to start: no isolation"), lines
    assert "apt-get install bubblewrap" in lines[0] and "CORRGRPO_CODE_ISOLATION=unsafe-none" in lines[0]


def test_unsafe_none_runs_only_by_name_and_is_never_ready() -> None:
    env = {"CORRGRPO_CODE_WORKERS": "1", "CORRGRPO_CODE_ISOLATION": "unsafe-none"}
    with start_service("code", env=env) as service:
        response = httpx.get(f"{service.url}/readyz", timeout=10)
        assert response.status_code == 503 and "unsafe-none" in response.json()["checks"]["sandbox"]
        item = {"completion": "```python\ndef square(n):\n    return n * n\n```", "problem": SQUARE}
        result = httpx.post(f"{service.url}/v1/score", json={"items": [item]}, timeout=60).json()["results"][
            0
        ]
        assert result["info"]["isolation"] == "unsafe-none"
        assert "sandbox isolation unsafe-none" in service.log()


def test_the_log_says_which_isolation_is_active() -> None:
    with start_service("code", env={"CORRGRPO_CODE_WORKERS": "1"}) as service:
        assert httpx.get(f"{service.url}/readyz", timeout=10).status_code == 200
        assert "sandbox isolation bwrap" in service.log()
