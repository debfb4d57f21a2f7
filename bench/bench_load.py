"""Load test of a reward service over loopback: 1×, 4× and 10× its sustainable rate.

`python bench/bench_load.py [--services toolcall toy] [--seconds 8]` starts each service as its
container does (`python -m corrgrpo_<name>`), measures the sustainable rate with a closed loop of
`SENDERS` senders, then offers an open-loop load of 1×, 4× and 10× that rate (fixed arrival schedule,
bounded at `--max-outstanding` requests in the generator itself, which counts arrivals beyond it as
`dropped`; no client retries; requests unanswered 5 s after the last arrival count as errors), and
prints a markdown table: answered throughput, p50/p99 latency of the answered requests, 429/503
and other error counts, and the peak RSS of the service process; then each service's answered
rate at 4× and 10× against 1×, the ratios to quote. Each phase runs in `--rounds` slices, the
phases interleaved and their order alternating (1×, 4×, 10×, then 10×, 4×, 1×, ...): a shared
machine's speed, which drifts over a run, weighs on all three alike.

The service (and everything it starts) runs pinned to one core and the generator to another
(`--cores S G`, default the first two this process may use), so the generator's CPU is not the
service's: past capacity the service's one core must both refuse and serve. `--via-nginx` puts a
local nginx, pinned with the service, in front of it with deploy/nginx/nginx.conf (only the
`listen` lines and upstreams.conf replaced by the service's loopback address), so the same phases
measure what compose and Kubernetes clients get.

`toy` is a toy service on the kit (`bench/toy/`) whose items wait asynchronously
(`CORRGRPO_TOY_ITEM_MS`, like a sandbox run); `toolcall` spends CPU on each item (tens of µs) in a
worker thread. Past the in-flight budget (512 items: 16 batches) a fresh connection's scoring
request is refused at accept (429, ~25 µs of the service's CPU: `corrgrpo_common/listener.py`);
through nginx, past 16 scoring requests at once nginx refuses it itself (429), without a
connection to the service. At 10x nine requests are refused per batch scored, so the answered rate
holds only while a refusal costs a sliver of a batch (~2.5 ms of CPU for toolcall's 32 items).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from corrgrpo_testing.servers import nginx_in_front, start_service

BATCH = 32
NGINX_DIR = Path(__file__).resolve().parent.parent / "deploy" / "nginx"
TOOL_CALL = (
    '<think>plan</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
)
ITEMS = {
    "toolcall": [{"completion": TOOL_CALL, "ground_truth": TOOL_CALL}] * BATCH,
    "toy": [{"completion": "x" * 200}] * BATCH,
}
ENV = {
    "toolcall": {"CORRGRPO_MAX_INFLIGHT_ITEMS": "512"},
    "toy": {
        "CORRGRPO_MAX_INFLIGHT_ITEMS": "512",
        "CORRGRPO_TOY_ITEM_MS": "20",
        "CORRGRPO_TOY_WORKERS": "64",
        "PYTHONPATH": str(Path(__file__).resolve().parent / "toy"),  # its folder: the toy is never installed
    },
}


@dataclass
class Phase:
    label: str
    offered_rps: float
    latencies: list[float] = field(default_factory=list)
    rejected: int = 0
    errors: int = 0
    dropped: int = 0
    peak_rss: int = 0
    seconds: float = 0.0  # summed over the phase's slices

    @property
    def answered_rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


# Half the in-flight budget's 16 batches: the service stays busy through each sender's connect and send (4
# left it idle between requests, through nginx most: a 1× phase under capacity flattered the overloaded ones),
# never refused.
SENDERS = 8
FACTORS = (1, 4, 10)  # the offered load, in multiples of the sustainable rate; the first is the reference
DRAIN_S = 5.0
"""After the last arrival, requests still unanswered this long are cancelled and counted as errors."""


async def post(port: int, body: bytes) -> int:
    """POST /v1/score on a fresh connection; the status code. (httpx's pool degrades with hundreds queued.)"""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        head = (
            "POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
        )
        writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()  # the rest, until the server closes
        return int(status_line.split()[1])
    finally:
        writer.close()


async def send(port: int, body: bytes, phase: Phase) -> None:
    start = time.perf_counter()
    try:
        status = await post(port, body)
    except (OSError, ValueError, IndexError):
        phase.errors += 1
        return
    if status == 200:
        phase.latencies.append(time.perf_counter() - start)
    elif status in (429, 503):  # refused with Retry-After: by the budget, the connection cap or nginx
        phase.rejected += 1
    else:
        phase.errors += 1


async def watch_rss(process: psutil.Process, phase: Phase, stop: asyncio.Event) -> None:
    while not stop.is_set():
        phase.peak_rss = max(phase.peak_rss, process.memory_info().rss)
        await asyncio.sleep(0.05)


