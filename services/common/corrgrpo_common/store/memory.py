"""The embedded store: one process's memory, capped in size, with leases counted in a dict."""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import StoreFull
from .interface import DEFAULT_MAX_BYTES, DEFAULT_TTL_S, Store


@dataclass(frozen=True)
class _Entry:
    value: bytes
    deadline: float
    evictable: bool
    size: int


class MemoryLeases:
    """Live lease holders of one process: member → (deadline, groups); a lapsed hold is dropped on the next call."""

    def __init__(self) -> None:
        self._leases: dict[str, tuple[float, frozenset[str]]] = {}

    def _held(self) -> dict[str, tuple[float, frozenset[str]]]:
        now = time.monotonic()
        self._leases = {member: held for member, held in self._leases.items() if held[0] > now}
        return self._leases

    def lease(self, member: str, limits: dict[str, int], ttl_s: float) -> str | None:
        held = self._held()
        if member not in held:
            for group, limit in limits.items():
                if sum(group in groups for _, groups in held.values()) >= limit:
                    return group
        held[member] = (time.monotonic() + ttl_s, frozenset(limits))
        return None

    def renew(self, member: str, ttl_s: float) -> None:
        if (held := self._held().get(member)) is not None:
            self._leases[member] = (time.monotonic() + ttl_s, held[1])

    def release(self, member: str) -> None:
        self._leases.pop(member, None)


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
        self._leases = MemoryLeases()
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

    async def lease(self, member: str, limits: dict[str, int], ttl_s: float) -> str | None:
        return self._leases.lease(member, limits, ttl_s)

    async def renew(self, member: str, groups: Sequence[str], ttl_s: float) -> None:
        self._leases.renew(member, ttl_s)

    async def release(self, member: str, groups: Sequence[str]) -> None:
        self._leases.release(member)

    async def ping(self) -> None:
        return None
