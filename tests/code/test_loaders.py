"""Dataset layouts behind CORRGRPO_CODE_DATASETS and `python -m corrgrpo_devtools.execution_metrics`.

Rows, with where they were found (through the search tool's index of public repositories):
- LiveCodeBench stdin: Codeforces 1899A "Game with Integers" (LiveCodeBench question 1899_A), its first cases
  as LiveCodeBench publishes them (a public dump of LiveCodeBench runs, file id 52648634982 of the index); the
  private cases are compressed here the way code_generation_lite stores them (base64 of zlib of a pickled JSON
  text).
- LiveCodeBench functional: LeetCode 2798 `numberOfEmployeesWhoMetTarget`, the case "[5, 3, 10, 8, 2]\\n5" ->
  "3" from rllm's code-reward test (index id 5086688050) and the problem's two published examples.
- TACO call-based: GeeksforGeeks `findNumber`, cases from a TACO ground truth quoted in a public script (index
  id 52877050286); outputs wrapped in lists, as TACO stores them.
- MBPP: task 11 `remove_Occ`, the full config's row (google-research mbpp.jsonl, quoted in index id
  59687083753).
- APPS stdin and CodeContests: rows made here in their layouts (outputs as line lists for APPS; time_limit and
  solutions with language codes for CodeContests).
"""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corrgrpo_code.harness import CHILD_FILE, RUN_PACKAGES
from corrgrpo_code.problems import load_problems
from corrgrpo_code.scorer import CodeScorer
from corrgrpo_code.settings import CodeSettings
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_devtools.execution_metrics import evaluate, read_inputs
from corrgrpo_proto.code import CallProblem, CodeItem, MbppProblem, StdinProblem
from corrgrpo_sandbox import Sandbox
from corrgrpo_testing.servers import start_service

GAME_CASES = [
    {
        "input": "6\n1\n3\n5\n100\n999\n1000\n",
        "output": "First\nSecond\nFirst\nFirst\nSecond\nFirst\n",
        "testtype": "stdin",
    },
    {"input": "1\n2\n", "output": "First\n", "testtype": "stdin"},
    {"input": "1\n994\n", "output": "First\n", "testtype": "stdin"},
    {"input": "1\n12\n", "output": "Second\n", "testtype": "stdin"},
]
LCB_STDIN = {
    "question_title": "Game with Integers",
    "question_id": "1899_A",
    "platform": "codeforces",
    "starter_code": "",
    "public_test_cases": json.dumps(GAME_CASES[:1]),
    "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(GAME_CASES[1:])))).decode(),
    "metadata": "{}",
}
LCB_FUNCTIONAL = {
    "question_id": "2876",
    "starter_code": "class Solution:\n"
    "    def numberOfEmployeesWhoMetTarget(self, hours: List[int], target: int) -> int:\n"
    "        ",
    "public_test_cases": json.dumps(
        [
            {"input": "[0, 1, 2, 3, 4]\n2", "output": "3", "testtype": "functional"},
            {"input": "[5, 1, 4, 2, 2]\n6", "output": "0", "testtype": "functional"},
        ]
    ),
    "private_test_cases": json.dumps(
        [{"input": "[5, 3, 10, 8, 2]\n5", "output": "3", "testtype": "functional"}]
    ),
    "metadata": json.dumps({"func_name": "numberOfEmployeesWhoMetTarget"}),
}
TACO_CALL = {
    "question": "Find the N-th number whose digits are all odd.",
    "starter_code": "#User function Template for python3\n"
    "class Solution:\n\tdef findNumber(self, N):\n\t\t# code here\n",
    "input_output": json.dumps(
        {
            "fn_name": "findNumber",
            "inputs": [[1], [5], [10], [9], [7]],
            "outputs": [["1"], ["9"], ["19"], ["17"], ["13"]],
        }
    ),
    "solutions": json.dumps([]),
}
APPS_STDIN = {
    "problem_id": 4000,
    "question": "Print the sum of two integers, then their product.",
    "input_output": json.dumps({"inputs": ["2 3\n", "-1 4\n"], "outputs": [["5", "6"], "3\n-4\n"]}),
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\nprint(a * b)\n"]),
    "starter_code": "",
}
MBPP = {
    "task_id": 11,
    "text": "Write a python function to remove first and last occurrence of a given character "
    "from the string.",
    "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",  # noqa: E501
    "test_list": [
        'assert remove_Occ("hello","l") == "heo"',
        'assert remove_Occ("abcda","a") == "bcd"',
        'assert remove_Occ("PHP","P") == "H"',
    ],
    "test_setup_code": "",
    "challenge_test_list": [],
}
CODECONTESTS = {
    "name": "1000_A. Max of three",
    "description": "Print the largest of three integers.",
    "public_tests": {"input": ["1 2 3\n"], "output": ["3\n"]},
    "private_tests": {"input": ["-5 -2 -9\n"], "output": ["-2\n"]},
    "generated_tests": {"input": ["7 7 1\n"], "output": ["7\n"]},
    "time_limit": {"seconds": 1, "nanos": 500000000},
    "solutions": {
        "language": [2, 3],
        "solution": ["int main() {}", "print(max(map(int, input().split())))\n"],
    },
}
RIGHT = {
    "1899_A": "t = int(input())\n"
    "for _ in range(t):\n    print('Second' if int(input()) % 3 == 0 else 'First')\n",
    "2876": "class Solution:\n"
    "    def numberOfEmployeesWhoMetTarget(self, hours: List[int], target: int) -> int:\n"
    "        return sum(h >= target for h in hours)\n",
    "0": "class Solution:\n    def findNumber(self, N):\n        n, found = 0, 0\n        while found < N:\n"
    "            n += 1\n            found += set(str(n)) <= set('13579')\n        return str(n)\n",
    "4000": "a, b = map(int, input().split())\nprint(a + b)\nprint(a * b)\n",
    "mbpp/11": "def remove_Occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
    "    return s if i < 0 else s[:i] + s[i + 1:]\n",
    "1000_A. Max of three": "print(max(map(int, input().split())))\n",
}
LAYOUTS = {
    "livecodebench": [LCB_STDIN, LCB_FUNCTIONAL],
    "taco": [TACO_CALL],
    "apps": [APPS_STDIN],
    "mbpp": [MBPP],
    "codecontests": [CODECONTESTS],
}


