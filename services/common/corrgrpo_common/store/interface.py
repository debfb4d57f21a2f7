"""The async `Store` interface both stores implement, and the defaults the settings take from it."""

from __future__ import annotations

import abc
from collections.abc import Sequence

DEFAULT_TTL_S = 7 * 24 * 3600.0
"""TTL of a key written without one: no key any service writes lives forever, in memory or in Redis."""
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MIN_SECRET_CHARS = 16


class Store(abc.ABC):
    """Async bytes-to-bytes map with per-key expiry; `ttl_s=None` means the store's `default_ttl_s`.

    `evictable=True` marks a cache entry (idempotency results, measured timings): under memory
    pressure it may be dropped. Everything else is state (episodes, locks) and is never evicted.
    """

    kind: str
    default_ttl_s: float = DEFAULT_TTL_S

    def ttl(self, ttl_s: float | None) -> float:
        return self.default_ttl_s if ttl_s is None else ttl_s

    @abc.abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]: ...

    @abc.abstractmethod
    async def set(self, key: str, value: bytes, ttl_s: float | None = None, *, evictable: bool = False) -> None: ...

    @abc.abstractmethod
    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False) -> None: ...

    @abc.abstractmethod
    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        """Set `key` only if it is absent; True when this call set it (locks: never refused for size)."""

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Remove `key`; True when it existed."""

    @abc.abstractmethod
    async def lease(self, member: str, limits: dict[str, int], ttl_s: float) -> str | None:
        """Hold `member` in every group of `limits` (group → most live members) for `ttl_s` when each has room (or
        holds it already); else hold nothing and return the first full group, in `limits`' order."""

    @abc.abstractmethod
    async def renew(self, member: str, groups: Sequence[str], ttl_s: float) -> None:
        """Extend `member`'s hold in `groups` to `ttl_s` from now (a lease not held stays not held)."""

    @abc.abstractmethod
    async def release(self, member: str, groups: Sequence[str]) -> None:
        """End `member`'s hold in `groups`; a lease also ends `ttl_s` after it was last taken or renewed."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the store answers."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass
