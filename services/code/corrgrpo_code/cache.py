"""The code service's caches, typed and keyed by content (services/code/README.md, "Caches").

`BoundedMemo` keeps values in this process; `SharedVerdicts` shares a batch's runs and keeps verdicts in the
store. Every store key hashes `MEANING`, the source of the code that judges and times a run, so a change to
it starts a fresh cache instead of reading verdicts or times it would no longer give.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import corrgrpo_sandbox
from corrgrpo_common import Store, StoreUnavailable

log = logging.getLogger("corrgrpo.code")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")
STORE_WAIT_S = 5.0  # a store that does not answer in this time is skipped: the program is run instead


def _sources_hash() -> str:
    """This package's and the sandbox's Python sources, hashed: what a verdict and its time depend on."""
    digest = hashlib.sha256()
    for package in (Path(__file__).parent, Path(corrgrpo_sandbox.__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


MEANING = _sources_hash()


def store_key(*parts: object) -> str:
    """A store key for `parts` (JSON-encodable, or by `repr`), under `MEANING`."""
    payload = json.dumps([MEANING, *parts], default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()[:40]


class BoundedMemo(Generic[K, V]):
    """Thread-safe: each key's value is made once while it stays among the `size` most recently used."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.RLock()  # re-entrant: `get` keeps what it made through `put`

    def __len__(self) -> int:
        return len(self._values)

    def peek(self, key: K) -> V | None:
        """The value if it is kept, without making it or refreshing its place (fine on an event loop)."""
        return self._values.get(key)

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The kept value, else `make()`'s, kept. Made under the lock: threads asking for one key share one
        making (a slow one holds the others back: they would only redo it)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            return self.put(key, make())

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            if len(self._values) > self.size:
                self._values.popitem(last=False)
            return value


@dataclass
class Claim(Generic[V]):
    """One program's verdict in a batch: the future its items share, and whether this item must produce it."""

    key: str
    future: Future[V]
    owned: bool


@dataclass
class SharedVerdicts(Generic[V]):
    """A batch's verdicts by key (thread-safe): the first item with a key produces it (from the store, else by
    running it). Its copies wait on its future. Verdicts are kept in the store, as bytes, for `ttl_s`."""

    store: Store
    loop: asyncio.AbstractEventLoop
    prefix: str
    ttl_s: float
    cancelled: threading.Event = field(default_factory=threading.Event)
    claims: dict[str, Claim[V]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, key: str) -> Claim[V]:
        with self.lock:
            if (claim := self.claims.get(key)) is not None:
                return Claim(key, claim.future, owned=False)
            claim = self.claims[key] = Claim(key, Future(), owned=True)
            return claim

    def stored(self, key: str) -> bytes | None:
        return self._call(self.store.get(self.prefix + key)) if self.ttl_s > 0 else None

    def keep(self, key: str, data: bytes) -> None:
        if self.ttl_s > 0:
            self._call(self.store.set(self.prefix + key, data, self.ttl_s, evictable=True))

    def _call(self, call: Coroutine[Any, Any, T]) -> T | None:
        """A store coroutine on the batch's event loop, from a lane thread (None: the store is down)."""
        try:
            return asyncio.run_coroutine_threadsafe(call, self.loop).result(STORE_WAIT_S)
        except (StoreUnavailable, TimeoutError) as error:
            log.warning("run cache unavailable; running without it", extra={"error": str(error)})
            return None
