"""A stated peak-RSS bound per service under hostile max-size requests, checked on the real process.

Each service runs with its default limits (64 MiB bodies, 1M JSON values, 4096 items); the test sends the
largest bodies of several hostile shapes and reads the process's peak RSS (`VmHWM` in /proc/<pid>/status). The
bounds are each declaration's `peak_rss_mib` (services/common/README.md lists them). Items are the declared
examples around texts the scorers score cheaply (no code to run, no call to replay), so the kit's limits, not
the scorers' work, are what is exercised: their own per-field caps are their services' tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from corrgrpo_common import declared
from corrgrpo_testing.servers import ServiceProcess, start_service

MIB = 1024 * 1024
BODY = 63 * MIB  # just under the default 64 MiB limit
CALLS = '<think>x</think>\n<tool_call>\n{"name": "f", "parameters": {"a": [%s]}}\n</tool_call>'


def item_of(name: str, text: str) -> dict[str, object]:
    """The service's declared example item with `text` as the model's: no code to run, no tool call to
    replay."""
    return declared()[name].example(text)


def hostile_bodies(name: str) -> Iterator[tuple[str, bytes]]:
    per_item = BODY // 4096 - 200
    lists = CALLS % ",".join(["[]"] * (per_item // 3 - 40))  # parsed JSON ~20x its text
    yield "4096 items of nested lists", json.dumps({"items": [item_of(name, lists)] * 4096}).encode()
    yield "one 63 MiB string", json.dumps({"items": [item_of(name, "x" * (BODY - 200))]}).encode()
    weights = {f"w{i}": 1.0 for i in range(999_000)}
    yield (
        "a million-value weights map",
        json.dumps({"items": [item_of(name, "x")], "weights": weights}).encode(),
    )
    yield "a million values", b'{"items": [' + b",".join([b"[]"] * 1_500_000) + b"]}"
    yield "5000 items", json.dumps({"items": [item_of(name, "x")] * 5000}).encode()


def peak_rss_mib(service: ServiceProcess) -> float:
    with open(f"/proc/{service.process.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def probe_health(service: ServiceProcess, stop: threading.Event, worst: list[float]) -> None:
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            started = time.monotonic()
            client.get(f"{service.url}/healthz")
            worst[0] = max(worst[0], time.monotonic() - started)
            time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(declared()))
def test_peak_rss_stays_under_the_stated_bound(name: str) -> None:
    with start_service(name, env={"CORRGRPO_CODE_WORKERS": "2"}, timeout_s=120) as service:
        idle = peak_rss_mib(service)
        stop, worst = threading.Event(), [0.0]
        prober = threading.Thread(target=probe_health, args=(service, stop, worst))
        prober.start()
        statuses: dict[str, int] = {}
        try:
            with httpx.Client(timeout=300) as client:
                for label, body in hostile_bodies(name):
                    response = client.post(
                        f"{service.url}/v1/score", content=body, headers={"content-type": "application/json"}
                    )
                    assert response.status_code < 500, (label, response.text[:300])
                    statuses[label] = response.status_code
                    del body
        finally:
            stop.set()
            prober.join()
        peak = peak_rss_mib(service)
        assert service.process.poll() is None
    print(
        f"{name}: idle {idle:.0f} MiB, peak {peak:.0f} MiB, worst /healthz {worst[0]:.2f}s, answers "
        f"{statuses}"
    )
    assert statuses["a million values"] == 413 and statuses["5000 items"] == 413
    bound = declared()[name].deploy.resources.peak_rss_mib
    assert peak <= bound, f"{name}: peak RSS {peak:.0f} MiB over the stated {bound} MiB"


def test_toolcall_ground_truth_over_its_cap_is_413_naming_the_item() -> None:
    with start_service("toolcall") as service:
        items = [
            {"completion": "x", "ground_truth": CALLS % "1"},
            {"completion": "x", "ground_truth": "y" * 40_000},
        ]
        response = httpx.post(f"{service.url}/v1/score", json={"items": items}, timeout=60)
    assert response.status_code == 413, response.text
    assert (response.json()["error"], response.json()["details"][0]["loc"]) == (
        "field_too_long",
        "items.1.ground_truth",
    )
