"""The code service over HTTP, started exactly as its container runs it: one test per endpoint."""

from __future__ import annotations

import httpx

from corrgrpo_code.efficiency import efficiency
from corrgrpo_testing.servers import start_service

SQUARE = {
    "task_id": "square",
    "entry_point": "square",
    "test": "def check(candidate):\n    assert candidate(3) == 9\n",
    "reference": "def square(x):\n    return x * x\n",
}
CORRECT = "```python\ndef square(n):\n    return n * n\n```"


def test_two_replicas_share_the_reference_time_and_score_in_order(redis_url: str, key_prefix: str) -> None:
    env = {
        "CORRGRPO_REDIS_URL": redis_url,
        "CORRGRPO_CODE_CACHE_PREFIX": key_prefix,
        "CORRGRPO_CODE_WORKERS": "1",
    }
    env["CORRGRPO_CODE_EFFICIENCY_MODE"] = "paper"  # its t_ref is what replicas share
    with start_service("code", env=env) as first, start_service("code", env=env) as second:
        items = [
            {
                "id": f"{key_prefix}a",
                "completion": CORRECT,
                "problem": SQUARE,
            },  # unique: the kit remembers ids
            {"completion": "x", "task_id": "no-such-task"},
            {
                "completion": "```python\ndef has_close_elements(n, t): return False\n```",
                "task_id": "HumanEval/0",
            },
        ]
        body = httpx.post(f"{first.url}/v1/score", json={"items": items}, timeout=60).json()
        measured, unknown, wrong = body["results"]
        assert measured["components"]["correct"] == 1 and measured["info"]["t_ref_source"] == "measured"
        assert measured["components"]["efficiency"] == efficiency(
            measured["info"]["t"], measured["info"]["t_ref"]
        )
        assert measured["info"]["isolation"]
        assert unknown["error"]["code"] == "unknown_task"
        assert wrong["components"]["runtime"] == 1 and wrong["components"]["correct"] == 0

        # no id: the idempotency cache would replay the first answer
        item = {"completion": CORRECT, "problem": SQUARE}
        again = httpx.post(f"{second.url}/v1/score", json={"items": [item]}, timeout=60).json()["results"][0]
        assert (
            again["info"]["t_ref_source"] == "cache" and again["info"]["t_ref"] == measured["info"]["t_ref"]
        )

        changed = {**SQUARE, "test": SQUARE["test"] + "    assert candidate(2) == 4\n"}
        item = {"completion": CORRECT, "problem": changed}
        fresh = httpx.post(f"{second.url}/v1/score", json={"items": [item]}, timeout=60).json()["results"][0]
        assert fresh["info"]["t_ref_source"] == "measured"


def test_readyz_reports_the_sandbox_isolation() -> None:
    with start_service("code", env={"CORRGRPO_CODE_WORKERS": "1"}) as service:
        response = httpx.get(f"{service.url}/readyz", timeout=10)
        assert response.status_code == 200
        checks = response.json()["checks"]
        assert checks["sandbox"] == "bwrap"
        components = httpx.get(f"{service.url}/v1/components", timeout=10).json()["components"]
        weights = {"format": 0.05, "syntax": 0.05, "compile": 0.05, "runtime": 0.25, "correct": 0.6}
        weights |= {"ast_similarity": 0.3, "efficiency": 0.2}  # the authors' run.sh defaults
        weights |= {"pass_rate": 0.0}  # ours, for stacks that want partial credit
        assert {c["name"]: c["weight"] for c in components} == weights and list(weights) == [
            c["name"] for c in components
        ]
