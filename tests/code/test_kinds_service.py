"""The problem kinds and shared runs over HTTP, with the real service as its container runs it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from corrgrpo_proto import RewardClient
from corrgrpo_testing.servers import ServiceProcess, start_service

SUM = {
    "task_id": "sum",
    "stdin_cases": [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "5 7\n", "output": "12\n"},
        {"input": "0.5 0.25\n", "output": "0.75\n"},
    ],
    "reference": "a, b = map(float, input().split())\nprint(f'{a + b:g}')\n",
}
PROGRAM = {
    # 3, not 3.0
    "right": "import sys\na, b = map(float, sys.stdin.read().split())\nprint(f'{a + b:g}')\nsys.exit(0)\n",
    "ints only": "a, b = map(int, input().split())\nprint(a + b)\n",  # raises on the third case
    "wrong": "a, b = map(float, input().split())\nprint(f'{a - b if a == 5 else a + b:g}')\n",
}


def fenced(code: str) -> str:
    return f"```python\n{code}```"


def score(service: ServiceProcess, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = httpx.post(f"{service.url}/v1/score", json={"items": items}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["results"]


@pytest.fixture(scope="module")
def service() -> Iterator[ServiceProcess]:
    with start_service("code", env={"CORRGRPO_CODE_WORKERS": "2", "CORRGRPO_CODE_DATASETS": ""}) as running:
        yield running


def test_stdin_cases_score_the_seven_components_and_a_pass_rate(service: ServiceProcess) -> None:
    items = [{"completion": fenced(code), "problem": SUM} for code in PROGRAM.values()]
    right, crashed, wrong = score(service, items)
    assert right["components"]["correct"] == 1 and right["components"]["pass_rate"] == 1
    assert (
        right["info"]["kind"] == "stdin" and right["info"]["tests_total"] == 3 and right["info"]["t_ref"] > 0
    )
    assert right["components"]["ast_similarity"] > 0
    assert crashed["components"]["runtime"] == 0 and crashed["components"]["compile"] == 1
    assert crashed["info"]["stage"] == "test_error" and crashed["info"]["tests_passed"] == 2
    assert crashed["components"]["pass_rate"] == pytest.approx(2 / 3)
    assert wrong["components"]["runtime"] == 1 and wrong["components"]["correct"] == 0
    assert wrong["info"]["stage"] == "assertion" and wrong["info"]["error"] == "case 1: wrong output"
    gained = 0.6 + 0.2 * right["components"]["efficiency"] + 0.3 * right["components"]["ast_similarity"]
    lost = 0.3 * wrong["components"]["ast_similarity"]
    assert right["total"] == pytest.approx(wrong["total"] + gained - lost)  # pass_rate weighs 0 by default


def test_a_problems_own_time_limit_is_honoured(service: ServiceProcess) -> None:
    slow = (
        "import time\nx, end = 0, time.process_time() + 1.5\n"
        "while time.process_time() < end:\n    x += 1\nprint(3)\n"
    )
    problem = {"task_id": "slow", "stdin_cases": [{"input": "", "output": "3\n"}]}
    limited = {**problem, "time_limit_s": 1}
    under, over = score(service, [{"completion": fenced(slow), "problem": p} for p in (problem, limited)])
    assert under["components"]["correct"] == 1
    assert over["info"]["stage"] == "timeout" and over["components"]["runtime"] == 0


def test_call_cases_compare_return_values(service: ServiceProcess) -> None:
    problem = {
        "task_id": "pair",
        "fn_name": "pair",
        "call_cases": [{"args": [1, 2], "expected": [[1, 2]]}, {"args": [3, 4], "expected": [3, 4]}],
        "reference": "def pair(a, b):\n    return [a, b]\n",
    }
    as_tuple = fenced("def pair(a, b):\n    return (a, b)\n")
    swapped = fenced("def pair(a, b):\n    return [b, a] if a == 3 else [a, b]\n")
    wrong_then_crash = fenced("def pair(a, b):\n    return [b, a] if a == 1 else [][a]\n")
    crash_then_right = fenced("def pair(a, b):\n    return [][a] if a == 1 else [a, b]\n")
    completions = (as_tuple, swapped, wrong_then_crash, crash_then_right)
    right, wrong, crashed_late, crashed_first = score(
        service, [{"completion": c, "problem": problem} for c in completions]
    )
    assert (
        right["components"]["correct"] == 1
        and right["info"]["kind"] == "call"
        and right["info"]["tests_total"] == 2
    )
    assert wrong["components"]["correct"] == 0 and wrong["components"]["pass_rate"] == 0.5
    assert wrong["components"]["runtime"] == 1 and wrong["info"]["stage"] == "assertion"
    # runtime = no case raised: a crash after a wrong answer still counts, and every case runs after a crash
    assert crashed_late["components"]["runtime"] == 0 and crashed_late["info"]["stage"] == "test_error"
    assert crashed_late["info"]["error"].startswith("test 1: IndexError")
    assert crashed_first["components"]["runtime"] == 0 and crashed_first["components"]["pass_rate"] == 0.5


def test_mbpp_asserts_count_one_test_each(service: ServiceProcess) -> None:
    problem = {
        "task_id": "mbpp/1",
        "test_list": ["assert double(2) == 4", "assert double(5) == 10", "assert double(0) == 0"],
    }
    right, wrong = score(
        service,
        [
            {"completion": fenced("def double(x):\n    return 2 * x\n"), "problem": problem},
            {"completion": fenced("def double(x):\n    return 4\n"), "problem": problem},
        ],
    )
    assert right["components"]["correct"] == 1 and right["info"]["kind"] == "mbpp"
    assert right["components"]["format"] == 1 and right["info"]["t_ref_error"] == "no reference solution"
    assert (wrong["info"]["tests_passed"], wrong["info"]["tests_total"]) == (1, 3)


def test_a_problem_of_no_kind_is_one_clear_422(service: ServiceProcess) -> None:
    item = {"completion": "x", "problem": {"task_id": "t", "inputs": ["1"], "outputs": ["2"]}}
    response = httpx.post(f"{service.url}/v1/score", json={"items": [item]}, timeout=30)
    assert response.status_code == 422
    (detail,) = response.json()["details"]
    assert detail["loc"] == "items.0.problem" and "needs exactly one of" in detail["message"]


def test_identical_programs_run_once_in_a_batch_and_across_replicas(redis_url: str, key_prefix: str) -> None:
    env = {
        "CORRGRPO_REDIS_URL": redis_url,
        "CORRGRPO_CODE_CACHE_PREFIX": key_prefix,
        "CORRGRPO_CODE_WORKERS": "2",
    }
    env["CORRGRPO_CODE_DATASETS"] = ""
    right = fenced(PROGRAM["right"])
    # the second extracts to the same program
    group = [right, "Sure!\n" + right, fenced(PROGRAM["wrong"]), right]
    items = [{"completion": completion, "problem": SUM} for completion in group]
    with start_service("code", env=env) as first, start_service("code", env=env) as second:
        results = score(first, items)
        assert sorted(r["info"]["run"] for r in results) == ["batch", "batch", "run", "run"]
        shared = [r for r, c in zip(results, group, strict=True) if right in c]
        # one run, one time
        assert len({(r["info"]["t"], r["components"]["efficiency"]) for r in shared}) == 1
        again = score(second, items)
        assert sorted(r["info"]["run"] for r in again) == ["batch", "batch", "store", "store"]
        assert [r["components"] for r in again] == [r["components"] for r in results]


def test_a_group_sharing_one_problem_scores_as_if_each_item_carried_it(service: ServiceProcess) -> None:
    """A group's problem sent once (`problem_from`, as the client sends it) scores as the items that each
    carry it."""
    items = [{"id": name, "completion": fenced(code), "problem": SUM} for name, code in PROGRAM.items()]
    shared = [items[0], *({**item, "problem": None, "problem_from": 0} for item in items[1:])]
    inline, named = score(service, items), score(service, shared)
    assert [r["components"] for r in named] == [r["components"] for r in inline]
    assert (
        [r["info"]["stage"] for r in named]
        == [r["info"]["stage"] for r in inline]
        == ["passed", "test_error", "assertion"]
    )
    with RewardClient(service.url) as client:
        assert [r.components for r in client.score(items)] == [r["components"] for r in inline]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"problem_from": 1}, "items.1.problem_from: 1 is not an earlier item with an inline problem"),
        ({"problem_from": 0}, "items.1.problem_from: 0 is not an earlier item with an inline problem"),
        (
            {"problem_from": 0, "task_id": "sum"},
            "give exactly one of `problem`, `task_id` and `problem_from`",
        ),
    ],
)
def test_a_problem_from_that_names_no_earlier_inline_problem_is_a_422(
    service: ServiceProcess, second: dict[str, Any], message: str
) -> None:
    items = [{"completion": "x", "task_id": "sum"}, {"completion": "y", **second}]
    response = httpx.post(f"{service.url}/v1/score", json={"items": items}, timeout=30)
    assert response.status_code == 422 and message in response.text, response.text


def test_openrlhf_labels_cannot_name_another_item(service: ServiceProcess) -> None:
    """OpenRLHF's labels are items alone: `problem_from` in one is refused, naming the label and why."""
    labels = [json.dumps({"problem": SUM}), json.dumps({"problem_from": 0})]
    request = {"query": [fenced(PROGRAM["right"])] * 2, "prompts": ["", ""], "labels": labels}
    response = httpx.post(f"{service.url}/v1/openrlhf", json=request, timeout=60)
    assert response.status_code == 422, response.text
    (detail,) = response.json()["details"]
    assert detail == {
        "loc": "labels.1",
        "message": "invalid_problem: `problem_from` names another item of a /v1/score request",
    }
