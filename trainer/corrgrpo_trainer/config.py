"""A run's config: the YAML file and the command line's `--set key.path=value` overrides, checked and typed
(config_shape.py) before anything runs.

A config is an RL config (`train`, `run`) or a warm-up config (`sft`). Its `domain` picks the shape of
`dataset`. Every problem is one line naming the key, where it came from (the file or the `--set`) and the
closest valid name; `trl` is checked against the installed TRL's `GRPOConfig` / `SFTConfig` fields. Input
paths in the file are resolved against the file's folder, output paths (`trl.output_dir`, `run_dir`) and paths
given with `--set` against the working directory.

Every command-line error is one of two exceptions that `cli.main` prints as one line (exit status 2):
`InputError` (a file or value the user gave is wrong) and `ServicesDown` (a configured service does not
answer).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import operator
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from .config_shape import SHAPES, Config, Domain, Kind
from .models import EMBEDDED, TINY

START_SERVICES = (
    "start the services with `python -m corrgrpo_devtools up` (local processes) or `docker compose up -d`"
)


class InputError(ValueError):
    """Malformed command-line input; main() prints it as one line and exits 2."""


class ServicesDown(RuntimeError):
    """A configured service does not answer; main() prints it as one line and exits 2."""


# trl keys set elsewhere in the config
TRL_RESERVED = {"rl": {"reward_weights": "services.<name>.weights"}, "warmup": {}}
# Keys holding paths. Outputs go under the working folder, so a copied config writes where it is run.
# Inputs are read beside the file: `warmup` always, the others when they look like a path or exist there.
OUTPUT_PATHS = {("trl", "output_dir"), ("run_dir",)}
INPUT_PATHS = {
    ("warmup",),
    ("model",),
    ("dataset", "path"),
    ("dataset", "exclude_prompts_of"),
    ("evaluation", "path"),
}
ALWAYS_PATHS = OUTPUT_PATHS | {("warmup",)}
DATA_FILE_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv", ".gz")  # a file, never a hub id
TOKEN_ENV = "CORRGRPO_API_TOKEN"  # the services' own variable: one shell runs both with the same token
TOKEN_FILE = ("client", "token_file")  # under each service
Sets = dict[tuple[str, ...], str]  # a key set with --set -> the --set


# ---------------------------------------------------------------- reading


def read_config(path: str | Path, kind: Kind = "rl", overrides: Sequence[str] = ()) -> Config:
    """The config at `path` with `overrides` (`key.path=value`, the value read as YAML) applied, checked, with
    its defaults filled in. An InputError naming the first problem otherwise."""
    source = Path(path)
    try:
        raw = yaml.safe_load(source.read_text())
    except OSError as error:
        raise InputError(f"cannot read the config {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping of keys (see trainer/configs/)")
    default_output_dir(raw, kind)  # before the paths resolve: it lands under the working folder
    resolve_paths(raw, source.resolve().parent, Path.cwd())
    sets = {}
    for override in overrides:
        key, value = parse_override(override)
        assign(raw, key, value, override)
        sets[key] = override
    return parse_config(raw, kind, str(path), sets)


def parse_config(
    raw: dict[str, Any], kind: Kind = "rl", source: str = "the config", sets: Sets | None = None
) -> Config:
    """`raw` (a config as YAML reads it, paths resolved) checked and typed; `read_config` without the file."""
    default_output_dir(raw, kind)
    return check(raw, kind, source, sets or {})


def default_output_dir(raw: dict[str, Any], kind: Kind) -> None:
    if isinstance(raw.setdefault("trl", {}), dict):
        suffix = "_sft" if kind == "warmup" else ""
        raw["trl"].setdefault("output_dir", f"trainer_out/{raw.get('domain')}{suffix}")


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """`key.path=value` as the key's parts and the value read as YAML (a path resolved against the cwd)."""
    key, sep, value = text.partition("=")
    if not sep or not key or "" in key.split("."):
        raise InputError(f"--set {text}: expected KEY.PATH=VALUE, e.g. --set estimator=grpo")
    try:
        parsed = yaml.safe_load(value) if value else None
    except yaml.YAMLError as error:
        raise InputError(f"--set {text}: the value is not YAML: {str(error).splitlines()[0]}") from None
    parts = tuple(key.split("."))
    holder: dict[str, Any] = {}
    assign(holder, parts, parsed, text)
    resolve_paths(holder, Path.cwd(), Path.cwd())
    return parts, functools.reduce(operator.getitem, parts, holder)


