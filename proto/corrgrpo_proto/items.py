"""Generic items: a dataset row's service fields plus `completion`, for any service.

A service's item schema is all a client needs: the item's fields are its properties, and `x-corrgrpo-label`
names the field that a bare-string label fills (OpenRLHF's `labels`, verl's `ground_truth`; `task_id` for
code, `ground_truth` for tool calls). A client picks those fields from its row, adds `completion` and leaves
validation to the service, as NeMo Gym's agents do with its resources servers (request = row + response).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LABEL_KEY = "x-corrgrpo-label"
# problem_from: the client's, within one request
NOT_FROM_ROWS = frozenset({"id", "completion", "problem_from"})


def _resolve(schema: Mapping[str, Any], definitions: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    return definitions[ref.rsplit("/", 1)[-1]] if ref else schema


@dataclass(frozen=True)
class ItemShape:
    """The fields of a service's item (other than `id` and `completion`) and the one a bare label fills."""

    fields: frozenset[str]
    label: str | None = None

    @classmethod
    def of_schema(cls, schema: Mapping[str, Any]) -> ItemShape:
        """From an item's JSON Schema (`Model.model_json_schema()`)."""
        return cls(frozenset(schema.get("properties", {})) - NOT_FROM_ROWS, schema.get(LABEL_KEY))

    @classmethod
    def of_openapi(cls, document: Mapping[str, Any]) -> ItemShape:
        """From a service's `/openapi.json`: the item type of `POST /v1/score`."""
        definitions = document["components"]["schemas"]
        body = document["paths"]["/v1/score"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        request = _resolve(body, definitions)
        return cls.of_schema(_resolve(request["properties"]["items"]["items"], definitions))

    def item(self, completion: str, row: Mapping[str, Any]) -> dict[str, Any]:
        """The wire item: the row's values of the item's fields (None left out), and `completion`."""
        return {
            **{key: row[key] for key in sorted(self.fields) if row.get(key) is not None},
            "completion": completion,
        }

    def label_fields(self, label: Any) -> dict[str, Any]:
        """The item fields a label carries: a JSON object (or its text) as it is. A bare string fills `label`.

        ValueError when the label is a bare value and the service declares no label field.
        """
        if isinstance(label, Mapping):
            return dict(label)
        # no other text is an object: never parsed
        if isinstance(label, str) and label.lstrip().startswith("{"):
            try:
                parsed = json.loads(label)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                return parsed
        if self.label is None:
            raise ValueError(
                f"a label here must be a JSON object of item fields ({', '.join(sorted(self.fields))})"
            )
        return {self.label: label}
