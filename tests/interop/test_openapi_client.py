"""A language-neutral client: only `/openapi.json` and plain HTTP, none of our Python models."""

from __future__ import annotations

import httpx
import jsonschema
import pytest

from corrgrpo_testing.servers import start_service

GT = '<think>.</think>\n<tool_call>\n{"name": "f", "parameters": {"x": 1}}\n</tool_call>'


def resolved(schema: dict, spec: dict) -> dict:
    """The schema with `#/components/...` references resolvable, as a generated client would see it."""
    return {**schema, "components": spec["components"]}


def test_a_batch_scored_from_the_openapi_document_alone() -> None:
    with start_service("toolcall") as service:
        spec = httpx.get(f"{service.url}/openapi.json").json()
        operation = spec["paths"]["/v1/score"]["post"]
        request_schema = resolved(operation["requestBody"]["content"]["application/json"]["schema"], spec)
        response_schema = resolved(
            operation["responses"]["200"]["content"]["application/json"]["schema"], spec
        )
        body = {
            "items": [
                {"id": "a", "completion": GT, "ground_truth": GT},
                {"id": "b", "completion": "nope", "ground_truth": GT},
            ]
        }
        jsonschema.validate(body, request_schema)
        answer = httpx.post(f"{service.url}/v1/score", json=body).json()
        jsonschema.validate(answer, response_schema)
        assert [r["id"] for r in answer["results"]] == ["a", "b"]
        assert answer["results"][0]["total"] > answer["results"][1]["total"]
        bad = {"items": [{"completion": GT}]}
        with pytest.raises(jsonschema.ValidationError, match="ground_truth"):
            jsonschema.validate(bad, request_schema)
        assert httpx.post(f"{service.url}/v1/score", json=bad).status_code == 422


def test_code_item_schema_says_exactly_one_of_problem_task_id_and_problem_from() -> None:
    problem = {"task_id": "t", "entry_point": "f", "test": "def check(c): pass", "reference": "def f(): pass"}
    with start_service("code") as service:
        spec = httpx.get(f"{service.url}/openapi.json").json()
        operation = spec["paths"]["/v1/score"]["post"]
        request_schema = resolved(operation["requestBody"]["content"]["application/json"]["schema"], spec)
        for item in (
            {"completion": "c", "problem": problem},
            {"completion": "c", "task_id": "t", "problem": None},
        ):
            jsonschema.validate({"items": [item]}, request_schema)
            assert httpx.post(f"{service.url}/v1/score", json={"items": [item]}).status_code == 200
        group = {"items": [{"completion": "c", "problem": problem}, {"completion": "d", "problem_from": 0}]}
        # a group's problem once: the second item names the first's
        jsonschema.validate(group, request_schema)
        assert httpx.post(f"{service.url}/v1/score", json=group).status_code == 200
        for item in ({"completion": "c"}, {"completion": "c", "task_id": "t", "problem": problem}):
            errors = jsonschema.Draft202012Validator(request_schema).iter_errors({"items": [item]})
            assert [error.validator for error in errors] == ["oneOf"]
            assert httpx.post(f"{service.url}/v1/score", json={"items": [item]}).status_code == 422
