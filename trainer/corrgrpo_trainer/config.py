"""A run's config: the YAML file with the command line's overrides, and the services it names, checked first.

Every command-line error is one of two exceptions that `cli.main` prints as one line (exit status 2):
`InputError` (a file or value the user gave is wrong) and `ServicesDown` (a configured service does not answer).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from corrgrpo_proto import RewardClient, RewardServiceError, RewardServiceUnavailable

START_SERVICES = "start the services with `python -m corrgrpo_service up` (local processes) or `docker compose up -d`"


class InputError(ValueError):
    """Malformed command-line input; main() prints it as one line and exits 2."""


class ServicesDown(RuntimeError):
    """A configured service does not answer; main() prints it as one line and exits 2."""


def read_config(path: str, overrides: argparse.Namespace, required: Sequence[str] = ("domain", "services")) -> dict[str, Any]:
    """The YAML config with the command line's overrides applied."""
    try:
        config = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise InputError(f"cannot read the config {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(config, dict) or any(key not in config for key in required):
        keys = " and ".join(f"`{key}`" for key in required)
        raise InputError(f"{path}: expected a mapping with at least {keys} (see trainer/configs/)")
    if overrides.model:
        config["model"] = overrides.model
    if getattr(overrides, "max_steps", None):
        config.setdefault("trl", {})["max_steps"] = overrides.max_steps
    if getattr(overrides, "output_dir", None):
        config.setdefault("trl", {})["output_dir"] = overrides.output_dir
    return config


def check_services(config: dict[str, Any]) -> None:
    """Every configured service answers `/healthz` at once, or ServicesDown naming each URL that did not (so a
    missing service is said in one line before a model is loaded, not after retries as a traceback)."""
    down = []
    for name, spec in config["services"].items():
        url = spec["url"]
        with RewardClient(url, retries=0, timeout=10) as client:
            try:
                client.request("GET", "/healthz")
            except RewardServiceUnavailable as error:
                down.append(f"the {name} service at {url} ({error.reason})")
            except RewardServiceError as error:
                down.append(f"the {name} service at {url} (/healthz: HTTP {error.status}, not a corrgrpo service?)")
    if down:
        raise ServicesDown(" ".join(f"no answer from {', '.join(down)}; {START_SERVICES}".split()))
