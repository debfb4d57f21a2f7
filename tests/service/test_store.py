"""One test body, two stores: in-memory and the real Redis server; then what only Redis needs (authenticated values)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis

from corrgrpo_common import MemoryStore, RedisStore, ServiceSettings, Store, StoreUnavailable, make_store
from corrgrpo_common.store.errors import StoreMisconfigured, StoreTampered

SECRET = "test-store-secret-0123456789"


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, str]]:
    if request.param == "memory":
        yield MemoryStore(), f"t:{uuid.uuid4().hex}:"
    else:
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("key_prefix")
        redis_store = RedisStore(url, secret=SECRET)
        yield redis_store, prefix
        await redis_store.close()


async def test_get_set_delete(store: tuple[Store, str]) -> None:
    s, p = store
    assert await s.get(p + "a") is None
    await s.set(p + "a", b"1")
    assert await s.get(p + "a") == b"1"
    assert await s.delete(p + "a") is True
    assert await s.delete(p + "a") is False
    assert await s.get(p + "a") is None


async def test_many(store: tuple[Store, str]) -> None:
    s, p = store
    await s.set_many({p + "x": b"1", p + "y": b"2"})
    assert await s.get_many([p + "x", p + "missing", p + "y"]) == [b"1", None, b"2"]
    assert await s.get_many([]) == []


async def test_add_only_when_absent(store: tuple[Store, str]) -> None:
    s, p = store
    assert await s.add(p + "k", b"first") is True
    assert await s.add(p + "k", b"second") is False
    assert await s.get(p + "k") == b"first"


async def test_ttl_expires(store: tuple[Store, str]) -> None:
    s, p = store
    await s.set(p + "t", b"v", ttl_s=0.05)
    await s.set_many({p + "u": b"v"}, ttl_s=0.05)
    assert await s.get(p + "t") == b"v"
    await asyncio.sleep(0.15)
    assert await s.get_many([p + "t", p + "u"]) == [None, None]
    assert await s.add(p + "t", b"again", ttl_s=10) is True


async def test_ping(store: tuple[Store, str]) -> None:
    s, _ = store
    await s.ping()


async def test_unreachable_redis_raises_store_unavailable() -> None:
    s = RedisStore("redis://127.0.0.1:1/0", secret=SECRET, timeout_s=0.5)
    with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:1"):
        await s.get("k")
    with pytest.raises(StoreUnavailable):
        await s.ping()
    await s.close()


async def test_leases_are_capped_per_group_renewed_released_and_expire(store: tuple[Store, str]) -> None:
    s, p = store
    mine, everyone = {p + "client:a": 2, p + "all": 3}, p + "all"
    theirs = {p + "client:b": 5, everyone: 3}
    assert await s.lease("e1", mine, 1) is None and await s.lease("e2", mine, 1) is None
    assert await s.lease("e3", mine, 1) == p + "client:a"  # over its own share
    assert await s.lease("e2", mine, 1) is None  # a member already held is not counted twice
    assert await s.lease("f1", theirs, 1) is None
    assert await s.lease("f2", theirs, 1) == everyone  # room in its own group, none in the total
    await s.release("e1", list(mine))
    assert await s.lease("f2", theirs, 1) is None
    await asyncio.sleep(0.6)
    await s.renew("e2", list(mine), 2)
    await asyncio.sleep(0.7)  # f1 and f2 idled out; e2, renewed, is still held
    assert await s.lease("e4", mine, 1) is None
    assert await s.lease("e5", mine, 1) == p + "client:a"
    assert await s.lease("f3", theirs, 1) is None
    assert await s.lease("f4", theirs, 1) == everyone


@pytest.fixture
async def redis_store(redis_url: str, key_prefix: str) -> AsyncIterator[RedisStore]:
    s = RedisStore(redis_url, secret=SECRET)
    yield s
    await s.close()


async def test_redis_values_are_authenticated_forgeries_refused_and_deleted(
    redis_store: RedisStore, redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    key, other = key_prefix + "verdict", key_prefix + "other"
    await redis_store.set(key, b'{"correct": 0}')
    client = redis.Redis.from_url(redis_url)
    try:
        stored = client.get(key)
        assert stored is not None and stored.endswith(b'{"correct": 0}') and len(stored) == 32 + 14
        client.set(other, stored)  # a genuine value moved to another key
        client.set(key, stored[:32] + b'{"correct": 1}')  # the same MAC over a forged verdict
        for forged in (key, other):
            with pytest.raises(StoreTampered, match="MAC mismatch"):
                await redis_store.get(forged)
            assert client.exists(forged) == 0, "a refused value is deleted, so it is recomputed"
        client.set(key, b"short")
        with pytest.raises(StoreTampered):
            await redis_store.get_many([other, key])
        assert isinstance(StoreTampered("x"), StoreUnavailable)  # readers that skip a missing store skip a forged value
        assert [r for r in caplog.records if r.name == "corrgrpo.store" and r.levelname == "ERROR"]
    finally:
        client.close()
    stranger = RedisStore(redis_url, secret="another-secret-0123456789")
    await stranger.set(key, b"1")
    with pytest.raises(StoreTampered):  # a replica with another secret is refused too
        await redis_store.get(key)
    await stranger.close()


def test_redis_without_a_secret_refuses_to_start(redis_url: str) -> None:
    with pytest.raises(StoreMisconfigured, match="CORRGRPO_STORE_SECRET"):
        make_store(ServiceSettings(redis_url=redis_url, store_secret=None))
    with pytest.raises(StoreMisconfigured):
        RedisStore(redis_url, secret="short")
    assert isinstance(make_store(ServiceSettings(redis_url=None, store_secret=None)), MemoryStore)
