"""The store replicas share: Redis, every value sealed (`sealing`), leases as Lua scripts
(`lease_scripts`)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from .errors import StoreConflict, StoreTampered, StoreUnavailable
from .interface import DEFAULT_TTL_S, Claim, Store, Versioned
from .lease_scripts import LEASE, RELEASE, SET_STATE
from .sealing import ValueSeal

log = logging.getLogger("corrgrpo.store")


def _ms(ttl_s: float) -> int:
    return max(1, int(ttl_s * 1000))


def version_key(key: str) -> str:
    """Where a state key's current version lives: in its key's Redis Cluster slot (a key without braces)."""
    return f"{{{key}}}:version"


def amounts_key(group: str) -> str:
    return f"{group}:amounts"


def _lease_keys(groups: Sequence[str]) -> list[str]:
    return [key for group in groups for key in (group, amounts_key(group))]


VERSION_BYTES = 8
REMEMBERED_VERSIONS = 20_000
"""State keys whose latest version a process remembers (~230 bytes each, ~5 MB; five times the default cap
of live episodes), so a rollback of a value and its version key together is refused by every replica that
has seen the later version."""


def redacted(url: str) -> str:
    """`url` with its password replaced by `***`, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:" if parts.username else ":"
    return parts._replace(netloc=f"{user}***@{netloc}").geturl()


class SeenVersions:
    """The latest version this process saw of each state key (the last `REMEMBERED_VERSIONS` keys read or
    written)."""

    def __init__(self) -> None:
        self._latest: OrderedDict[str, int] = OrderedDict()

    def remember(self, key: str, version: int) -> None:
        self._latest[key] = version
        self._latest.move_to_end(key)
        if len(self._latest) > REMEMBERED_VERSIONS:
            self._latest.popitem(last=False)

    def stale(self, key: str, version: int, current: bytes | None) -> str | None:
        """Why `version` of `key` is refused (`current`: what its version key holds); None when current."""
        if current is None or current != str(version).encode():
            return f"is version {version}, not the current: an older value put back"
        if version < (latest := self._latest.get(key, 0)):
            return (
                f"is version {version}, this process saw {latest}: an older value put back, version key too"
            )
        return None


class RedisLeases:
    """Lease holders in Redis, shared by the replicas: each group a hash of member → amount (its total under
    the field ''), taken and given back by Lua scripts so a lease checks every group at once."""

    def __init__(self, redis: aioredis.Redis, call: Callable[[Awaitable[Any]], Awaitable[Any]]) -> None:
        self._lease, self._release = redis.register_script(LEASE), redis.register_script(RELEASE)
        self._call = call  # Redis failures surface as StoreUnavailable

    async def lease(self, member: str, claims: dict[str, Claim], ttl_s: float) -> str | None:
        if not member:
            raise ValueError("a lease member is not empty: the field '' holds each group's total")
        groups = list(claims)
        amounts = [number for claim in claims.values() for number in claim]
        full = await self._call(self._lease(keys=_lease_keys(groups), args=[member, _ms(ttl_s), *amounts]))
        return groups[int(full) - 1] if full else None

    async def release(self, member: str, groups: Sequence[str]) -> None:
        await self._call(self._release(keys=_lease_keys(groups), args=[member]))


class ReadBack:
    """Values read back from Redis: opened when this service sealed them, else logged, deleted and refused."""

    def __init__(
        self,
        seal: ValueSeal,
        redis: aioredis.Redis,
        call: Callable[[Awaitable[Any]], Awaitable[Any]],
        shown_url: str,
    ) -> None:
        self._seal, self._redis, self._call, self._shown_url = seal, redis, call, shown_url

    async def refused(self, key: str, why: str) -> StoreTampered:
        """Log, delete and describe a value that is not this service's current one (never decoded)."""
        log.error(f"store value {why}: refused and deleted", extra={"key": key, "store": self._shown_url})
        await self._call(self._redis.delete(key))
        return StoreTampered(f"the value of {key!r} in redis at {self._shown_url} {why}")

    async def opened(self, key: str, blob: bytes | None) -> bytes | None:
        """The value `blob` carries when its MAC is this service's for `key`. A forged one is deleted and
        refused."""
        if blob is None:
            return None
        value = self._seal.opened(key, blob)
        if value is not None:
            return value
        raise await self.refused(key, "failed authentication: not this service's (MAC mismatch)")


