"""The async `Store` interface both stores implement, and the defaults the settings take from it."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import NamedTuple

DEFAULT_TTL_S = 7 * 24 * 3600.0
"""TTL of a key written without one: no key any service writes lives forever, in memory or in Redis."""
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MIN_SECRET_CHARS = 16


class Claim(NamedTuple):
    """What a lease holds in one group: `amount` (1 for a count, bytes for a size) of the group's `limit`."""

    amount: int
    limit: int


class Versioned(NamedTuple):
    """A state value and its version: 1 when first written, one more at each write."""

    value: bytes
    version: int


class Store(abc.ABC):
    """Async bytes-to-bytes map with per-key expiry; `ttl_s=None` means the store's `default_ttl_s`.

    `evictable=True` marks a cache entry (idempotency results, measured timings): under memory
    pressure it may be dropped. Everything else is state (episodes, locks) and is never evicted.

    State that must never go back to an older value (an episode) is written with `set_state` and read with
    `get_state`: each write names the version it replaces, so a lost update is refused, and on Redis an older
    genuine value put back under its key is refused on read (`StoreTampered`).
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
    async def set(
        self, key: str, value: bytes, ttl_s: float | None = None, *, evictable: bool = False
    ) -> None: ...

    @abc.abstractmethod
    async def set_many(
        self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False
    ) -> None: ...

    @abc.abstractmethod
    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        """Set `key` only if it is absent; True when this call set it (locks: never refused for size)."""

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Remove `key`; True when it existed."""

    @abc.abstractmethod
    async def get_state(self, key: str) -> Versioned | None:
        """The current value of a state key and its version; None when absent."""

    @abc.abstractmethod
    async def set_state(self, key: str, value: bytes, version: int, ttl_s: float | None = None) -> int:
        """Write `key` when its current version is `version` (0: absent) and return the new version,
        `version` + 1. Raise `StoreConflict` otherwise. Never evicted. A new key may be refused for size
        (`StoreFull`)."""

    @abc.abstractmethod
    async def lease(self, member: str, claims: dict[str, Claim], ttl_s: float) -> str | None:
        """Hold `claims[group].amount` of every group for `member` for `ttl_s` when each group's holders'
        amounts stay within its limit (what `member` held there is replaced; holding less always fits); else
        hold nothing new and return the first group without room, in `claims`' order. `member` is not
        empty."""

    @abc.abstractmethod
    async def release(self, member: str, groups: Sequence[str]) -> None:
        """End `member`'s hold in `groups`. A lease also ends `ttl_s` after it was last taken."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the store answers."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass
