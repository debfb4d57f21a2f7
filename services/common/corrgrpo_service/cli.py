"""`python -m corrgrpo_<name> --host H --port P`: the one entrypoint tests and containers run."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

import uvicorn
from fastapi import FastAPI

from .logs import configure
from .settings import ServiceSettings

SettingsT = TypeVar("SettingsT", bound=ServiceSettings)


def serve(
    name: str,
    build: Callable[[SettingsT], FastAPI],
    settings_type: type[SettingsT],
    default_port: int,
    argv: list[str] | None = None,
) -> None:
    """Parse `--host/--port` (defaults: `CORRGRPO_HOST`/`CORRGRPO_PORT`), build the app, serve it."""
    settings = settings_type()
    parser = argparse.ArgumentParser(prog=f"python -m corrgrpo_{name}", description=f"corrgrpo {name} service")
    parser.add_argument("--host", default=settings.host, help="bind address (default %(default)s)")
    parser.add_argument("--port", type=int, default=settings.port or default_port, help="port (default %(default)s)")
    args = parser.parse_args(argv)
    settings = settings.model_copy(update={"host": args.host, "port": args.port})
    configure(settings.log_level, settings.log_json)
    uvicorn.run(build(settings), host=settings.host, port=settings.port, log_config=None, access_log=False)
