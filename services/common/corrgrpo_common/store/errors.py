"""What the store raises: a services' reader copes with every `StoreUnavailable` alike (caches: recompute)."""

from __future__ import annotations


class StoreUnavailable(RuntimeError):
    """The backing store did not answer (for Redis: connection refused, timeout)."""


class StoreTampered(StoreUnavailable):
    """A value read back from Redis failed authentication: refused (and deleted), never decoded. Every reader
    that copes with an unavailable store (caches: recompute) copes with this the same way."""


class StoreFull(StoreUnavailable):
    """The in-memory store is at its size cap with live state only. A new state key is refused (services
    answer 503)."""


class StoreConflict(RuntimeError):
    """`Store.set_state` found another version than the one it replaces: another writer came first."""


class StoreMisconfigured(ValueError):
    """The settings cannot give a safe store (Redis without `CORRGRPO_STORE_SECRET`): the service refuses
    to start."""