def assign(raw: dict[str, Any], key: tuple[str, ...], value: Any, origin: str) -> None:
    node = raw
    for depth, part in enumerate(key[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise InputError(f"--set {origin}: {'.'.join(key[: depth + 1])} is not a mapping")
    node[key[-1]] = value


def resolve_paths(raw: dict[str, Any], base: Path, outputs: Path) -> None:
    """Make the path keys of `raw` absolute, in place: inputs against `base`, outputs against `outputs` (hub
    ids, URLs and model names stay)."""
    for key in OUTPUT_PATHS | INPUT_PATHS:
        parent = raw
        for part in key[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or key[-1] not in parent:
            continue
        value, against = parent[key[-1]], outputs if key in OUTPUT_PATHS else base
        always = key in ALWAYS_PATHS
        if isinstance(value, str):
            parent[key[-1]] = resolve_path(value, against, always)
        elif isinstance(value, list):
            parent[key[-1]] = [resolve_path(v, against, always) if isinstance(v, str) else v for v in value]
    services = raw.get("services")
    for spec in services.values() if isinstance(services, dict) else ():
        client = spec.get(TOKEN_FILE[0]) if isinstance(spec, dict) else None
        if isinstance(client, dict) and isinstance(client.get(TOKEN_FILE[1]), str):
            client[TOKEN_FILE[1]] = resolve_path(client[TOKEN_FILE[1]], base, always=True)


def resolve_path(value: str, base: Path, always: bool) -> str:
    if "://" in value or value in (
        EMBEDDED,
        TINY,
    ):  # a URL or a model name, even beside a folder of that name
        return value
    path = Path(value).expanduser()
    local = (
        value.startswith(("/", "./", "../", "~"))
        or value.endswith(DATA_FILE_SUFFIXES)
        or (base / path).exists()
    )
    if always or local:
        return str((base / path).resolve())
    return value


# ---------------------------------------------------------------- checking


def check(raw: dict[str, Any], kind: Kind, source: str, sets: Sets) -> Config:
    """`raw` validated against its domain's shape and TRL's config class, defaults filled in."""
    shapes = SHAPES[kind]
    domain = raw.get("domain")
    if not isinstance(domain, str) or domain not in shapes:
        where = origin(("domain",), source, sets)
        got = "missing" if domain is None else f"{domain!r} is not one of {', '.join(shapes)}"
        raise InputError(f"{where}: domain: {got}{suggestion(domain, list(shapes))}")
    shape = shapes[Domain(domain)]
    try:
        config = shape.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        raise InputError(problem(first, shape, source, sets)) from None
    check_local_sources(config, source, sets)
    config.trl = check_trl(config.trl, kind, source, sets)
    return typing.cast(Config, config)


def check_local_sources(config: Config, source: str, sets: Sets) -> None:
    """Every dataset given as a local path exists (hub ids and URLs are read later, by data.py)."""
    for name, section in config.sections.items():
        for key, values in section.sources.items():
            for value in values:
                if value.startswith("/") and not Path(value).exists():
                    where = origin((name, key), source, sets)
                    raise InputError(f"{where}: {name}.{key}: no such file or folder: {value}")


def trl_class(kind: Kind) -> type:
    if kind == "rl":
        from trl import GRPOConfig

        return GRPOConfig
    from trl import SFTConfig

    return SFTConfig


def check_trl(values: dict[str, Any], kind: Kind, source: str, sets: Sets) -> dict[str, Any]:
    """The `trl` section with every key a field of TRL's config class and every value of the field's type."""
    config_class = trl_class(kind)
    hints = typing.get_type_hints(config_class)
    fields = [f.name for f in dataclasses.fields(config_class) if f.init]
    checked = {}
    for key, value in values.items():
        where = origin(("trl", key), source, sets)
        if key in TRL_RESERVED[kind]:
            raise InputError(f"{where}: trl.{key} is set by {TRL_RESERVED[kind][key]}")
        if key not in fields:
            hint = suggestion(key, fields, prefix="trl.")
            raise InputError(
                f"{where}: unknown key 'trl.{key}' (not a trl.{config_class.__name__} field){hint}"
            )
        adapter = TypeAdapter(hints[key])
        try:
            validated = adapter.validate_python(value)
            # `logging_steps: 1` stays 1, not the field's 1.0; YAML's string "1e-5" becomes a float
            checked[key] = value if validated == value else adapter.dump_python(validated, mode="json")
        except ValidationError as error:
            first = error.errors()[0]
            raise InputError(f"{where}: trl.{key}: {first['msg']} (got {value!r})") from None
    return checked


def problem(error: Any, shape: type[BaseModel], source: str, sets: Sets) -> str:
    """One pydantic error as the line the user reads."""
    loc = tuple(str(part) for part in error["loc"])
    where, key = origin(loc, source, sets), ".".join(loc)
    if error["type"] == "extra_forbidden" and loc[-2:] == ("client", "token"):
        return (
            f"{where}: {key}: a token is never written in a config (the run directory keeps the config): set "
            f"${TOKEN_ENV} or name a file holding it with {key}_file"
        )
    if error["type"] == "extra_forbidden":
        valid = keys_at(shape, loc[:-1])
        parent = ".".join(loc[:-1])
        return (
            f"{where}: unknown key '{key}'{suggestion(loc[-1], valid, prefix=f'{parent}.' if parent else '')}"
        )
    if error["type"] == "missing":
        return f"{where}: {key}: missing (required)"
    if error["type"] == "literal_error":
        expected = [value.strip("'") for value in error["ctx"]["expected"].replace(" or ", ", ").split(", ")]
        hint = suggestion(error["input"], expected)
        return f"{where}: {key}: {error['input']!r} is not one of {', '.join(expected)}{hint}"
    return f"{where}: {key}: {error['msg']} (got {error['input']!r})"


def keys_at(shape: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The keys the model accepts at `loc` (where an unknown key was found)."""
    annotation: Any = shape
    for part in loc:
        annotation = model_or_container(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            annotation = annotation.model_fields[part].annotation
        else:  # a dict's value or a list's item
            annotation = typing.get_args(annotation)[-1]
    found = model_or_container(annotation)
    return list(found.model_fields) if isinstance(found, type) and issubclass(found, BaseModel) else []


def model_or_container(annotation: Any) -> Any:
    """The model, dict or list inside an optional or union annotation."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) in (dict, list):
            return candidate
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return annotation


def origin(loc: tuple[str, ...], source: str, sets: Sets) -> str:
    """Where the value at `loc` came from: the `--set` that wrote it (or a key above it), else the file."""
    for key, text in sets.items():
        if loc[: len(key)] == key or key[: len(loc)] == loc:
            return f"--set {text}"
    return source


def suggestion(word: Any, valid: Sequence[str], prefix: str = "") -> str:
    """'; did you mean ...?' with the closest valid names (two when they are about as close), or ''."""
    if not isinstance(word, str):
        return ""
    ratios = sorted(
        ((difflib.SequenceMatcher(None, word, name).ratio(), name) for name in valid), reverse=True
    )
    close = [name for ratio, name in ratios[:2] if ratio >= max(0.6, ratios[0][0] - 0.05)]
    return f"; did you mean {' or '.join(repr(prefix + name) for name in close)}?" if close else ""
