"""Red-team regressions against the real code service (`python -m corrgrpo_code`, bwrap, real Redis): issues
14, 17, 18.

Each test sends what an attacker sent and checks the answer the issue asks for. None depends on tight
timing: bounds are many times what the fixed code needs and far below what the old code took.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from corrgrpo_code.efficiency import efficiency
from corrgrpo_code.problems import humaneval_problems
from corrgrpo_testing.environment import REDIS_URL
from corrgrpo_testing.servers import ServiceProcess, start_service

ADD = {
    "task_id": "security/add",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
    "reference": "def add(a, b):\n    return a + b\n",
}
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
CHAIN = ("syntax", "compile", "runtime", "correct")


@pytest.fixture(scope="module")
def prefix() -> Iterator[str]:
    prefix = f"corrgrpo-test:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


@pytest.fixture(scope="module")
def service(prefix: str) -> Iterator[ServiceProcess]:
    env = {
        "CORRGRPO_REDIS_URL": REDIS_URL,
        "CORRGRPO_CODE_CACHE_PREFIX": prefix,
        "CORRGRPO_CODE_WORKERS": "2",
    }
    env["CORRGRPO_CODE_EFFICIENCY_MODE"] = "paper"  # t_ref poisoning (14.3) is the paper mode's shared t_ref
    with start_service("code", env=env) as running:
        ready = httpx.get(f"{running.url}/readyz", timeout=30).json()
        # these are containment tests: meaningless without bwrap
        if ready["checks"].get("sandbox") != "bwrap":
            message = f"the code service runs without bwrap: {ready['checks']}"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
        yield running


def score(service: ServiceProcess, items: list[dict[str, Any]], timeout: float = 300) -> list[dict[str, Any]]:
    response = httpx.post(f"{service.url}/v1/score", json={"items": items}, timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def inline(**changes: str) -> dict[str, str]:
    """A problem no other test (or earlier run) has scored: its reference time is measured afresh."""
    return {**ADD, "reference": ADD["reference"] + f"# {uuid.uuid4().hex}\n", **changes}


# 14.1 — client text evaluated in the service process
EXPLOIT = (
    "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()"
    "._module.__builtins__['__import__']('os').system('id > {marker}')"
)


@pytest.mark.parametrize("route", ["score", "openrlhf"])
def test_a_check_from_the_client_never_runs_in_the_service(service: ServiceProcess, route: str) -> None:
    marker = f"/tmp/corrgrpo-pwned-{uuid.uuid4().hex}"  # /tmp of the host; the sandbox has its own
    problem = inline(
        test=f"def check(candidate):\n    assert candidate(1, 2) == {EXPLOIT.format(marker=marker)}\n"
    )
    if route == "score":
        (result,) = score(service, [{"completion": RIGHT, "problem": problem}])
        # judged in the sandbox, not refused
        assert result["error"] is None and result["info"]["mode"] == "io"
    else:
        body = {"query": [RIGHT], "prompts": [""], "labels": [json.dumps({"problem": problem})]}
        response = httpx.post(f"{service.url}/v1/openrlhf", json=body, timeout=300)
        assert response.status_code == 200, response.text
    assert not os.path.exists(marker), Path(marker).read_text()


# 14.3 — t_ref poisoning and noisy neighbours
FORK_BUSY = """
import os
for _ in range(12):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
def add(a, b):
    while True:
        pass
