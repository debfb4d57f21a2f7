"""The embedded store: one process's memory, capped in size, with leases counted in a dict."""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import StoreConflict, StoreFull
from .interface import DEFAULT_MAX_BYTES, DEFAULT_TTL_S, Claim, Store, Versioned


@dataclass(frozen=True)
class _Entry:
    value: bytes
    deadline: float
    evictable: bool
    size: int
    version: int = 0


class MemoryLeases:
    """Lease holders of one process: group → member → (deadline, amount), with each group's total. A lapsed
    hold is dropped on the next call (a heap of deadlines: a call costs what has lapsed, not what is held)."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, tuple[float, int]]] = {}
        self._totals: dict[str, int] = {}
        self._deadlines: list[tuple[float, str, str]] = []

    def _drop(self, group: str, member: str) -> None:
        members = self._groups[group]
        self._totals[group] -= members.pop(member)[1]
        if not members:
            del self._groups[group], self._totals[group]

    def _expire(self) -> None:
        now, heap = time.monotonic(), self._deadlines
        while heap and heap[0][0] <= now:
            deadline, group, member = heapq.heappop(heap)
            held = self._groups.get(group, {}).get(member)
            if held is not None and held[0] == deadline:
                self._drop(group, member)
        live = sum(map(len, self._groups.values()))
        if len(heap) > 2 * live + 1024:  # renewed holds leave stale deadlines behind
            held = self._groups.items()
            self._deadlines = [(d, g, m) for g, members in held for m, (d, _) in members.items()]
            heapq.heapify(self._deadlines)

    def lease(self, member: str, claims: dict[str, Claim], ttl_s: float) -> str | None:
        self._expire()
        for group, (amount, limit) in claims.items():
            held = self._groups.get(group, {}).get(member, (0.0, 0))[1]
            if amount > held and self._totals.get(group, 0) - held + amount > limit:
                return group
        deadline = time.monotonic() + ttl_s
        for group, (amount, _) in claims.items():
            if member in self._groups.get(group, {}):
                self._drop(group, member)
            self._groups.setdefault(group, {})[member] = (deadline, amount)
            self._totals[group] = self._totals.get(group, 0) + amount
            heapq.heappush(self._deadlines, (deadline, group, member))
        return None

    def release(self, member: str, groups: Sequence[str]) -> None:
        self._expire()
        for group in groups:
            if member in self._groups.get(group, {}):
                self._drop(group, member)


class MemoryEntries:
    """The embedded store's keys, byte-counted: freed once expired (a heap of deadlines, checked on each
    call), and cache entries evicted least recently used first to stay within `max_bytes`."""

    ENTRY_OVERHEAD = 160  # dict slot, entry object, heap tuple: measured ~150 bytes per key

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._data: dict[str, _Entry] = {}
        self._lru: OrderedDict[str, None] = OrderedDict()  # evictable keys, least recently used first
        self._deadlines: list[tuple[float, str]] = []
        self.bytes = 0

    def __len__(self) -> int:
        self.expire()
        return len(self._data)

    def remove(self, key: str) -> None:
        entry = self._data.pop(key)
        self.bytes -= entry.size
        self._lru.pop(key, None)

    def expire(self) -> None:
        now = time.monotonic()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, key = heapq.heappop(heap)
            entry = self._data.get(key)
            if entry is not None and entry.deadline == deadline:
                self.remove(key)
        if len(heap) > 2 * len(self._data) + 1024:  # rewritten keys leave stale deadlines behind
            self._deadlines = [(entry.deadline, key) for key, entry in self._data.items()]
            heapq.heapify(self._deadlines)

    def entry(self, key: str) -> _Entry | None:
        """The key's entry, unless expired. A read that does not count as a use."""
        self.expire()
        return self._data.get(key)

    def live(self, key: str) -> bytes | None:
        self.expire()
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
            self.remove(next(iter(self._lru)))
        if kept:
            self._lru[keep] = None

    def put(
        self,
        key: str,
        value: bytes,
        ttl_s: float,
        evictable: bool,
        admit: bool = False,
        version: int = 0,
    ) -> None:
        self.expire()
        size = len(key) + len(value) + self.ENTRY_OVERHEAD
        old = self._data.get(key)
        growth = size - (old.size if old else 0)
        self._evict_for(growth, keep=key)
        if self.bytes + growth > self.max_bytes:
            if evictable:
                return  # a cache entry that does not fit is simply not remembered
            if old is None and not admit:
                raise StoreFull(
                    f"memory store full: {self.bytes} bytes of live state (limit {self.max_bytes})"
                )
        if old is not None:
            self.remove(key)
        deadline = time.monotonic() + ttl_s
        self._data[key] = _Entry(value, deadline, evictable, size, version)
        self.bytes += size
        heapq.heappush(self._deadlines, (deadline, key))
        if evictable:
            self._lru[key] = None


class MemoryStore(Store):
    """In-process store that frees what it no longer needs.

    Expired keys are removed, not just hidden. Past `max_bytes` (keys + values + a fixed overhead per entry),
    cache entries are evicted least recently used first. A *new* state key that still does not fit raises
    `StoreFull`, while updates of existing state and `add` (locks) are admitted, so live episodes are never
    lost.
    """

    kind = "memory"

    def __init__(self, default_ttl_s: float = DEFAULT_TTL_S, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.default_ttl_s = default_ttl_s
        self.entries = MemoryEntries(max_bytes)
        self._leases = MemoryLeases()

    def __len__(self) -> int:
        return len(self.entries)

    async def get(self, key: str) -> bytes | None:
        return self.entries.live(key)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self.entries.live(k) for k in keys]

    async def set(
        self, key: str, value: bytes, ttl_s: float | None = None, *, evictable: bool = False
    ) -> None:
        self.entries.put(key, value, self.ttl(ttl_s), evictable)

    async def set_many(
        self, pairs: dict[str, bytes], ttl_s: float | None = None, *, evictable: bool = False
    ) -> None:
        for key, value in pairs.items():
            self.entries.put(key, value, self.ttl(ttl_s), evictable)

    async def add(self, key: str, value: bytes, ttl_s: float | None = None) -> bool:
        if self.entries.live(key) is not None:
            return False
        self.entries.put(key, value, self.ttl(ttl_s), evictable=False, admit=True)
        return True

    async def delete(self, key: str) -> bool:
        if self.entries.live(key) is None:
            return False
        self.entries.remove(key)
        return True

    async def get_state(self, key: str) -> Versioned | None:
        entry = self.entries.entry(key)
        return None if entry is None else Versioned(entry.value, entry.version)

    async def set_state(self, key: str, value: bytes, version: int, ttl_s: float | None = None) -> int:
        entry = self.entries.entry(key)
        if (entry.version if entry else 0) != version:
            raise StoreConflict(f"{key!r} is at version {entry.version if entry else 0}, not {version}")
        self.entries.put(key, value, self.ttl(ttl_s), evictable=False, version=version + 1)
        return version + 1

    async def lease(self, member: str, claims: dict[str, Claim], ttl_s: float) -> str | None:
        return self._leases.lease(member, claims, ttl_s)

    async def release(self, member: str, groups: Sequence[str]) -> None:
        self._leases.release(member, groups)

    async def ping(self) -> None:
        return None
