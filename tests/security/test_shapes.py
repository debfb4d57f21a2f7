"""The code service's hostile-completion checks in each shape it ships in (issue 48): the bodies of
corrgrpo_testing.shape_checks, which tests/ray_serve runs in Ray Serve too.

`CORRGRPO_TEST_SHAPES` (comma-separated) picks the shapes; default: the three that need no Docker engine,
`python -m corrgrpo_code` with bwrap in each of corrgrpo_testing.shapes' SHAPES (as root, as the images'
uid 10001, on a cgroup v2 host). Besides them:
- `docker`: `CORRGRPO_CODE_ISOLATION=docker` (an engine and `CORRGRPO_SANDBOX_DOCKER_IMAGE`).
- `compose`: the compose stack's nginx at `CORRGRPO_TEST_CODE_URL`, code replicas behind it.
make compose-test runs the last two (deploy/compose-test.sh, tests/deploy/compose_stack.py). A shape that
cannot start skips locally and fails under CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from corrgrpo_code.app import HIDDEN_CPU_S, uncounted_cpu
from corrgrpo_sandbox import ExecResult, Limits
from corrgrpo_testing.shape_checks import Shape, ShapeChecks
from corrgrpo_testing.shapes import LOCAL_SHAPES, chosen_shapes, code_service, fail_or_skip


@pytest.fixture(scope="module", params=chosen_shapes())
def shape(request: pytest.FixtureRequest) -> Iterator[Shape]:
    env = {"CORRGRPO_CODE_WORKERS": "2"}
    if request.param == "compose":
        url = os.environ.get("CORRGRPO_TEST_CODE_URL", "").rstrip("/")
        if not url:
            fail_or_skip("shape compose needs CORRGRPO_TEST_CODE_URL (tests/deploy/compose_stack.py sets it)")
        yield Shape("compose", url, httpx.get(f"{url}/readyz", timeout=30).json())
        return
    if request.param not in LOCAL_SHAPES:
        pytest.fail(f"unknown shape {request.param!r} in CORRGRPO_TEST_SHAPES")
    with code_service(request.param, env) as service:
        ready = httpx.get(f"{service.url}/readyz", timeout=30).json()
        yield Shape(request.param, service.url, ready, lambda: [service.process.pid])


class TestCodeService(ShapeChecks):
    """corrgrpo_testing.shape_checks' bodies in the shape of `shape`."""


class LosingSandbox:
    """Counts only the CPU of processes a run waits for (the sandbox without a cgroup counter did), after
    `anomalies` runs whose worker broke."""

    limits = Limits()

    def __init__(self, cpu_s: float, anomalies: int = 0) -> None:
        self.cpu_s, self.anomalies = cpu_s, anomalies

    def run(self, source: str, limits: Limits) -> ExecResult:
        self.anomalies -= 1
        anomaly = "worker died" if self.anomalies >= 0 else None
        streams = {"stdout": b"", "stderr": b"", "channel": b"", "truncated": False, "timed_out": False}
        ends = {"wall_s": 0.2, "peak_rss_kb": 1, "isolation": "bwrap", "anomaly": anomaly}
        return ExecResult(0, None, **streams, cpu_s=self.cpu_s, **ends)


def test_a_shape_that_loses_reaped_cpu_is_refused() -> None:
    """The shapes above are ready; a sandbox that loses the probe's reaped CPU makes the service refuse."""
    reason = uncounted_cpu(LosingSandbox(HIDDEN_CPU_S + 0.003))
    assert reason == "0.053 s of a run's 0.1 s in reaped processes counted"
    assert uncounted_cpu(LosingSandbox(2 * HIDDEN_CPU_S + 0.004)) is None
    # one broken worker is retried; two are a refusal naming the anomaly
    assert uncounted_cpu(LosingSandbox(2 * HIDDEN_CPU_S, anomalies=1)) is None
    failed = uncounted_cpu(LosingSandbox(2 * HIDDEN_CPU_S, anomalies=2))
    assert failed == "the probe run failed: worker died"