async def closed_loop(port: int, body: bytes, seconds: float) -> float:
    """Requests per second `SENDERS` back-to-back senders get: the service's sustainable rate."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def sender() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            status = await post(port, body)
            assert status == 200, status
            done += 1

    await asyncio.gather(*(sender() for _ in range(SENDERS)))
    return done / seconds


async def open_loop(
    port: int, body: bytes, phase: Phase, seconds: float, cap: int, process: psutil.Process
) -> None:
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_rss(process, phase, stop))
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    for n in range(int(phase.offered_rps * seconds)):
        await asyncio.sleep(max(0.0, start + n / phase.offered_rps - time.perf_counter()))
        if len(tasks) >= cap:
            phase.dropped += 1  # the generator's own bound: never an unbounded client-side queue
            continue
        task = asyncio.create_task(send(port, body, phase))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        _, late = await asyncio.wait(set(tasks), timeout=DRAIN_S)
        for task in late:
            task.cancel()
        phase.errors += len(late)
    phase.seconds += time.perf_counter() - start
    stop.set()
    await watcher


def row(service: str, phase: Phase) -> str:
    ok = sorted(phase.latencies)
    p50 = statistics.median(ok) * 1e3 if ok else float("nan")
    p99 = ok[min(len(ok) - 1, int(0.99 * len(ok)))] * 1e3 if ok else float("nan")
    rps = phase.answered_rps
    return (
        f"| {service} | {phase.label} | {phase.offered_rps:.0f} | {rps:.0f} | {rps * BATCH:.0f} | {p50:.1f} "
        f"| {p99:.1f} "
        f"| {phase.rejected} | {phase.errors} | {phase.dropped} | {phase.peak_rss / 2**20:.0f} |"
    )


@contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """This process on `cpu` for the `with`: what it starts meanwhile inherits the affinity, threads
    included."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


async def bench(
    name: str, seconds: float, rounds: int, cap: int, cores: tuple[int, int], via_nginx: bool
) -> list[Phase]:
    body = json.dumps({"items": ITEMS[name]}).encode()
    service_cpu, generator_cpu = cores
    with pinned(service_cpu), start_service(name, env=ENV[name]) as service, ExitStack() as front:
        port = (
            front.enter_context(nginx_in_front(service.url, NGINX_DIR))
            if via_nginx
            else int(service.url.rsplit(":", 1)[1])
        )
        os.sched_setaffinity(0, {generator_cpu})
        process = psutil.Process(service.process.pid)
        await closed_loop(port, body, 1.0)  # warm-up
        sustainable = await closed_loop(port, body, seconds / 2)
        phases = [Phase(f"{factor}×", sustainable * factor) for factor in FACTORS]
        for round_number in range(rounds):
            for phase in phases if round_number % 2 == 0 else phases[::-1]:
                await open_loop(port, body, phase, seconds / rounds, cap, process)
    return phases


def goodput(phases: list[Phase]) -> str:
    """Each overloaded phase's answered rate against the 1× phase's."""
    base, *overloaded = (phase.answered_rps for phase in phases)
    if not base:
        return "none answered at 1×"
    return ", ".join(
        f"{phase.label} {rate / base:.2f}" for phase, rate in zip(phases[1:], overloaded, strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--services", nargs="+", default=["toolcall", "toy"], help="toolcall and/or toy")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each load phase")
    parser.add_argument("--rounds", type=int, default=3, help="slices each phase is run in, interleaved")
    parser.add_argument(
        "--max-outstanding", type=int, default=256, help="bound on requests in flight in the generator"
    )
    parser.add_argument(
        "--cores", nargs=2, type=int, metavar=("SERVICE", "GENERATOR"), help="CPUs to pin them to"
    )
    parser.add_argument(
        "--via-nginx",
        action="store_true",
        help="through deploy/nginx/nginx.conf, nginx on the service's core",
    )
    args = parser.parse_args()
    usable = sorted(os.sched_getaffinity(0))
    cores = tuple(args.cores or usable[:2])
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if len(set(cores)) < 2:
        parser.error(
            f"needs two cores, one for the service and one for the generator; this process may use {usable}"
        )
    print(
        f"Batches of {BATCH} items; in-flight budget 512 items; {args.seconds:.0f} s per phase in "
        f"{args.rounds} interleaved "
        "slices; loopback; no retries; "
        f"service on CPU {cores[0]}, generator on CPU {cores[1]}; load average {os.getloadavg()[0]:.2f}.\n"
    )
    print(
        "| service | load | offered req/s | answered req/s | items/s | p50 ms | p99 ms | 429 | errors | "
        "dropped | RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for name in args.services:
        label = f"{name} via nginx" if args.via_nginx else name
        phases = asyncio.run(
            bench(name, args.seconds, args.rounds, args.max_outstanding, cores, args.via_nginx)
        )  # type: ignore[arg-type]
        for phase in phases:
            print(row(label, phase), flush=True)
        ratios.append(f"{label} {goodput(phases)}")
    print("\nAnswered rate against 1×: " + "; ".join(ratios))


if __name__ == "__main__":
    main()
