"""Run every benchmark in bench/ (files named bench_*.py) and collect their markdown tables."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Experiments of an hour or more, run on their own and reported in docs/ (docs/policy_experiment.md).
EXPERIMENTS = {"bench_policy.py"}


def main() -> int:
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    cores = os.cpu_count()
    sections = [f"# corrgrpo benchmarks — {time.strftime('%Y-%m-%d')}, {cores} cores\n"]
    failed = 0
    for script in sorted(path for path in HERE.glob("bench_*.py") if path.name not in EXPERIMENTS):
        print(f"== {script.name}", flush=True)
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
        print(run.stdout + run.stderr, flush=True)
        failed += run.returncode != 0
        sections.append(f"## {script.stem}\n\n{run.stdout.strip()}\n")
    (out / "RESULTS.md").write_text("\n".join(sections))
    print(f"wrote {out / 'RESULTS.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
