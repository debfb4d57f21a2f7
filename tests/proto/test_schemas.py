"""The checked-in JSON Schemas match the models; a renamed field is caught."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from corrgrpo_proto import schemas
from corrgrpo_proto.common import ComponentSpec

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "proto" / "schemas"


def test_checked_in_schemas_match_models() -> None:
    assert schemas.drift(SCHEMA_DIR) == [], "run `make schemas` and commit proto/schemas"


def test_no_stale_schema_files() -> None:
    names = {model.__name__ for model in schemas.MODELS}
    assert {p.stem for p in SCHEMA_DIR.glob("*.json")} == names


def test_renamed_field_is_drift(tmp_path: Path) -> None:
    schemas.write(tmp_path)

    class ComponentSpec(BaseModel):  # same name as the real model, one field renamed
        label: str
        min: float | None = Field(description="Smallest value the component takes; null if unbounded")
        max: float | None = Field(description="Largest value the component takes; null if unbounded")
        weight: float = Field(1.0, description="Default weight of the component in `total`")
        description: str = ""

    assert schemas.drift(tmp_path, (ComponentSpec,)) == ["ComponentSpec"]


def test_cli_check_exit_codes(tmp_path: Path) -> None:
    assert schemas.main(["check", str(SCHEMA_DIR)]) == 0
    (tmp_path / "x").mkdir()
    assert schemas.main(["check", str(tmp_path / "x")]) == 1
    assert schemas.main(["bogus"]) == 2


def test_models_validate_as_schemas_say() -> None:
    import jsonschema

    schema = ComponentSpec.model_json_schema()
    jsonschema.validate({"name": "format", "min": 0, "max": 1}, schema)
