"""The store replicas share: Redis, every value sealed (`sealing`), leases as Lua scripts (`lease_scripts`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from .errors import StoreTampered, StoreUnavailable
from .interface import DEFAULT_TTL_S, Store
from .lease_scripts import LEASE, RENEW
from .sealing import ValueSeal

log = logging.getLogger("corrgrpo.store")


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
    """Redis-backed store; every Redis failure surfaces as `StoreUnavailable` (password redacted), every value read
    back is authenticated with `secret` (HMAC-SHA256 of key and value, stored in front of the value)."""

    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        secret: str,
        timeout_s: float = 2.0,
        default_ttl_s: float = DEFAULT_TTL_S,
        password: str | None = None,
    ) -> None:
        self._seal = ValueSeal(secret)
        self.url, self.shown_url, self.default_ttl_s = url, redacted(url), default_ttl_s
        self._redis = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, **({"password": password} if password else {})
        )
        self._lease, self._renew = self._redis.register_script(LEASE), self._redis.register_script(RENEW)

    async def _opened(self, key: str, blob: bytes | None) -> bytes | None:
        """The value `blob` carries when its MAC is this service's for `key`; a forged one is deleted and refused."""
        if blob is None:
            return None
        value = self._seal.opened(key, blob)
        if value is not None:
            return value
        log.error("store value failed authentication: refused and deleted", extra={"key": key, "store": self.shown_url})
        await self._call(self._redis.delete(key))
        raise StoreTampered(f"the value of {key!r} in redis at {self.shown_url} is not this service's (MAC mismatch)")

    async def _call(self, coro):  # type: ignore[no-untyped-def]
        try:
            return await coro
        except (aioredis.RedisError, OSError, asyncio.TimeoutError) as error:
            raise StoreUnavailable(f"redis at {self.shown_url}: {error}") from error

    async def get(self, key: str) -> bytes | None:
        return await self._opened(key, await self._call(self._redis.get(key)))

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        blobs = list(await self._call(self._redis.mget(list(keys)))) if keys else []
        return [await self._opened(key, blob) for key, blob in zip(keys, blobs, strict=True)]

    # `evictable` has no Redis counterpart: Redis's own `maxmemory` policy decides (see the README)
    async def set(self, key: str, value: bytes, ttl_s: float | None = None, *, evictable: bool = False) -> None:
        await self._call(self._redis.set(key, self._seal.sealed(key, value), px=_ms(self.ttl(ttl_s))))

    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False) -> None:
        if not pairs:
            return
        pipe = self._redis.pipeline(transaction=False)
        for key, value in pairs.items():
            pipe.set(key, self._seal.sealed(key, value), px=_ms(self.ttl(ttl_s)))
        await self._call(pipe.execute())

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        sealed = self._seal.sealed(key, value)
        return bool(await self._call(self._redis.set(key, sealed, px=_ms(self.ttl(ttl_s)), nx=True)))

    async def lease(self, member: str, limits: dict[str, int], ttl_s: float) -> str | None:
        groups = list(limits)
        full = await self._call(self._lease(keys=groups, args=[member, _ms(ttl_s), *limits.values()]))
        return groups[int(full) - 1] if full else None

    async def renew(self, member: str, groups: Sequence[str], ttl_s: float) -> None:
        await self._call(self._renew(keys=list(groups), args=[member, _ms(ttl_s)]))

    async def release(self, member: str, groups: Sequence[str]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for group in groups:
            pipe.zrem(group, member)
        await self._call(pipe.execute())

    async def delete(self, key: str) -> bool:
        return bool(await self._call(self._redis.delete(key)))

    async def ping(self) -> None:
        await self._call(self._redis.ping())

    async def close(self) -> None:
        await self._redis.aclose()
