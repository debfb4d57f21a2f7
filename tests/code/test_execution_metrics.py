"""`python -m corrgrpo_devtools.execution_metrics`: Executable, Pass@1 and paired-round Efficiency over a
completions file."""

from __future__ import annotations

import json
from pathlib import Path

from corrgrpo_code.problems import humaneval_problems
from corrgrpo_devtools.execution_metrics import evaluate, read_inputs


def test_metrics_over_a_small_completions_file(tmp_path: Path) -> None:
    problems = list(humaneval_problems())[:4]
    completions = [p.reference for p in problems[:2]]  # correct
    completions.append(problems[2].reference.replace("return", "return None and", 1))  # runs, wrong
    completions.append("def nothing(:")  # does not parse
    path = tmp_path / "completions.jsonl"
    rows = [
        {"task_id": p.task_id, "completion": f"```python\n{c}\n```"}
        for p, c in zip(problems, completions, strict=True)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    metrics = evaluate(*read_inputs("humaneval", path, None), rounds=2, workers=2, core=None)
    assert metrics["completions"] == 4 and metrics["errors"] == 0 and metrics["eligible_pairs"] == 2
    assert metrics["pass@1"] == 50.0
    assert metrics["executable"] == 75.0  # HumanEval/2 returning None fails its first assertion: it ran
    assert metrics["efficiency"] in (0.0, 25.0, 50.0, 75.0, 100.0)  # mean of two rounds of 0/50/100 %
    first = evaluate(*read_inputs("humaneval", path, 1), rounds=1, workers=2, core=None)
    assert first["completions"] == 1 and first["pass@1"] == 100.0 and first["eligible_pairs"] == 1
