"""`make_store`: the one place a service's store is built from its settings."""

from __future__ import annotations

from typing import Protocol

from pydantic import SecretStr

from .errors import StoreMisconfigured
from .interface import MIN_SECRET_CHARS, Store
from .memory import MemoryStore
from .redis_store import RedisStore


class StoreSettings(Protocol):
    """The settings `make_store` reads (`ServiceSettings` has them), named here: settings.py imports this
    package's defaults, so this package does not import it back."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def redis_password(self) -> SecretStr | None: ...
    @property
    def store_secret(self) -> SecretStr | None: ...
    @property
    def store_ttl_s(self) -> float: ...
    @property
    def memory_store_max_bytes(self) -> int: ...


def make_store(settings: StoreSettings) -> Store:
    """The store the settings configure: Redis when a URL is set, else the in-memory store (capped). Every
    service builds its store here, so no store setting can be left out. Redis without `CORRGRPO_STORE_SECRET`
    is refused: a per-process secret would make replicas refuse each other's values, no secret would trust
    whoever writes."""
    if not settings.redis_url:
        return MemoryStore(settings.store_ttl_s, settings.memory_store_max_bytes)
    if settings.store_secret is None:
        raise StoreMisconfigured(
            "CORRGRPO_REDIS_URL is set but CORRGRPO_STORE_SECRET is not: every replica needs the same secret "
            f"(at least {MIN_SECRET_CHARS} characters, e.g. `openssl rand -hex 32`) to authenticate what it "
            f"reads back"
        )
    password = settings.redis_password.get_secret_value() if settings.redis_password else None
    secret = settings.store_secret.get_secret_value()
    return RedisStore(
        settings.redis_url, secret=secret, default_ttl_s=settings.store_ttl_s, password=password
    )
