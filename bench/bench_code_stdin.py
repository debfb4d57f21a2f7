"""Stdin/stdout cases: `POST /v1/score` against the unsandboxed fork floor running the same programs on the
same cases.

A mix in LiveCodeBench's shape: eight contest programs (Codeforces 1899A with its published cases, and seven
classics: sums, sorting, a sieve, longest increasing subsequence, BFS on a grid, word counts, palindromes),
each with `CASES` inputs from tiny to a few hundred KB, expected outputs from the same program run once here.
The HTTP path (the trainer's client, `corrgrpo_proto.RewardClient`) scores one item per program (every case in
its own sandboxed run, the output compared in the service), the problem sent inline (6 MB of cases per
request) or named by `task_id` (loaded at start-up from a CodeContests-layout file, as a training set would
be). The floor (`bench_sandbox.fork_floor`: warm interpreters forking per program, no isolation, no limits, no
capture) runs each program once per case with the case's input as its stdin and its output discarded. All with
`WORKERS` concurrent runs, in interleaved rounds whose order alternates. The service shares no verdict between
rounds (`CORRGRPO_CODE_RUN_TTL_S=0`); a warm-up pass first measures every reference time, as training would
have. The ratio to quote is floor time / HTTP time (issue 29: >= 0.9).

Then a GRPO step's shape: `GROUP` rollouts of each problem inline, completions that do not parse (no run: what
is left is the request's own cost), sent as the client sends them (each problem once per request,
`problem_from`) and with every item carrying its problem (the same items pre-encoded as plain bytes, which the
client sends as they are).

Run: `.venv/bin/python bench/bench_code_stdin.py` (about a minute on two cores).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from bench_sandbox import fork_floor

from corrgrpo_proto import RewardClient, encode_item
from corrgrpo_testing.servers import start_service

WORKERS = os.cpu_count() or 1
ROUNDS = 12
GROUP = 8  # rollouts per problem in the GRPO-shaped rounds
CASES = 8
PROGRAMS = {
    "game": (
        "t = int(input())\nfor _ in range(t):\n    print('Second' if int(input()) % 3 == 0 else 'First')\n"
    ),
    "sum": "import sys\nprint(sum(map(int, sys.stdin.read().split()[1:])))\n",
    "sort": "import sys\nn, *a = map(int, sys.stdin.read().split())\nprint(' '.join(map(str, sorted(a))))\n",
    "sieve": (
        "n = int(input())\nflags = bytearray([1]) * (n + 1)\nflags[0:2] = b'\\x00\\x00'\n"
        "for i in range(2, int(n ** 0.5) + 1):\n    if flags[i]:\n"
        "        flags[i * i :: i] = bytes(len(range(i * i, n + 1, i)))\n"
        "print(sum(flags))\n"
    ),
    "lis": (
        "import sys, bisect\nn, *a = map(int, sys.stdin.read().split())\ntails = []\nfor x in a:\n"
        "    i = bisect.bisect_left(tails, x)\n    tails[i:i + 1] = [x]\nprint(len(tails))\n"
    ),
    "bfs": (
        "import sys\nfrom collections import deque\nrows = sys.stdin.read().split()\n"
        "h, w, grid = int(rows[0]), int(rows[1]), rows[2:]\n"
        "seen = {(0, 0)}\nqueue = deque([(0, 0, 0)])\nanswer = -1\nwhile queue:\n    r, c, d = "
        "queue.popleft()\n"
        "    if (r, c) == (h - 1, w - 1):\n        answer = d\n        break\n"
        "    for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):\n"
        "        if 0 <= nr < h and 0 <= nc < w and grid[nr][nc] == '.' and (nr, nc) not in seen:\n"
        "            seen.add((nr, nc))\n            queue.append((nr, nc, d + 1))\nprint(answer)\n"
    ),
    "words": (
        "import sys\nfrom collections import Counter\ncounts = Counter(sys.stdin.read().split())\n"
        "for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]:\n    print(word, n)\n"
    ),
    "palindromes": (
        "import sys\nfor line in sys.stdin.read().split()[1:]:\n"
        "    print('YES' if line == line[::-1] else 'NO')\n"
    ),
}
# LiveCodeBench 1899_A's first cases
GAME_PUBLISHED = ["6\n1\n3\n5\n100\n999\n1000\n", "1\n2\n", "1\n994\n", "1\n12\n"]


def inputs(name: str, rng: random.Random) -> list[str]:
    """`CASES` inputs for a program, sizes growing from a few bytes to a few hundred KB."""
    sizes = [4 * 5**k for k in range(CASES)]
    if name == "game":
        extra = [rng.randint(1, 1000) for _ in range(100)]
        return GAME_PUBLISHED + [f"{n}\n" + "\n".join(map(str, extra[:n])) + "\n" for n in (10, 30, 60, 100)]
    if name in ("sum", "sort", "lis"):
        return [
            f"{n}\n" + " ".join(str(rng.randint(-(10**9), 10**9)) for _ in range(min(n, 50_000))) + "\n"
            for n in sizes
        ]
    if name == "sieve":
        return [f"{min(n * 10, 2_000_000)}\n" for n in sizes]
    if name == "bfs":
        cases = []
        for n in sizes:
            side = max(2, min(int(n**0.5), 300))
            grid = ["".join("." if rng.random() > 0.25 else "#" for _ in range(side)) for _ in range(side)]
            grid[0], grid[-1] = "." + grid[0][1:], grid[-1][:-1] + "."
            cases.append(f"{side} {side}\n" + "\n".join(grid) + "\n")
        return cases
    if name == "words":
        return [
            " ".join(rng.choice("abcdefgh") * rng.randint(1, 3) for _ in range(min(n, 50_000))) + "\n"
            for n in sizes
        ]
    words = [
        "".join(rng.choice("ab") for _ in range(rng.randint(1, 8))) for _ in range(min(sizes[-1], 20_000))
    ]
    return [f"{n}\n" + "\n".join(words[: min(n, len(words))]) + "\n" for n in sizes]


def expected(program: str, stdin: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", program], input=stdin, capture_output=True, text=True, check=True
    ).stdout


def floor_program(program: str, stdin: str) -> str:
    """The program with its case's input as stdin (the fork floor feeds none): nothing else around it."""
    return f"import io, sys\nsys.stdin = io.StringIO({stdin!r})\n{program}"


