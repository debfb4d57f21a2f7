"""Key-value store for idempotency caches and state shared between replicas.

`MemoryStore` is the embedded default (one process, nothing shared, capped in size); `RedisStore`
is used when `CORRGRPO_REDIS_URL` is set, so replicas share caches and episode state. Both
implement the same async `Store` interface and are tested with the same test body; every key
either writes carries a TTL.

Whoever can write to Redis is not trusted: `RedisStore` prefixes every value with an HMAC-SHA256
(`CORRGRPO_STORE_SECRET`) of its key and bytes, and refuses a value whose MAC does not match
(`StoreTampered`, logged) before anyone decodes it, so a forged episode pickle, cached verdict or
reference time never reaches a service, nor a genuine value moved to another key. The in-memory
store is one process's own memory: nothing to authenticate.

Leases (`lease`, `renew`, `release`) count live holders per group with a cap, for quotas that
must hold across replicas (AgentDojo's live episodes per client and in total).
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import heapq
import hmac
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from pydantic import SecretStr

log = logging.getLogger("corrgrpo.store")


class StoreUnavailable(RuntimeError):
    """The backing store did not answer (for Redis: connection refused, timeout)."""


class StoreTampered(StoreUnavailable):
    """A value read back from Redis failed authentication: refused (and deleted), never decoded. Every reader that
    copes with an unavailable store (caches: recompute) copes with this the same way."""


class StoreMisconfigured(ValueError):
    """The settings cannot give a safe store (Redis without `CORRGRPO_STORE_SECRET`): the service refuses to start."""


DEFAULT_TTL_S = 7 * 24 * 3600.0
"""TTL of a key written without one: no key any service writes lives forever, in memory or in Redis."""
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MIN_SECRET_CHARS = 16


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
        self._leases: dict[str, tuple[float, frozenset[str]]] = {}  # member → (deadline, groups)
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

    def _held(self) -> dict[str, tuple[float, frozenset[str]]]:
        now = time.monotonic()
        self._leases = {member: held for member, held in self._leases.items() if held[0] > now}
        return self._leases

    async def lease(self, member: str, limits: dict[str, int], ttl_s: float) -> str | None:
        held = self._held()
        if member not in held:
            for group, limit in limits.items():
                if sum(group in groups for _, groups in held.values()) >= limit:
                    return group
        held[member] = (time.monotonic() + ttl_s, frozenset(limits))
        return None

    async def renew(self, member: str, groups: Sequence[str], ttl_s: float) -> None:
        if (held := self._held().get(member)) is not None:
            self._leases[member] = (time.monotonic() + ttl_s, held[1])

    async def release(self, member: str, groups: Sequence[str]) -> None:
        self._leases.pop(member, None)

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


# Server time, so replicas agree; groups are sorted sets of member → deadline (ms), each key's TTL past its last deadline.
_LEASE = """
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local ttl = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if not redis.call('ZSCORE', key, ARGV[1]) and redis.call('ZCARD', key) >= tonumber(ARGV[2 + i]) then return i end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + ttl, ARGV[1])
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
return 0
"""
_RENEW = """
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local ttl = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  if redis.call('ZADD', key, 'XX', 'CH', now + ttl, ARGV[1]) == 1 and redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return 0
"""


class RedisStore(Store):
    """Redis-backed store; every Redis failure surfaces as `StoreUnavailable` (password redacted), every value read
    back is authenticated with `secret` (HMAC-SHA256 of key and value, stored in front of the value)."""

    kind = "redis"
    MAC_BYTES = hashlib.sha256().digest_size

    def __init__(
        self,
        url: str,
        *,
        secret: str,
        timeout_s: float = 2.0,
        default_ttl_s: float = DEFAULT_TTL_S,
        password: str | None = None,
    ) -> None:
        if len(secret) < MIN_SECRET_CHARS:
            raise StoreMisconfigured(f"the store secret must have at least {MIN_SECRET_CHARS} characters")
        self.url, self.shown_url, self.default_ttl_s = url, redacted(url), default_ttl_s
        self._secret = secret.encode()
        self._redis = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, **({"password": password} if password else {})
        )
        self._lease, self._renew = self._redis.register_script(_LEASE), self._redis.register_script(_RENEW)

    def _mac(self, key: str, value: bytes | memoryview) -> bytes:
        name = key.encode()
        mac = hmac.new(self._secret, len(name).to_bytes(4, "big") + name, hashlib.sha256)
        mac.update(value)
        return mac.digest()

    def _sealed(self, key: str, value: bytes) -> bytes:
        return self._mac(key, value) + value

    async def _opened(self, key: str, blob: bytes | None) -> bytes | None:
        """The value `blob` carries when its MAC is this service's for `key`; a forged one is deleted and refused."""
        if blob is None:
            return None
        value = memoryview(blob)[self.MAC_BYTES :]
        if len(blob) >= self.MAC_BYTES and hmac.compare_digest(blob[: self.MAC_BYTES], self._mac(key, value)):
            return bytes(value)
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
        await self._call(self._redis.set(key, self._sealed(key, value), px=_ms(self.ttl(ttl_s))))

    async def set_many(self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False) -> None:
        if not pairs:
            return
        pipe = self._redis.pipeline(transaction=False)
        for key, value in pairs.items():
            pipe.set(key, self._sealed(key, value), px=_ms(self.ttl(ttl_s)))
        await self._call(pipe.execute())

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        return bool(await self._call(self._redis.set(key, self._sealed(key, value), px=_ms(self.ttl(ttl_s)), nx=True)))

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


class StoreSettings(Protocol):
    """The settings `make_store` reads (`ServiceSettings` has them), named here: settings.py imports this module's
    defaults, so this module does not import it back."""

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
    """The store the settings configure: Redis when a URL is set, else the in-memory store (capped). Every service
    builds its store here, so no store setting can be left out. Redis without `CORRGRPO_STORE_SECRET` is refused:
    a per-process secret would make replicas refuse each other's values, no secret would trust whoever writes."""
    if not settings.redis_url:
        return MemoryStore(settings.store_ttl_s, settings.memory_store_max_bytes)
    if settings.store_secret is None:
        raise StoreMisconfigured(
            "CORRGRPO_REDIS_URL is set but CORRGRPO_STORE_SECRET is not: every replica needs the same secret "
            f"(at least {MIN_SECRET_CHARS} characters, e.g. `openssl rand -hex 32`) to authenticate what it reads back"
        )
    password = settings.redis_password.get_secret_value() if settings.redis_password else None
    secret = settings.store_secret.get_secret_value()
    return RedisStore(settings.redis_url, secret=secret, default_ttl_s=settings.store_ttl_s, password=password)
