"""A run's process limit is its `Limits.processes` as RLIMIT_NPROC, soft and hard, set before its program
starts.

Where the service does not run as root and has no pids cgroup, RLIMIT_NPROC is the only bound on a run's
processes (the kernel ignores it for uid 0, which the pids cgroup covers: test_sandbox_security.py); a raised
limit would let a fork bomb take the host's process table, so the run itself must see exactly its limit, and
never be able to raise it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from corrgrpo_sandbox import Limits, Sandbox

READ_LIMIT = """
import json, os, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
try:
    resource.setrlimit(resource.RLIMIT_NPROC, (hard + 1, hard + 1))
    raised = True
except (OSError, ValueError):
    raised = False
os.write(3, json.dumps([soft, hard, raised]).encode())
"""


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox("pool", workers=1) as box:
        yield box


@pytest.mark.parametrize("processes", [4, 16])
def test_a_run_sees_exactly_its_process_limit_and_cannot_raise_it(sandbox: Sandbox, processes: int) -> None:
    result = sandbox.run(READ_LIMIT, limits=Limits(processes=processes))
    assert result.exit_code == 0 and result.anomaly is None, result
    assert json.loads(result.channel) == [processes, processes, False]


def test_the_default_limit_is_the_limits_default(sandbox: Sandbox) -> None:
    result = sandbox.run(READ_LIMIT)
    assert json.loads(result.channel)[:2] == [Limits().processes] * 2, result