def main() -> None:
    rng = random.Random(29)
    cases = {
        name: [(i, expected(program, i)) for i in inputs(name, rng)] for name, program in PROGRAMS.items()
    }
    inline = [
        {
            "completion": f"```python\n{program}```",
            "problem": {
                "task_id": name,
                "stdin_cases": [{"input": i, "output": o} for i, o in cases[name]],
                "reference": program,
            },
        }
        for name, program in PROGRAMS.items()
    ]
    named = [
        {"completion": item["completion"], "task_id": name}
        for item, name in zip(inline, PROGRAMS, strict=True)
    ]
    rows = [
        {
            "name": name,
            "public_tests": {"input": [i for i, _ in cases[name]], "output": [o for _, o in cases[name]]},
        }
        for name in PROGRAMS
    ]
    dataset = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)  # noqa: SIM115 - removed below
    dataset.write("".join(json.dumps(row) + "\n" for row in rows))
    dataset.close()
    floor_runs = [floor_program(PROGRAMS[name], i) for name in PROGRAMS for i, _ in cases[name]]
    env = {
        "CORRGRPO_CODE_WORKERS": str(WORKERS),
        "CORRGRPO_LOG_LEVEL": "WARNING",
        "CORRGRPO_CODE_RUN_TTL_S": "0",
    }
    env["CORRGRPO_CODE_EFFICIENCY_MODE"] = "paper"  # the speed targets are the single-run mode's
    env["CORRGRPO_CODE_DATASETS"] = f"codecontests:{dataset.name}"
    totals, passed = {"inline": 0.0, "task_id": 0.0, "floor": 0.0}, {"inline": 0, "task_id": 0}
    with (
        start_service("code", env=env) as service,
        fork_floor(WORKERS) as floor,
        RewardClient(service.url, timeout=600) as client,
    ):
        # warm-up: every t_ref (the loaded rows have no reference: efficiency 0)
        for items in (inline, named):
            client.score(items)

        def over_http(name: str, items: list[dict]) -> None:
            passed[name] = sum(result.info["tests_passed"] for result in client.score(items))

        def on_the_floor() -> None:
            with ThreadPoolExecutor(WORKERS) as threads:
                failed = [status for status in threads.map(floor, floor_runs) if status != 0]
            assert not failed, f"{len(failed)} runs failed on the fork floor"

        for round_number in range(ROUNDS):
            order = [
                ("inline", lambda: over_http("inline", inline)),
                ("task_id", lambda: over_http("task_id", named)),
            ]
            order.append(("floor", on_the_floor))
            for name, run in order if round_number % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                run()
                totals[name] += time.perf_counter() - start
        group = [{**item, "completion": "def broken(:\n"} for item in inline for _ in range(GROUP)]
        shared = group_rounds(service.url, group)
    os.unlink(dataset.name)
    runs = len(floor_runs) * ROUNDS
    kilobytes = sum(len(i) for name in cases for i, _ in cases[name]) / 1024
    print(
        f"{len(PROGRAMS)} programs x {CASES} stdin cases ({kilobytes:.0f} KB of input), {WORKERS} workers, "
        f"{ROUNDS} rounds"
    )
    print(f"load average {os.getloadavg()[0]:.1f}\n")
    print("| path | seconds | cases/s | cases passed per round |")
    print("|---|---|---|---|")
    for name in ("inline", "task_id"):
        shown = f"| HTTP `POST /v1/score`, problems {name} | {totals[name]:.2f} | {runs / totals[name]:.0f} |"
        print(f"{shown} {passed[name]}/{len(floor_runs)} |")
    print(
        f"| fork floor, no sandbox | {totals['floor']:.2f} | {runs / totals['floor']:.0f} | (not compared) |"
    )
    ratios = {name: totals["floor"] / totals[name] for name in ("inline", "task_id")}
    print(
        f"\nHTTP path / unsandboxed fork floor (throughput, same run): inline {ratios['inline']:.2f}, ",
        end="",
    )
    print(f"by task_id {ratios['task_id']:.2f}")
    print(f"\n{len(PROGRAMS)} problems x {GROUP} rollouts inline, no runs, {ROUNDS} rounds each way\n")
    print("| each problem | MB sent per step | ms per step |")
    print("|---|---|---|")
    for name, (sent, seconds) in shared.items():
        print(f"| {name} | {sent / 1e6:.1f} | {1e3 * seconds / ROUNDS:.0f} |")


class CountingTransport(httpx.HTTPTransport):
    """Counts the request bytes it sends."""

    sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += len(request.content)
        return super().handle_request(request)


def group_rounds(url: str, group: list[dict]) -> dict[str, tuple[int, float]]:
    """Bytes sent per step and seconds in all, with each problem once per request and with every item
    carrying it."""
    encoded = [encode_item(item) for item in group]  # both ways encoded before the clock starts
    # plain bytes: as they are
    ways = {"once per request": encoded, "in every item": [bytes(item) for item in encoded]}
    sent, seconds = dict.fromkeys(ways, 0), dict.fromkeys(ways, 0.0)
    transport = CountingTransport()
    with RewardClient(url, timeout=600, transport=transport) as client:
        for round_number in range(ROUNDS):
            for name in list(ways)[:: 1 if round_number % 2 else -1]:
                before, start = transport.sent, time.perf_counter()
                assert all(result.info["stage"] == "syntax" for result in client.score(ways[name]))
                seconds[name] += time.perf_counter() - start
                sent[name] += transport.sent - before
    return {name: (sent[name] // ROUNDS, seconds[name]) for name in ways}


if __name__ == "__main__":
    main()
