"""Key-value store for idempotency caches and state shared between replicas.

`MemoryStore` is the embedded default (one process, nothing shared); `RedisStore` is used when
`CORRGRPO_REDIS_URL` is set, so replicas share caches and episode state. Both implement the same
async `Store` interface and are tested with the same test body.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import redis.asyncio as aioredis


class StoreUnavailable(RuntimeError):
    """The backing store did not answer (for Redis: connection refused, timeout)."""


class Store(abc.ABC):
    """Async bytes-to-bytes map with per-key expiry."""

    kind: str

    @abc.abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]: ...

    @abc.abstractmethod
    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None: ...

    @abc.abstractmethod
    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None) -> None: ...

    @abc.abstractmethod
    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        """Set `key` only if it is absent; True when this call set it."""

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """Remove `key`; True when it existed."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise `StoreUnavailable` unless the store answers."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass


class MemoryStore(Store):
    """In-process store: a dict of (value, deadline)."""

    kind = "memory"

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes, float]] = {}

    def _live(self, key: str) -> bytes | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[1] <= time.monotonic():
            del self._data[key]
            return None
        return entry[0]

    @staticmethod
    def _deadline(ttl_s: float | None) -> float:
        return float("inf") if ttl_s is None else time.monotonic() + ttl_s

    async def get(self, key: str) -> bytes | None:
        return self._live(key)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self._live(k) for k in keys]

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        self._data[key] = (value, self._deadline(ttl_s))

    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None) -> None:
        deadline = self._deadline(ttl_s)
        self._data.update({k: (v, deadline) for k, v in pairs.items()})

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        if self._live(key) is not None:
            return False
        await self.set(key, value, ttl_s)
        return True

    async def delete(self, key: str) -> bool:
        return self._live(key) is not None and self._data.pop(key, None) is not None

    async def ping(self) -> None:
        return None


def _ms(ttl_s: float | None) -> int | None:
    return None if ttl_s is None else max(1, int(ttl_s * 1000))


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

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url, self.shown_url = url, redacted(url)
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

    async def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        await self._call(self._redis.set(key, value, px=_ms(ttl_s)))

    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None) -> None:
        if not pairs:
            return
        pipe = self._redis.pipeline(transaction=False)
        for key, value in pairs.items():
            pipe.set(key, value, px=_ms(ttl_s))
        await self._call(pipe.execute())

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        return bool(await self._call(self._redis.set(key, value, px=_ms(ttl_s), nx=True)))

    async def delete(self, key: str) -> bool:
        return bool(await self._call(self._redis.delete(key)))

    async def ping(self) -> None:
        await self._call(self._redis.ping())

    async def close(self) -> None:
        await self._redis.aclose()


def make_store(redis_url: str | None) -> Store:
    """Redis when a URL is configured, else the in-memory store."""
    return RedisStore(redis_url) if redis_url else MemoryStore()