@pytest.fixture
def datasets(tmp_path: Path) -> str:
    """Every layout's rows in a .jsonl of its own; the CORRGRPO_CODE_DATASETS value that loads them all."""
    sources = []
    for layout, rows in LAYOUTS.items():
        path = tmp_path / f"{layout}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        sources.append(f"{layout}:{path}")
    return ",".join(sources)


def test_each_layout_loads_as_its_kind(datasets: str) -> None:
    problems = load_problems(datasets)
    assert set(problems) == set(RIGHT)
    game = problems["1899_A"]
    assert isinstance(game, StdinProblem) and [c.input for c in game.stdin_cases] == [
        c["input"] for c in GAME_CASES
    ]
    employees = problems["2876"]
    assert (
        isinstance(employees, CallProblem) and employees.fn_name == "Solution().numberOfEmployeesWhoMetTarget"
    )
    assert [c.args for c in employees.call_cases] == [
        [[0, 1, 2, 3, 4], 2],
        [[5, 1, 4, 2, 2], 6],
        [[5, 3, 10, 8, 2], 5],
    ]
    odd = problems["0"]
    assert (
        isinstance(odd, CallProblem)
        and odd.fn_name == "Solution().findNumber"
        and odd.call_cases[2].expected == ["19"]
    )
    apps = problems["4000"]
    assert isinstance(apps, StdinProblem) and apps.stdin_cases[0].output == "5\n6\n" and apps.reference
    mbpp = problems["mbpp/11"]
    assert isinstance(mbpp, MbppProblem) and len(mbpp.test_list) == 3 and mbpp.reference == MBPP["code"]
    contest = problems["1000_A. Max of three"]
    assert isinstance(contest, StdinProblem) and len(contest.stdin_cases) == 3 and contest.time_limit_s == 1.5
    assert contest.reference == CODECONTESTS["solutions"]["solution"][1]  # the Python 3 one (language 3)


def test_private_cases_never_unpickle_anything_but_data(tmp_path: Path) -> None:
    class Loud:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("unpickled a callable",))

    row = {**LCB_STDIN, "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(Loud()))).decode()}
    path = tmp_path / "lcb.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(pickle.UnpicklingError, match="is not data"):
        load_problems(f"livecodebench:{path}")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(workers=2, preload=[CHILD_FILE], packages=RUN_PACKAGES) as box:
        yield box


def test_every_loaded_problem_passes_a_right_program_and_fails_a_wrong_one(
    datasets: str, sandbox: Sandbox
) -> None:
    problems = load_problems(datasets)
    wrong = {task_id: "print(0)\n" if isinstance(p, StdinProblem) else "" for task_id, p in problems.items()}
    items = [CodeItem(task_id=t, completion=f"```python\n{RIGHT[t]}```") for t in problems]
    items += [CodeItem(task_id=t, completion=f"```python\n{wrong[t]}```") for t in problems]
    scorer = CodeScorer(sandbox, MemoryStore(), problems, CodeSettings(code_efficiency=False, code_workers=2))
    results = asyncio.run(scorer.score(items))
    scorer.close()
    assert all(isinstance(r, Scored) for r in results), results
    verdicts = {(i.task_id, r.components["correct"]) for i, r in zip(items, results, strict=True)}  # type: ignore[union-attr]
    assert verdicts == {(t, 1.0) for t in problems} | {(t, 0.0) for t in problems}, results


def test_the_service_loads_the_layouts_by_task_id(datasets: str) -> None:
    with start_service(
        "code", env={"CORRGRPO_CODE_DATASETS": datasets, "CORRGRPO_CODE_WORKERS": "2"}
    ) as service:
        items = [{"task_id": t, "completion": f"```python\n{RIGHT[t]}```"} for t in ("1899_A", "mbpp/11")]
        results = httpx.post(f"{service.url}/v1/score", json={"items": items}, timeout=120).json()["results"]
    assert [(r["info"]["kind"], r["components"]["correct"]) for r in results] == [("stdin", 1), ("mbpp", 1)]


def test_evaluate_reads_the_layouts(datasets: str, tmp_path: Path) -> None:
    completions = tmp_path / "completions.jsonl"
    rows: list[dict[str, Any]] = [
        {"task_id": t, "completion": f"```python\n{RIGHT[t]}```"} for t in ("4000", "2876")
    ]
    rows.append({"task_id": "1000_A. Max of three", "completion": "```python\nprint(1)\n```"})
    completions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    metrics = evaluate(*read_inputs(datasets, completions, None), rounds=1, workers=2, core=None)
    assert metrics["pass@1"] == pytest.approx(200 / 3) and metrics["executable"] == 100.0
    assert metrics["eligible_pairs"] == 1  # 2876 has no reference solution to time against