"""


def test_reference_time_survives_busy_neighbours_and_every_key_expires(
    service: ServiceProcess, prefix: str
) -> None:
    fresh = inline()
    busy = {"completion": f"```python\n{FORK_BUSY}\n```", "problem": ADD}
    results = score(service, [busy, {"completion": RIGHT, "problem": fresh}, busy, busy])
    assert all(r["error"] is None for r in results), results
    measured = results[1]
    assert measured["components"]["correct"] == 1 and measured["info"]["t_ref"] is not None, measured["info"]
    assert measured["components"]["efficiency"] == efficiency(
        measured["info"]["t"], measured["info"]["t_ref"]
    )
    assert all(r["components"]["correct"] == 0 for r in results[::2] if r is not measured)

    broken = inline(reference="def add(a, b):\n    return a - b\n")
    (failed,) = score(service, [{"completion": RIGHT, "problem": broken}])
    assert failed["info"]["t_ref"] is None and "reference fails" in failed["info"]["t_ref_error"]
    client = redis.Redis.from_url(REDIS_URL)
    ttls = {key.decode(): client.ttl(key) for key in client.scan_iter(f"{prefix}*tref:*")}
    assert ttls and all(ttl > 0 for ttl in ttls.values()), ttls  # -1: kept forever
    assert sorted(ttls.values())[0] <= 60  # the failed measurement: shared briefly, never final


# 14.4 — what the candidate causes is its failure: tests/security/test_shapes.py, in every shape


# 14.6 — assert mode: the test sees the prompt's helpers, not the completion's redefinitions
HELPER_HACKS = {
    "HumanEval/38": "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n",
    "HumanEval/50": "def encode_shift(s):\n    return s\n\ndef decode_shift(s):\n    return s\n",
    "HumanEval/32": "def poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 0.0\n",
}


def test_redefined_prompt_helpers_do_not_pass(service: ServiceProcess) -> None:
    problems = {p.task_id: p for p in humaneval_problems() if p.task_id in HELPER_HACKS}
    hacks = [{"completion": f"```python\n{code}```", "task_id": task} for task, code in HELPER_HACKS.items()]
    honest = [
        {"completion": f"```python\n{problems[task].reference}```", "task_id": task} for task in HELPER_HACKS
    ]
    results = score(service, hacks + honest)
    for item, result in zip(hacks + honest, results, strict=True):
        assert result["error"] is None and result["info"]["mode"] == "assert"
        assert result["components"]["correct"] == (item in honest), (item["task_id"], result["info"])


# 18.1 + 18.2 — no request stalls the event loop: regex cost, output decoding
COLLIDING_OUTPUT = """
import json, os
M = (1 << 61) - 1  # every multiple of this Mersenne prime has the same hash
out = {"__t": "set", "v": [i * M for i in range(1, 35000)]}
for message in ({"toplevel": "ok"}, {"i": 0, "out": out}, {"i": 1, "out": 0}, {"done": True}):
    os.write(3, (json.dumps(message) + "\\n").encode())
os._exit(0)
"""


def test_hostile_batches_do_not_stall_healthz(service: ServiceProcess) -> None:
    unclosed = {"completion": "```py\n" * (80_000 // 6), "problem": ADD}  # 27 s in one regex pass before
    colliding = {"completion": f"```python\n{COLLIDING_OUTPUT}```", "problem": ADD}  # 30 s to decode before
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=120) as client:
            while not done.is_set():
                started = time.monotonic()
                assert client.get(f"{service.url}/healthz").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        started = time.monotonic()
        results = score(service, [unclosed] * 4 + [colliding] * 2)
        elapsed = time.monotonic() - started
    finally:
        done.set()
        prober.join()
    assert [r["info"]["stage"] for r in results] == ["syntax"] * 4 + ["assertion"] * 2, results
    assert elapsed < 60 and max(latencies) < 5, (elapsed, max(latencies))


# 17.1 — end-of-sequence tokens kept by the decoder do not change the score
EOS_TOKENS = [
    "<|im_end|>",
    "<|endoftext|>",
    "</s>",
    "<|eot_id|>",
    "<｜end▁of▁sentence｜>",
    "<end_of_turn>",
    "<eos>",
]


def test_trailing_special_tokens_do_not_change_the_score(service: ServiceProcess) -> None:
    variants = [RIGHT + token for token in EOS_TOKENS] + [RIGHT + "\n" + token for token in EOS_TOKENS]
    results = score(
        service,
        [{"completion": RIGHT, "problem": ADD}] + [{"completion": v, "problem": ADD} for v in variants],
    )
    # efficiency: timing noise
    plain = {k: v for k, v in results[0]["components"].items() if k != "efficiency"}
    assert plain == {"format": 1.0, **dict.fromkeys(CHAIN, 1.0), "ast_similarity": 1.0, "pass_rate": 1.0}
    for variant, result in zip(variants, results[1:], strict=True):
        assert {k: v for k, v in result["components"].items() if k != "efficiency"} == plain, variant
        assert result["components"]["efficiency"] == efficiency(result["info"]["t"], result["info"]["t_ref"])


# 18.3 — per-field limits on inline problems (work once per distinct problem: tests/code/test_scoring.py)
@pytest.mark.parametrize(
    ("field", "size"), [("reference", 100_001), ("prompt", 100_001), ("entry_point", 1_001)]
)
def test_an_oversized_inline_field_is_refused_with_its_path(
    service: ServiceProcess, field: str, size: int
) -> None:
    problem = inline(**{field: "x" * size})
    response = httpx.post(
        f"{service.url}/v1/score", json={"items": [{"completion": RIGHT, "problem": problem}]}, timeout=60
    )
    assert response.status_code == 413, response.text
    assert f"items.0.problem.{field}" in response.text or f"items[0].problem.{field}" in response.text, (
        response.text
    )
