"""Programs run in a sandbox made in each shape (`corrgrpo_testing.shapes`; issue 48).

Each shape runs `shape_runner.py` in a subprocess (a Sandbox of its own, the programs one after another) and
hands back its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from corrgrpo_testing.shapes import fail_or_skip, shape_argv

RUNNER = Path(__file__).with_name("shape_runner.py")


def run_in_shape(shape: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run each `{"source", "limits"}` in order in one sandbox of `shape`; the runner's report."""
    argv = shape_argv(shape, [sys.executable, "-I", str(RUNNER)])
    request = json.dumps(runs).encode()
    done = subprocess.run(argv, input=request, capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    report = json.loads(done.stdout)
    if "unavailable" in report:
        fail_or_skip(report["unavailable"])
    return report
