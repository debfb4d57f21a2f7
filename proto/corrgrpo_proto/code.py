"""Wire models of the code service (`corrgrpo_code`)."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from .common import ScoreRequest, WireModel
from .items import LABEL_KEY

NOT_NULL = {"not": {"type": "null"}}


class CodeProblem(WireModel):
    """A LeetCodeDataset/HumanEval-style problem, sent inline."""

    task_id: str
    prompt: str = Field("", description="Prelude run before the solution: imports and helpers")
    entry_point: str = Field(description="Expression naming the function under test, e.g. `Solution().twoSum`")
    test: str = Field(description="Source defining `check(candidate)`")
    reference: str = Field(description="Reference solution (source), for AST similarity and efficiency")


class CodeItem(WireModel):
    """One completion to score against a problem given inline or by `task_id` of a loaded dataset."""

    model_config = ConfigDict(
        json_schema_extra={
            LABEL_KEY: "task_id",
            "oneOf": [
                {"required": ["problem"], "properties": {"problem": NOT_NULL, "task_id": {"type": "null"}}},
                {"required": ["task_id"], "properties": {"task_id": NOT_NULL, "problem": {"type": "null"}}},
            ],
        }
    )

    id: str | None = None
    completion: str = Field(description="The model's full response text")
    problem: CodeProblem | None = None
    task_id: str | None = Field(None, description="Refers to a problem loaded at start-up")

    @model_validator(mode="after")
    def _one_problem(self) -> CodeItem:
        if (self.problem is None) == (self.task_id is None):  # the schema's `oneOf` says the same
            raise ValueError("give exactly one of `problem` and `task_id`")
        return self


class CodeScoreRequest(ScoreRequest[CodeItem]):
    pass


SCHEMA_MODELS = (
    CodeItem,
    CodeScoreRequest,
)
