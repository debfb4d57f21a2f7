"""Wire models of the code service (`corrgrpo_code`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Discriminator, Field, Tag, model_validator

from .common import ScoreRequest, WireModel
from .items import LABEL_KEY

NOT_NULL = {"not": {"type": "null"}}
PROBLEM_FIELDS = ("problem", "task_id", "problem_from")  # an item names its problem by exactly one


class CodeProblem(WireModel):
    """A check-function problem (HumanEval, LeetCodeDataset): `check(candidate)` judges the function."""

    task_id: str
    prompt: str = Field("", description="Prelude run before the solution: imports and helpers")
    entry_point: str = Field(
        description="Expression naming the function under test, e.g. `Solution().twoSum`"
    )
    test: str = Field(description="Source defining `check(candidate)`")
    reference: str = Field(description="Reference solution (source), for AST similarity and efficiency")


TIME_LIMIT = Field(
    None, gt=0, description="Seconds of CPU per case (stdin) or per run (calls); capped by the service"
)
OPTIONAL_REFERENCE = Field(
    None, description="Reference solution: AST similarity and efficiency are 0 without one"
)


class StdinCase(WireModel):
    input: str = Field(description="Bytes fed to the program's stdin (UTF-8)")
    output: str = Field(
        description="Expected stdout by lines and tokens: an integer exactly, "
        "a fraction or exponent within 1e-6"
    )


class StdinProblem(WireModel):
    """Stdin/stdout cases (LiveCodeBench, CodeContests, TACO/APPS): the program reads stdin, writes stdout."""

    task_id: str
    stdin_cases: list[StdinCase] = Field(min_length=1)
    time_limit_s: float | None = TIME_LIMIT
    reference: str | None = OPTIONAL_REFERENCE


class CallCase(WireModel):
    args: list[Any] = Field(description="Positional arguments (JSON data)")
    expected: Any = Field(
        description="Expected return value; a list also matches a tuple, or its only element"
    )


class CallProblem(WireModel):
    """Call-based cases (TACO/APPS `fn_name`, LiveCodeBench functional): each case calls the function once."""

    task_id: str
    prompt: str = Field("", description="Prelude run before the solution: imports and helpers")
    fn_name: str = Field(
        description="The function under test: a name, or an expression such as `Solution().twoSum`"
    )
    call_cases: list[CallCase] = Field(min_length=1)
    time_limit_s: float | None = TIME_LIMIT
    reference: str | None = OPTIONAL_REFERENCE


class MbppProblem(WireModel):
    """MBPP: `assert` statements that call the function by name."""

    task_id: str
    test_list: list[str] = Field(min_length=1, description="Statements such as `assert add(1, 2) == 3`")
    test_setup_code: str = Field("", description="Run before the solution and the asserts")
    entry_point: str | None = Field(
        None, description="The function's name; default: the first call in the asserts"
    )
    reference: str | None = OPTIONAL_REFERENCE


KIND_FIELDS = {"test": "check", "stdin_cases": "stdin", "call_cases": "call", "test_list": "mbpp"}
KIND_ERROR = "a problem needs exactly one of " + ", ".join(
    f"`{field}` ({kind})" for field, kind in KIND_FIELDS.items()
)


def problem_kind(value: Any) -> str | None:
    """The kind a problem's fields name (one of KIND_FIELDS' keys, and only one); None: it matches no kind."""
    fields = value.keys() if isinstance(value, dict) else [f for f in KIND_FIELDS if hasattr(value, f)]
    kinds = [kind for field, kind in KIND_FIELDS.items() if field in fields]
    return kinds[0] if len(kinds) == 1 else None


Problem = Annotated[
    Annotated[CodeProblem, Tag("check")]
    | Annotated[StdinProblem, Tag("stdin")]
    | Annotated[CallProblem, Tag("call")]
    | Annotated[MbppProblem, Tag("mbpp")],
    Discriminator(problem_kind, custom_error_type="problem_kind", custom_error_message=KIND_ERROR),
]
AnyProblem = CodeProblem | StdinProblem | CallProblem | MbppProblem


class CodeItem(WireModel):
    """One completion to score against a problem given inline, by `task_id` of a loaded dataset, or (in a
    `/v1/score` request) by `problem_from`: a group's rollouts send their problem once, not once per
    rollout."""

    model_config = ConfigDict(
        json_schema_extra={
            LABEL_KEY: "task_id",
            "oneOf": [
                {
                    "required": [name],
                    "properties": {f: NOT_NULL if f == name else {"type": "null"} for f in PROBLEM_FIELDS},
                }
                for name in PROBLEM_FIELDS
            ],
        }
    )

    id: str | None = None
    completion: str = Field(description="The model's full response text")
    problem: Problem | None = None
    task_id: str | None = Field(None, description="Refers to a problem loaded at start-up")
    problem_from: int | None = Field(
        None,
        ge=0,
        description="Index, in the same request, of an earlier item whose inline `problem` this one shares",
    )

    @model_validator(mode="after")
    def _one_problem(self) -> CodeItem:
        # the schema's `oneOf` says the same
        if sum(getattr(self, name) is not None for name in PROBLEM_FIELDS) != 1:
            raise ValueError("give exactly one of `problem`, `task_id` and `problem_from`")
        return self


class CodeScoreRequest(ScoreRequest[CodeItem]):
    @model_validator(mode="after")
    def _shared_problems(self) -> CodeScoreRequest:
        """Each `problem_from` replaced by the problem it names (one object, parsed and validated once): past
        this point an item is the same as one sent with its problem inline, idempotency key included."""
        for index, item in enumerate(self.items):
            if item.problem_from is None:
                continue
            source = item.problem_from
            if source >= index or self.items[source].problem is None:
                raise ValueError(
                    f"items.{index}.problem_from: {source} is not an earlier item with an inline problem"
                )
            item.problem, item.problem_from = self.items[source].problem, None
        return self


SCHEMA_MODELS = (
    CodeItem,
    CodeScoreRequest,
)
