"""State growth: expired keys are freed, caches are evicted past the cap, live state is refused, never
lost."""

from __future__ import annotations

import asyncio

import pytest
import redis

from corrgrpo_common.registry import declared
from corrgrpo_common.store.errors import StoreFull, StoreUnavailable
from corrgrpo_common.store.interface import Claim
from corrgrpo_common.store.memory import MemoryStore
from corrgrpo_common.store.redis_store import RedisStore, version_key


async def test_expired_keys_are_freed_not_just_hidden() -> None:
    store = MemoryStore()
    await store.set_many({f"k{i}": b"x" * 1000 for i in range(500)}, ttl_s=0.05)
    await store.set("kept", b"v", ttl_s=60)
    assert len(store) == 501 and store.entries.bytes > 500_000
    await asyncio.sleep(0.1)
    assert await store.get("kept") == b"v"  # any call sweeps what has expired
    assert len(store) == 1 and store.entries.bytes < 1000


async def test_rewritten_keys_do_not_grow_the_deadline_heap() -> None:
    store = MemoryStore()
    for _ in range(5000):
        await store.set("episode", b"state", ttl_s=3600)
    assert len(store) == 1 and len(store.entries._deadlines) <= 1024 + 2


async def test_leases_taken_again_do_not_grow_and_lapsed_ones_are_freed() -> None:
    """A step leases its episode again: the deadlines it leaves behind are compacted, and a lapsed hold leaves
    no group behind (a group per client address)."""
    store = MemoryStore()
    for step in range(5000):
        assert await store.lease("episode", {"client:a": Claim(step, 10_000)}, 3600) is None
    leases = store._leases
    assert len(leases._deadlines) <= 1024 + 2 and leases._totals == {"client:a": 4999}
    for client in range(200):
        await store.lease(f"e{client}", {f"client:{client}": Claim(10, 10)}, 0.05)
    await asyncio.sleep(0.1)
    await store.release("episode", ["client:a"])
    assert leases._groups == {} and leases._totals == {}


async def test_keys_without_ttl_get_the_default() -> None:
    store = MemoryStore(default_ttl_s=0.05)
    await store.set("t_ref", b"1")
    await asyncio.sleep(0.1)
    assert await store.get("t_ref") is None and len(store) == 0


async def test_caches_are_evicted_least_recently_used_first() -> None:
    store = MemoryStore(max_bytes=10 * (1000 + 200))
    for i in range(10):
        await store.set(f"c{i}", b"x" * 1000, evictable=True)
    assert await store.get("c0") is not None  # c0 is now the most recently used
    await store.set_many({"c10": b"x" * 1000, "c11": b"x" * 1000}, evictable=True)
    assert store.entries.bytes <= store.entries.max_bytes
    assert await store.get("c0") is not None
    assert await store.get_many(["c1", "c2"]) == [None, None]


async def test_live_state_is_never_evicted_new_state_is_refused() -> None:
    store = MemoryStore(max_bytes=5 * (1000 + 200))
    await store.set("cache", b"x" * 1000, evictable=True)
    for i in range(4):
        await store.set(f"episode{i}", b"s" * 1000, ttl_s=3600)
    await store.set("episode4", b"s" * 1000, ttl_s=3600)  # evicts the cache entry to fit
    assert await store.get("cache") is None
    with pytest.raises(StoreFull) as refused:
        await store.set("episode5", b"s" * 1000, ttl_s=3600)
    assert isinstance(refused.value, StoreUnavailable)  # services already answer 503 for it
    await store.set("episode0", b"s" * 1500, ttl_s=3600)  # a live episode's next step is stored
    assert await store.add("episode0:lock", b"1", ttl_s=120) is True  # so is its lock
    await store.set("late-cache", b"x" * 1000, evictable=True)  # a cache that cannot fit is not kept
    assert await store.get("late-cache") is None
    assert all([await store.get(f"episode{i}") for i in range(5)])
    assert await store.delete("episode1") and await store.delete("episode2")
    await store.set("episode5", b"s" * 1000, ttl_s=3600)  # room again once episodes end


async def test_redis_keys_always_get_a_ttl(redis_url: str, key_prefix: str) -> None:
    store = RedisStore(redis_url, secret="test-store-secret-0123456789", default_ttl_s=600)
    await store.set(key_prefix + "a", b"1")
    await store.set_many({key_prefix + "b": b"2"}, evictable=True)
    await store.add(key_prefix + "c", b"3")
    await store.lease("e", {key_prefix + "d": Claim(2, 5)}, 600)
    await store.lease("e", {key_prefix + "d": Claim(1, 5)}, 300)  # a shorter lease never shortens the TTL
    await store.set_state(key_prefix + "e", b"5", 0)
    await store.close()
    client = redis.Redis.from_url(redis_url)
    keys = [key_prefix + k for k in ("a", "b", "c", "d", "d:amounts", "e")] + [version_key(key_prefix + "e")]
    ttls = [client.pttl(key) for key in keys]
    client.delete(version_key(key_prefix + "e"))
    client.close()
    assert all(0 < ttl <= 600_000 for ttl in ttls), ttls


@pytest.mark.parametrize("name", list(declared()))
def test_every_service_builds_its_store_from_the_settings(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CORRGRPO_STORE_TTL_S and CORRGRPO_MEMORY_STORE_MAX_BYTES reach every service's store (the code service
    built its own store from the Redis URL alone, so both were silently ignored there)."""
    monkeypatch.setenv("CORRGRPO_STORE_TTL_S", "5")
    monkeypatch.setenv("CORRGRPO_MEMORY_STORE_MAX_BYTES", "1234")
    monkeypatch.setenv("CORRGRPO_CODE_WORKERS", "1")
    monkeypatch.delenv("CORRGRPO_REDIS_URL", raising=False)
    store = declared()[name].build().state.store
    assert isinstance(store, MemoryStore) and (store.default_ttl_s, store.entries.max_bytes) == (5, 1234)
