"""Run programs in a bwrap sandbox, report the results as JSON (started by `shapes.run_in_shape`, in a shape).

stdin: a JSON list of `{"source": ..., "limits": {...}}`, run in that order on a one-worker pool. stdout: the
uid, whether the sandbox found a cgroup CPU counter, and each run's result (streams decoded as UTF-8), or
`unavailable` with the reason when bwrap cannot run here."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from corrgrpo_sandbox import IsolationUnavailable, Limits, Sandbox
from corrgrpo_sandbox.cgroups import cgroup_parents


def main() -> None:
    runs = json.load(sys.stdin)
    try:
        sandbox = Sandbox("pool", workers=1, isolation="bwrap")
    except IsolationUnavailable as error:
        json.dump({"unavailable": str(error)}, sys.stdout)
        return
    results = []
    with sandbox:
        for run in runs:
            result = sandbox.run(run["source"], limits=Limits(**run["limits"]))
            fields = dataclasses.asdict(result)
            for name in ("stdout", "stderr", "channel"):
                fields[name] = fields[name].decode(errors="replace")
            results.append(fields)
    report = {"uid": os.getuid(), "cgroup_counter": bool(cgroup_parents()), "results": results}
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
