"""`python -m corrgrpo_devtools.docs [--check]`: the READMEs' configuration lists, from the `Field`
descriptions.

Each list lies between `<!-- settings:begin -->` and `<!-- settings:end -->`: the kit's shared settings
in services/common/README.md, each declared service's own ones in its folder's README.md. Without
`--check` the lists are rewritten. With it, the command lists the READMEs that drifted and exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

import corrgrpo_common
from corrgrpo_common.registry import declared
from corrgrpo_common.settings import ServiceSettings, env_name

BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"
BLOCK = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
WIDTH = 120  # the Markdown line limit tests/test_docs.py holds


def shown_default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return f"`{getattr(info.default_factory, '__name__', 'computed')}()`"
    value: Any = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def table(settings: type[ServiceSettings], fields: list[str]) -> str:
    """A Markdown list of `fields`, one `- `VARIABLE` = default: description` item each, wrapped at WIDTH."""
    items = []
    for field in fields:
        info = settings.model_fields[field]
        if not info.description:
            raise ValueError(f"{settings.__name__}.{field} has no description: the docs are made from it")
        item = f"- `{env_name(settings, field)}` = {shown_default(info)}: {info.description}"
        items.append(
            textwrap.fill(item, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
        )
    return "\n".join([BEGIN, *items, END])


def own_fields(settings: type[ServiceSettings]) -> list[str]:
    return [name for name in settings.model_fields if name not in ServiceSettings.model_fields]


def tables() -> dict[Path, str]:
    """README path → the settings list it must hold: the kit's shared settings, then each declared
    service's own."""
    kit = Path(corrgrpo_common.__file__).resolve().parents[1] / "README.md"
    wanted = {kit: table(ServiceSettings, list(ServiceSettings.model_fields))}
    for service in declared().values():
        folder = (
            Path(importlib.import_module(service.settings.__module__).__file__ or "").resolve().parents[1]
        )
        wanted[folder / "README.md"] = table(service.settings, own_fields(service.settings))
    return wanted


def rewritten(text: str, block: str, path: Path) -> str:
    if len(BLOCK.findall(text)) != 1:
        raise ValueError(f"{path} needs exactly one {BEGIN} ... {END} block for its configuration list")
    return BLOCK.sub(lambda _: block, text)


def drifted(write: bool) -> list[Path]:
    """The READMEs whose list differs from the settings (rewritten first when `write`)."""
    stale = []
    for path, block in tables().items():
        text = path.read_text()
        fresh = rewritten(text, block, path)
        if fresh != text:
            stale.append(path)
            if write:
                path.write_text(fresh)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m corrgrpo_devtools.docs", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="only report READMEs whose lists drifted (exit 1)"
    )
    args = parser.parse_args(argv)
    stale = drifted(write=not args.check)
    for path in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