class RedisStore(Store):
    """Redis-backed store. Every Redis failure surfaces as `StoreUnavailable` (password redacted), every value
    read back is authenticated with `secret` (HMAC-SHA256 of key and value, stored in front of the value).

    A state value (`set_state`) seals its version with it, and the version key (`version_key`) says which
    version is current: an older genuine value put back under its key is refused on read, as is one whose
    version key is gone.
    """

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
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            **({"password": password} if password else {}),
        )
        self._leases = RedisLeases(self._redis, self._call)
        self._set_state = self._redis.register_script(SET_STATE)
        self._seen = SeenVersions()
        self._read = ReadBack(self._seal, self._redis, self._call, self.shown_url)

    async def _call(self, coro):  # type: ignore[no-untyped-def]
        try:
            return await coro
        except (aioredis.RedisError, OSError, asyncio.TimeoutError) as error:
            raise StoreUnavailable(f"redis at {self.shown_url}: {error}") from error

    async def get(self, key: str) -> bytes | None:
        return await self._read.opened(key, await self._call(self._redis.get(key)))

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        blobs = list(await self._call(self._redis.mget(list(keys)))) if keys else []
        return [await self._read.opened(key, blob) for key, blob in zip(keys, blobs, strict=True)]

    # `evictable` has no Redis counterpart: Redis's own `maxmemory` policy decides (see the README)
    async def set(
        self, key: str, value: bytes, ttl_s: float | None = None, *, evictable: bool = False
    ) -> None:
        await self._call(self._redis.set(key, self._seal.sealed(key, value), px=_ms(self.ttl(ttl_s))))

    async def set_many(
        self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False
    ) -> None:
        if not pairs:
            return
        pipe = self._redis.pipeline(transaction=False)
        for key, value in pairs.items():
            pipe.set(key, self._seal.sealed(key, value), px=_ms(self.ttl(ttl_s)))
        await self._call(pipe.execute())

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        sealed = self._seal.sealed(key, value)
        return bool(await self._call(self._redis.set(key, sealed, px=_ms(self.ttl(ttl_s)), nx=True)))

    async def get_state(self, key: str) -> Versioned | None:
        blob, current = await self._call(self._redis.mget([key, version_key(key)]))
        if blob is None:
            return None
        value = await self._read.opened(key, blob)
        version = int.from_bytes(value[:VERSION_BYTES], "big")
        if (why := self._seen.stale(key, version, current)) is not None:
            raise await self._read.refused(key, why)
        self._seen.remember(key, version)
        return Versioned(value[VERSION_BYTES:], version)

    async def set_state(self, key: str, value: bytes, version: int, ttl_s: float | None = None) -> int:
        sealed = self._seal.sealed(key, (version + 1).to_bytes(VERSION_BYTES, "big") + value)
        args = [version, sealed, _ms(self.ttl(ttl_s))]
        if not await self._call(self._set_state(keys=[key, version_key(key)], args=args)):
            raise StoreConflict(f"{key!r} in redis at {self.shown_url} is no longer at version {version}")
        self._seen.remember(key, version + 1)
        return version + 1

    async def lease(self, member: str, claims: dict[str, Claim], ttl_s: float) -> str | None:
        return await self._leases.lease(member, claims, ttl_s)

    async def release(self, member: str, groups: Sequence[str]) -> None:
        await self._leases.release(member, groups)

    async def delete(self, key: str) -> bool:
        return bool(await self._call(self._redis.delete(key)))

    async def ping(self) -> None:
        await self._call(self._redis.ping())

    async def close(self) -> None:
        await self._redis.aclose()
