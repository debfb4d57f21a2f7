"""`POST /v1/score` of a real toolcall server process."""

from __future__ import annotations

import json

import httpx

from corrgrpo_testing.servers import start_service

CALL = {"name": "get_weather", "parameters": {"city": "Paris"}}
GROUND_TRUTH = f"<think>t</think>\n<tool_call>\n{json.dumps(CALL)}\n</tool_call>"


def test_score_endpoint() -> None:
    wrong = GROUND_TRUTH.replace("Paris", "Rome")
    items = [
        {
            "id": "exact",
            "completion": f"<|im_start|>assistant\n{GROUND_TRUTH}<|im_end|>",
            "ground_truth": GROUND_TRUTH,
        },
        {"id": "wrong-value", "completion": wrong, "ground_truth": GROUND_TRUTH},
        {"id": "bad-truth", "completion": "x", "ground_truth": "<tool_call>\nnot json\n</tool_call>"},
        {
            "id": "too-many",
            "completion": GROUND_TRUTH.replace(json.dumps(CALL), "\n".join([json.dumps(CALL)] * 9)),
            "ground_truth": GROUND_TRUTH,
        },
    ]
    with start_service("toolcall", env={"CORRGRPO_TOOLCALL_MAX_CALLS": "8"}) as service:
        response = httpx.post(
            f"{service.url}/v1/score", json={"items": items, "weights": {"format": 0}}, timeout=10
        )
        assert response.status_code == 200
        exact, wrong_value, bad, too_many = response.json()["results"]
        # the authors' fixed ranges: name ±0.5, param_names ±1, param_values ±1.5 (format weighted 0 here)
        assert exact["components"] == {"format": 1.0, "name": 0.5, "param_names": 1.0, "param_values": 1.5}
        assert (
            exact["total"] == 3.0
            and exact["info"]["exact"] is True
            and exact["info"]["toolrl_correctness"] == 3.0
        )
        assert wrong_value["components"]["param_values"] == -1.5 and wrong_value["total"] == 0.0
        assert wrong_value["info"]["toolrl_correctness"] == 1.0  # ToolRL's: 6·2/3 − 3
        assert bad["error"]["code"] == "invalid_ground_truth"
        assert too_many["info"]["unparseable"] == "more than 8 calls" and too_many["total"] == -3.0
        components = httpx.get(f"{service.url}/v1/components", timeout=10).json()["components"]
        declared = [(c["name"], c["min"], c["max"], c["weight"]) for c in components]
        assert declared == [
            ("format", 0, 1, 1),
            ("name", -0.5, 0.5, 1),
            ("param_names", -1, 1, 1),
            ("param_values", -1.5, 1.5, 1),
        ]
        invalid = httpx.post(f"{service.url}/v1/score", json={"items": [{"completion": "x"}]}, timeout=10)
        assert invalid.status_code == 422 and "ground_truth" in invalid.json()["message"]
