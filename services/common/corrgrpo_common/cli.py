"""`python -m corrgrpo_<name> --host H --port P`: the one entrypoint tests and containers run."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from .connections import run_server
from .logs import configure
from .registry import ServiceDeclaration
from .settings import refusal


class StartRefused(RuntimeError):
    """A service's build cannot give what it promises here (e.g. no isolation): one line, exit, no
    traceback."""


def serve(service: ServiceDeclaration, argv: list[str] | None = None) -> None:
    """Parse `--host/--port` (defaults: `CORRGRPO_HOST`/`CORRGRPO_PORT`, else the declared port), build the
    app, serve it."""
    try:
        settings = service.settings()
    except ValidationError as error:
        sys.exit(f"{service.name}: {refusal(service.settings, error)}")
    parser = argparse.ArgumentParser(
        prog=f"python -m {service.module}", description=f"corrgrpo {service.name} service"
    )
    parser.add_argument("--host", default=settings.host, help="bind address (default %(default)s)")
    parser.add_argument(
        "--port", type=int, default=settings.port or service.port, help="port (default %(default)s)"
    )
    args = parser.parse_args(argv)
    settings = settings.model_copy(update={"host": args.host, "port": args.port})
    configure(settings.log_level, settings.log_json)
    try:
        app = service.build(settings)
    except StartRefused as error:
        sys.exit(f"{service.name}: refusing to start: {error}")
    run_server(app, settings)
