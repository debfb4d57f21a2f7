"""Key-value store for idempotency caches and state shared between replicas.

`MemoryStore` is the embedded default (one process, nothing shared, capped in size); `RedisStore`
is used when `CORRGRPO_REDIS_URL` is set, so replicas share caches and episode state. Both
implement the same async `Store` interface and are tested with the same test body; every key
either writes carries a TTL.
"""

from __future__ import annotations

import abc
import asyncio
import heapq
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import redis.asyncio as aioredis

if TYPE_CHECKING:
    from .settings import ServiceSettings


class StoreUnavailable(RuntimeError):
    """The backing store did not answer (for Redis: connection refused, timeout)."""


DEFAULT_TTL_S = 7 * 24 * 3600.0
"""TTL of a key written without one: no key any service writes lives forever, in memory or in Redis."""
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class StoreFull(StoreUnavailable):
    """The in-memory store is at its size cap with live state only; a new state key is refused (services answer 503)."""


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
    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the store answers."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass


@dataclass(frozen=True)
class _Entry:
    value: bytes
    deadline: float
    evictable: bool
    size: int


class MemoryStore(Store):
    """In-process store that frees what it no longer needs.

    Expired keys are removed (a heap of deadlines, checked on every call), not just hidden. Past
    `max_bytes` (keys + values + a fixed overhead per entry), cache entries are evicted least
    recently used first; a *new* state key that still does not fit raises `StoreFull`, while
    updates of existing state and `add` (locks) are admitted, so live episodes are never lost.
    """

    kind = "memory"
    ENTRY_OVERHEAD = 160  # dict slot, entry object, heap tuple: measured ~150 bytes per key

    def __init__(self, default_ttl_s: float = DEFAULT_TTL_S, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.default_ttl_s, self.max_bytes = default_ttl_s, max_bytes
        self._data: dict[str, _Entry] = {}
        self._lru: OrderedDict[str, None] = OrderedDict()  # evictable keys, least recently used first
        self._deadlines: list[tuple[float, str]] = []
        self.bytes = 0

    def __len__(self) -> int:
        self._expire()
        return len(self._data)

    def _remove(self, key: str) -> None:
        entry = self._data.pop(key)
        self.bytes -= entry.size
        self._lru.pop(key, None)

    def _expire(self) -> None:
        now = time.monotonic()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            entry = self._data.get(key)
            if entry is not None and entry.deadline == deadline:
                self._remove(key)
        if len(heap) > 2 * len(self._data) + 1024:  # rewritten keys leave stale deadlines behind
            self._deadlines = [(entry.deadline, key) for key, entry in self._data.items()]
            heapq.heapify(self._deadlines)

    def _live(self, key: str) -> bytes | None:
        self._expire()
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry.evictable:
            self._lru.move_to_end(key)
        return entry.value

    def _evict_for(self, size: int, keep: str) -> None:
        """Drop least recently used cache entries until `size` more bytes fit (never `keep`)."""
        kept = self._lru.pop(keep, False) is None  # set aside, so the loop never meets it
        while self._lru and self.bytes + size > self.max_bytes:
            self._remove(next(iter(self._lru)))
        if kept:
            self._lru[keep] = None

    def _put(self, key: str, value: bytes, ttl_s: float | None, evictable: bool, admit: bool = False) -> None:
        self._expire()
        size = len(key) + len(value) + self.ENTRY_OVERHEAD
        old = self._data.get(key)
        growth = size - (old.size if old else 0)
        self._evict_for(growth, keep=key)
        if self.bytes + growth > self.max_bytes:
            if evictable:
                return  # a cache entry that does not fit is simply not remembered
            if old is None and not admit:
                raise StoreFull(f"memory store full: {self.bytes} bytes of live state (limit {self.max_bytes})")
        if old is not None:
            self._remove(key)
        deadline = time.monotonic() + self.ttl(ttl_s)
        self._data[key] = _Entry(value, deadline, evictable, size)
        self.bytes += size
        heapq.heappush(self._deadlines, (deadline, key))
        if evictable:
            self._lru[key] = None

    async def get(self, key: str) -> bytes | None:
        return self._live(key)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self._live(k) for k in keys]

    async def set(self, key: str, value: bytes, ttl_s: float | None = None, *, evictable: bool = False) -> None:
        self._put(key, value, ttl_s, evictable)

    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False) -> None:
        for key, value in pairs.items():
            self._put(key, value, ttl_s, evictable)

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        if self._live(key) is not None:
            return False
        self._put(key, value, ttl_s, evictable=False, admit=True)
        return True

    async def delete(self, key: str) -> bool:
        if self._live(key) is None:
            return False
        self._remove(key)
        return True

    async def ping(self) -> None:
        return None


def _ms(ttl_s: float) -> int:
    return max(1, int(ttl_s * 1000))


def redacted(url: str) -> str:
    """`url` with its password replaced by `***`, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:" if parts.username else ":"
    return parts._replace(netloc=f"{user}***@{netloc}").geturl()


class RedisStore(Store):
    """Redis-backed store; every Redis failure surfaces as `StoreUnavailable` (password redacted)."""

    kind = "redis"

    def __init__(self, url: str, timeout_s: float = 2.0, default_ttl_s: float = DEFAULT_TTL_S) -> None:
        self.url, self.shown_url, self.default_ttl_s = url, redacted(url), default_ttl_s
        self._redis = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)

    async def _call(self, coro):  # type: ignore[no-untyped-def]
        try:
            return await coro
        except (aioredis.RedisError, OSError, asyncio.TimeoutError) as error:
            raise StoreUnavailable(f"redis at {self.shown_url}: {error}") from error

    async def get(self, key: str) -> bytes | None:
        return await self._call(self._redis.get(key))

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return list(await self._call(self._redis.mget(list(keys)))) if keys else []

    # `evictable` has no Redis counterpart: Redis's own `maxmemory` policy decides (see the README)
    async def set(self, key: str, value: bytes, ttl_s: float | None = None, *, evictable: bool = False) -> None:
        await self._call(self._redis.set(key, value, px=_ms(self.ttl(ttl_s))))

    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False) -> None:
        if not pairs:
            return
        pipe = self._redis.pipeline(transaction=False)
        for key, value in pairs.items():
            pipe.set(key, value, px=_ms(self.ttl(ttl_s)))
        await self._call(pipe.execute())

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        return bool(await self._call(self._redis.set(key, value, px=_ms(self.ttl(ttl_s)), nx=True)))

    async def delete(self, key: str) -> bool:
        return bool(await self._call(self._redis.delete(key)))

    async def ping(self) -> None:
        await self._call(self._redis.ping())

    async def close(self) -> None:
        await self._redis.aclose()


def make_store(settings: ServiceSettings) -> Store:
    """The store the settings configure: Redis when a URL is set, else the in-memory store (capped). Every service
    builds its store here, so no store setting can be left out."""
    if settings.redis_url:
        return RedisStore(settings.redis_url, default_ttl_s=settings.store_ttl_s)
    return MemoryStore(settings.store_ttl_s, settings.memory_store_max_bytes)
