"""JSON Schemas of the wire models, checked in under `proto/schemas/`.

`python -m corrgrpo_proto.schemas write DIR` regenerates them (`make schemas`);
`python -m corrgrpo_proto.schemas check DIR` exits 1 when a file and its model drift.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel

import corrgrpo_proto


def wire_modules() -> list[ModuleType]:
    """This package's modules that list their models in SCHEMA_MODELS (a new service's needs no line here)."""
    names = sorted(info.name for info in pkgutil.iter_modules(corrgrpo_proto.__path__))
    modules = [importlib.import_module(f"corrgrpo_proto.{name}") for name in names]
    return [module for module in modules if hasattr(module, "SCHEMA_MODELS")]


MODELS: tuple[type[BaseModel], ...] = tuple(
    model for module in wire_modules() for model in module.SCHEMA_MODELS
)


def render(model: type[BaseModel]) -> str:
    """The schema file's exact text for `model`."""
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"


def drift(directory: Path, models: tuple[type[BaseModel], ...] = MODELS) -> list[str]:
    """Names of the models whose file in `directory` is missing or differs from the model."""
    stale = []
    for model in models:
        path = directory / f"{model.__name__}.json"
        if not path.exists() or path.read_text() != render(model):
            stale.append(model.__name__)
    return stale


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        (directory / f"{model.__name__}.json").write_text(render(model))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        print("usage: python -m corrgrpo_proto.schemas write|check DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1])
    if argv[0] == "write":
        write(directory)
        return 0
    stale = drift(directory)
    for name in stale:
        print(f"schema drift: {directory / name}.json (run `make schemas`)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
