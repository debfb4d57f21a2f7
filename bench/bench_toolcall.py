"""Tool-call scoring throughput: the pure function on one core, and `POST /v1/score` of one server process.

Workload: the 80 RLLA-4K test rows, each scored against up to five completions: its ground truth,
a prose-only answer, a chat-template-wrapped copy, the first call with every value changed, and
the last call dropped (the 9 response-only rows have no call to edit: 382 completions, mostly
partial matches, as in training). Scoring is CPU-bound and holds the GIL, so one process is one
core; run more replicas (or uvicorn workers) for more cores.

Run: `.venv/bin/python bench/bench_toolcall.py` (part of `make bench`; under a minute).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import httpx

# the test helper: starts a service exactly as its container does
from corrgrpo_testing.servers import start_service
from corrgrpo_toolcall.datasets import Example, default_source, load_rlla4k
from corrgrpo_toolcall.scoring import score
from corrgrpo_toolcall.settings import ToolCallSettings


def variants(example: Example) -> list[str]:
    truth = example.ground_truth
    out = [truth, "<think>I can answer directly.</think>\n<response>Sure.</response>"]
    out.append(f"<|im_start|>assistant\n{truth}<|im_end|>")
    if "<tool_call>" in truth:
        head, rest = truth.split("<tool_call>\n", 1)
        block, tail = rest.split("\n</tool_call>", 1)
        calls = [json.loads(line) for line in block.split("\n")]
        changed = [{**calls[0], "parameters": {k: "changed" for k in calls[0]["parameters"]}}, *calls[1:]]
        for edited in (changed, calls[:-1] or calls):
            out.append(
                head + "<tool_call>\n" + "\n".join(json.dumps(c) for c in edited) + "\n</tool_call>" + tail
            )
    return out


def hostile_pair() -> tuple[str, str]:
    """Issue 48.7's case: 64 predicted calls of 300 parameters (168 kB) against a 1,000-call ground truth
    (29 kB), which matching compared pair by pair (~0.6 s an item)."""

    def block(calls: list[dict]) -> str:
        lines = "\n".join(json.dumps(call, separators=(",", ":")) for call in calls)
        return f"<think>t</think>\n<tool_call>\n{lines}\n</tool_call>"

    wide = {"name": "a", "parameters": {f"k{i}": 0 for i in range(300)}}
    return block([wide] * 64), block([{"name": "a", "parameters": {}}] * 1000)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (the server is another process)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pure_rate(pairs: list[tuple[str, str]], seconds: float = 3.0) -> tuple[float, float]:
    """(scores per wall second, scores per CPU second of this process)."""
    done, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for completion, truth in pairs:
            score(completion, truth)
        done += len(pairs)
    return done / (time.perf_counter() - start), done / (time.process_time() - cpu)


def http_rate(
    url: str, pid: int, pairs: list[tuple[str, str]], batch: int, seconds: float = 4.0
) -> tuple[float, float]:
    """(scores per wall second, scores per CPU second of the server process), one client, sequential
    requests."""
    items = [{"completion": c, "ground_truth": t} for c, t in pairs]
    bodies = [{"items": items[i : i + batch]} for i in range(0, len(items), batch)]
    done, start, cpu = 0, time.perf_counter(), process_cpu_s(pid)
    with httpx.Client(timeout=30) as client:
        while time.perf_counter() - start < seconds:
            for body in bodies:
                response = client.post(f"{url}/v1/score", json=body)
                response.raise_for_status()
                done += len(body["items"])
    return done / (time.perf_counter() - start), done / (process_cpu_s(pid) - cpu)


def main() -> int:
    data_dir = ToolCallSettings().toolcall_data_dir or Path(__file__).resolve().parents[2] / "shared" / "data"
    examples = load_rlla4k(default_source("rlla4k", data_dir))
    pairs = [(completion, e.ground_truth) for e in examples for completion in variants(e)]
    rows = [("pure function, 1 process", f"{len(pairs)} mixed", *pure_rate(pairs))]
    long_think = [
        ("<think>" + "word " * 20_000 + t.split("</think>", 1)[1], t)
        for _, t in pairs[:50]
        if "</think>" in t
    ]
    rows.append(("pure function, 100 kB think", str(len(long_think)), *pure_rate(long_think, 2.0)))
    rows.append(("pure function, 1,000-call ground truth", "1 hostile", *pure_rate([hostile_pair()], 2.0)))
    with start_service("toolcall") as service:
        for batch in (1, 64, 400):
            rate = http_rate(service.url, service.process.pid, pairs, batch)
            rows.append((f"HTTP, 1 server process, batch {batch}", f"{len(pairs)} mixed", *rate))
    # CPU-second rates hold on a loaded machine; wall rates drop with the load average.
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end\n")
    print(
        "| path | completions | scores/s (wall) | scores per CPU-second (one core) |\n| --- | --- | --- | "
        "--- |"
    )
    for path, workload, wall, per_cpu in rows:
        print(f"| {path} | {workload} | {wall:,.0f} | {per_cpu:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
