"""A bounded, thread-safe memo: each key's value is made once while it stays among the `size` most recently used."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def peek(self, key: K) -> V | None:
        """The value if it is kept, without making it or refreshing its place (one dict read: fine on an event loop)."""
        return self._values.get(key)

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The kept value, else `make()`'s, kept. Made under the lock: threads asking for one key at once share one
        making (a slow one, such as a big problem's preparation, holds the others back: they would only redo it)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            value = self._values[key] = make()
            if len(self._values) > self.size:
                self._values.popitem(last=False)
            return value
