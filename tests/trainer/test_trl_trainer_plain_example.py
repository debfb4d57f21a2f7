"""examples/trl_plain.py, README's plain-TRL example, runs as a user runs it: against the live tool-call
service."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.models import EMBEDDED, resolve_model
from corrgrpo_trainer.tiny import build_tiny_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_plain.py"


@pytest.mark.slow
def test_the_plain_trl_example_trains_on_the_services_components(tmp_path: Path) -> None:
    build_tiny_policy(tmp_path / "policy")
    with start_service("toolcall") as service:
        command = [sys.executable, str(EXAMPLE), service.url, str(tmp_path / "policy"), str(tmp_path / "out")]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        requests = service.log().count('"path": "/v1/score"')
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = [ast.literal_eval(line) for line in result.stdout.splitlines() if line.startswith("{'rewards/")]
    assert len(steps) == 2
    assert [set(step) for step in steps] == [
        {f"rewards/{c}/mean" for c in ("format", "name", "param_names", "param_values")}
    ] * 2
    assert requests == 2  # one request per step for the four columns


@pytest.mark.slow
def test_the_plain_trl_example_trains_the_embedded_model_offline_by_default(tmp_path: Path) -> None:
    offline = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with start_service("toolcall") as service:
        command = [sys.executable, str(EXAMPLE), service.url]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=1200, cwd=tmp_path, env=offline
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len([line for line in result.stdout.splitlines() if line.startswith("{'rewards/")]) == 2
    embedded = resolve_model(EMBEDDED)  # the embedded model's local checkpoint (no hub)
    assert result.stdout.splitlines()[0] == f"[trl_plain] training {embedded} against {service.url}"
