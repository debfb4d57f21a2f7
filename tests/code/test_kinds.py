"""Problem kinds without HTTP or a sandbox: the wire contract's kind choice, stdout comparison, call-case
expectations, MBPP asserts as a check, and the run key that lets identical programs share a run."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from corrgrpo_code import cache
from corrgrpo_code.cache import store_key
from corrgrpo_code.harness import HarnessResult, encode
from corrgrpo_code.problem_tests import ProblemError, ReturnMatches, call_tests, mbpp_check
from corrgrpo_code.split import split_check
from corrgrpo_code.stdio import outputs_match, tokens_match
from corrgrpo_proto.code import CallCase, CodeItem, MbppProblem
from corrgrpo_sandbox import ExecResult, Limits

STDIN = {"task_id": "s", "stdin_cases": [{"input": "1 2\n", "output": "3\n"}]}


@pytest.mark.parametrize(
    ("problem", "kind"),
    [
        ({"task_id": "c", "entry_point": "f", "test": "def check(c): pass", "reference": ""}, "CodeProblem"),
        (STDIN, "StdinProblem"),
        ({"task_id": "f", "fn_name": "f", "call_cases": [{"args": [1], "expected": 2}]}, "CallProblem"),
        ({"task_id": "m", "test_list": ["assert f(1) == 2"]}, "MbppProblem"),
    ],
)
def test_each_kind_is_chosen_by_its_field(problem: dict, kind: str) -> None:
    assert type(CodeItem(completion="x", problem=problem).problem).__name__ == kind


@pytest.mark.parametrize(
    "problem",
    [
        {"task_id": "none"},  # no kind's field
        {**STDIN, "test_list": ["assert f(1) == 2"]},  # two kinds' fields
    ],
)
def test_a_problem_of_no_kind_gets_one_clear_error(problem: dict) -> None:
    with pytest.raises(ValidationError) as raised:
        CodeItem(completion="x", problem=problem)
    (error,) = raised.value.errors()
    assert error["type"] == "problem_kind" and "`stdin_cases` (stdin)" in error["msg"]


def test_the_json_schema_accepts_and_refuses_what_the_model_does() -> None:
    import jsonschema

    schema = CodeItem.model_json_schema()
    mbpp = {"task_id": "m", "test_list": ["assert f(1) == 2"]}
    accepted = [STDIN, mbpp, {"task_id": "f", "fn_name": "f", "call_cases": [{"args": [], "expected": None}]}]
    for problem in accepted:
        jsonschema.validate({"completion": "x", "problem": problem}, schema)
        CodeItem(completion="x", problem=problem)
    for problem in ({"task_id": "none"}, {**STDIN, **mbpp}, {**STDIN, "stdin_cases": []}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"completion": "x", "problem": problem}, schema)
        with pytest.raises(ValidationError):
            CodeItem(completion="x", problem=problem)


def test_a_kind_with_a_wrong_field_is_refused() -> None:
    with pytest.raises(ValidationError):
        CodeItem(completion="x", problem={**STDIN, "stdin_cases": []})  # at least one case
    with pytest.raises(ValidationError):
        CodeItem(completion="x", problem={**STDIN, "entry_point": "f"})  # a field of another kind


@pytest.mark.parametrize(
    ("got", "want"),
    [
        ("3\n", "3"),
        ("1 2 \r\n3\r\n\n\n", "1 2\n3\n"),  # trailing whitespace, CRLF, trailing blank lines
        ("1    2\n", "1 2\n"),  # tokens, not spacing
        ("0.3333333\n", "0.333333333\n"),  # within 1e-6
        ("1e3\n", "1000.0\n"),
        ("YES\n", "YES\n"),
    ],
)
def test_outputs_that_match(got: str, want: str) -> None:
    assert outputs_match(got, want)


@pytest.mark.parametrize(
    ("got", "want"),
    [
        ("1\n2\n", "1 2\n"),  # lines are kept apart
        ("0.334\n", "0.333\n"),
        ("100000000000000000001\n", "100000000000000000000\n"),  # integers exactly, at any size
        ("yes\n", "YES\n"),
        ("3 4\n", "3\n"),
        ("\n", "0\n"),
        ("1_000\n", "1000\n"),  # float() would take it
        ("nan\n", "nan0\n"),
    ],
)
def test_outputs_that_do_not_match(got: str, want: str) -> None:
    assert not outputs_match(got, want)


def test_tokens_are_numbers_only_when_they_read_as_numbers() -> None:
    assert tokens_match("-0.0000001", "0.0") and tokens_match("+5", "5") and tokens_match("-0", "0")
    # an integer is expected exactly
    assert not tokens_match("-0.0000001", "0") and not tokens_match("5.0", "5")
    assert not tokens_match("inf", "infinity") and not tokens_match("0x10", "16")


def test_call_expectations_accept_tuples_and_the_wrapped_form_only() -> None:
    (test,) = call_tests([CallCase(args=[[1, 2], "a"], expected=[[1, 2]])])
    assert test.call == "candidate(*[[1, 2], 'a'])"
    assert isinstance(test.expect, ReturnMatches)
    assert (
        test.expect.holds(encode([[1, 2]]))
        and test.expect.holds(encode((1, 2)))
        and test.expect.holds(encode([1, 2]))
    )
    assert not test.expect.holds(encode([2, 1])) and not test.expect.holds({"__t": "unencodable", "v": "X"})
    (plain,) = call_tests([CallCase(args=[], expected=3)])
    assert plain.expect.holds(3) and plain.expect.holds(3.0) and not plain.expect.holds([3])


def test_mbpp_asserts_become_one_io_test_each() -> None:
    problem = MbppProblem(
        task_id="m", test_list=["assert add(1, 2) == 3", "assert math.isclose(add(0.1, 0.2), 0.3)"]
    )
    check = mbpp_check(problem)
    assert check.entry_point == "add" and check.test.startswith("def check(candidate):\n")
    tests = split_check(check.test)
    assert tests is not None and [t.call for t in tests] == ["candidate(1, 2)", "candidate(0.1, 0.2)"]
    # math.isclose on a number: decided on data
    assert tests[0].expect is not None and tests[1].expect is not None


def test_mbpp_names_its_function_or_fails_clearly() -> None:
    named = MbppProblem(task_id="m", test_list=["assert len(f([1])) == 1"], entry_point="f")
    assert mbpp_check(named).entry_point == "f"
    # not len
    assert mbpp_check(MbppProblem(task_id="m", test_list=["assert len(g([1])) == 1"])).entry_point == "g"
    with pytest.raises(ProblemError, match="does not parse"):
        mbpp_check(MbppProblem(task_id="m", test_list=["assert f(1) =="]))
    with pytest.raises(ProblemError, match="no function name"):
        mbpp_check(MbppProblem(task_id="m", test_list=["assert 1 == 1"]))


def test_run_keys_cover_program_problem_limits_isolation_and_the_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = store_key("print(1)", "p", Limits(), "bwrap")
    assert key == store_key("print(1)", "p", Limits(), "bwrap")
    others = [
        store_key("print(2)", "p", Limits(), "bwrap"),
        store_key("print(1)", "q", Limits(), "bwrap"),
        store_key("print(1)", "p", Limits(cpu_s=1), "bwrap"),
        store_key("print(1)", "p", Limits(), "unsafe-none"),
    ]
    assert key not in others and len(set(others)) == 4
    monkeypatch.setattr(cache, "MEANING", "another harness")
    assert store_key("print(1)", "p", Limits(), "bwrap") != key


def test_a_stored_verdict_reads_back_as_scoring_uses_it() -> None:
    run = ExecResult(0, None, b"out", b"", b"", False, False, 0.25, 0.5, 1000, "bwrap", None)
    result = HarnessResult("assertion", "io", 2, 3, "test 2: wrong output", run, compiled=True)
    back = HarnessResult.load(result.dump())
    assert (back.stage, back.mode, back.passed, back.total, back.error, back.compiled) == (
        "assertion",
        "io",
        2,
        3,
        "test 2: wrong output",
        True,
    )
    assert back.exec is not None and (back.exec.cpu_s, back.exec.wall_s, back.exec.isolation) == (
        0.25,
        0.5,
        "bwrap",
    )
    assert HarnessResult.load(HarnessResult("syntax", "io", 0, 1, "bad").dump()).exec is None
