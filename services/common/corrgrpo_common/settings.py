"""Service settings, read from environment variables (pydantic-settings). The only place that reads them.

Naming rule: a setting every service has is `CORRGRPO_<NAME>`. A setting of one service is a field
`<service>_<name>` of its subclass, so its variable is `CORRGRPO_<SERVICE>_<NAME>` (a test holds every
declared service to it). Every field has a description: the READMEs' configuration lists are
generated from them (`python -m corrgrpo_devtools.docs`).
"""

from __future__ import annotations

import os
import re

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .store.interface import DEFAULT_MAX_BYTES, DEFAULT_TTL_S, MIN_SECRET_CHARS


def env_name(settings: type[BaseSettings], field: str) -> str:
    """The environment variable a field is read from."""
    return f"{settings.model_config.get('env_prefix', '')}{field}".upper()


def cpu_count() -> int:
    return os.cpu_count() or 1


# What a bearer credential can be and arrive unchanged: visible ASCII, no space (a header's ends are cut).
_TOKEN = re.compile(r"[!-~]+")


def refusal(settings: type[BaseSettings], error: ValidationError) -> str:
    """The one line a service that cannot start on these settings says: each variable and what is wrong
    with it (never its value: `hide_input_in_errors`)."""
    problems = (
        f"{env_name(settings, str(problem['loc'][0])) if problem['loc'] else 'settings'}: "
        f"{problem['msg'].removeprefix('Value error, ')}"
        for problem in error.errors()
    )
    return f"refusing to start: {'; '.join(problems)}"


class ServiceSettings(BaseSettings):
    """Settings every service shares. A service subclasses it for its own (same prefix)."""

    # an error names a variable, never its value: the value may be a secret
    model_config = SettingsConfigDict(
        env_prefix="CORRGRPO_",
        extra="ignore",
        populate_by_name=True,
        hide_input_in_errors=True,
    )

    host: str = Field(
        "127.0.0.1", description="Bind address: loopback unless told otherwise (containers set `0.0.0.0`)"
    )
    port: int = Field(0, description="Bind port; 0: the service's declared port (`--port` overrides both)")
    redis_url: str | None = Field(
        None,
        description="`redis://[:password@]host:port/db`, the password shown as `***` in every message and "
        "log; "
        "unset: an in-memory store (one process, nothing shared)",
    )
    redis_password: SecretStr | None = Field(
        None, description="Redis `AUTH` password when the URL holds none"
    )
    store_secret: SecretStr | None = Field(
        None,
        min_length=MIN_SECRET_CHARS,
        description="HMAC key authenticating every value read back from Redis (forged ones are refused); "
        "required with "
        "`CORRGRPO_REDIS_URL`, the same in every replica: without it the service refuses to start",
    )
    max_body_bytes: int = Field(64 * 1024 * 1024, description="Larger request bodies get 413")
    max_json_depth: int = Field(64, description="Request JSON nested deeper than this gets 422")
    cache_ttl_s: int = Field(24 * 3600, description="How long a scored item is remembered by its id")
    api_token: SecretStr | None = Field(
        None,
        description="When set, every route but /healthz, /readyz, /metrics and the OpenAPI docs requires "
        "`Authorization: Bearer <token>` (401 otherwise), under any route prefix; set but empty: the service "
        "refuses to start",
    )
    max_inflight_items: int = Field(
        4096, description="Items scored at once per process; a batch beyond it gets 429 (0 = no limit)"
    )
    retry_after_s: int = Field(
        1, description="`Retry-After` seconds sent with a 429, and with a 503 at the connection cap"
    )
    max_request_inflight_items: int = Field(
        1024, gt=0, description="Items one request holds at once; a larger batch is scored in chunks"
    )
    max_json_nodes: int = Field(1_000_000, gt=0, description="JSON values in one request body; more get 413")
    max_batch_items: int = Field(
        4096, gt=0, description="Entries in any one JSON array or object (`items`); more get 413"
    )
    store_ttl_s: float = Field(
        DEFAULT_TTL_S, gt=0, description="TTL of a store key written without one: none lives forever"
    )
    memory_store_max_bytes: int = Field(
        DEFAULT_MAX_BYTES,
        gt=0,
        description="In-memory store cap: caches evicted past it, new state refused (503)",
    )
    header_timeout_s: float = Field(
        10, gt=0, description="A connection that has not sent its request headers by then is closed"
    )
    body_timeout_s: float = Field(
        60, gt=0, description="A body still incomplete this long after its headers: connection closed"
    )
    idle_timeout_s: int = Field(5, gt=0, description="An idle keep-alive connection is closed after this")
    max_connections: int = Field(
        1024,
        gt=0,
        description="Open connections per process; one more gets 503 + `Retry-After`, then is closed",
    )
    forwarded_allow_ips: str = Field(
        "127.0.0.1,::1",
        description="Proxies trusted to name the client in `X-Forwarded-For` (comma-separated, `*` any): the "
        "client "
        "address per-client limits count by (uvicorn's `forwarded_allow_ips`)",
    )
    shutdown_grace_s: int = Field(
        10, ge=0, description="On SIGTERM, in-flight requests get this long, then are cancelled"
    )
    log_level: str = Field("INFO", description="Log level: DEBUG, INFO, WARNING, ERROR")
    log_json: bool = Field(True, description="One JSON object per log line (false: plain text)")

    @field_validator("api_token")
    @classmethod
    def _usable_token(cls, token: SecretStr | None) -> SecretStr | None:
        """Set but empty would turn auth on with a secret anyone sends (`Authorization: Bearer`)."""
        if token is not None and not _TOKEN.fullmatch(token.get_secret_value()):
            raise ValueError(
                "set but empty or not a bearer credential (visible ASCII, no spaces): set a secret "
                "(e.g. `openssl rand -hex 32`) or unset it to leave the routes open"
            )
        return token
