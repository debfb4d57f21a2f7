"""One test body, two stores: in-memory and the real Redis server; then what only Redis needs
(authenticated values)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis

from corrgrpo_common import MemoryStore, RedisStore, ServiceSettings, Store, StoreUnavailable, make_store
from corrgrpo_common.store.errors import StoreConflict, StoreMisconfigured, StoreTampered
from corrgrpo_common.store.interface import Claim, Versioned
from corrgrpo_common.store.redis_store import version_key

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


def counts(**limits: int) -> dict[str, Claim]:
    return {group: Claim(1, limit) for group, limit in limits.items()}


async def test_leases_are_capped_per_group_retaken_released_and_expire(store: tuple[Store, str]) -> None:
    s, p = store
    mine = {p + "client:a": Claim(1, 2), p + "all": Claim(1, 3)}
    theirs, everyone = {p + "client:b": Claim(1, 5), p + "all": Claim(1, 3)}, p + "all"
    assert await s.lease("e1", mine, 1) is None and await s.lease("e2", mine, 1) is None
    assert await s.lease("e3", mine, 1) == p + "client:a"  # over its own share
    assert await s.lease("e2", mine, 1) is None  # a member already held is not counted twice
    assert await s.lease("f1", theirs, 1) is None
    assert await s.lease("f2", theirs, 1) == everyone  # room in its own group, none in the total
    await s.release("e1", list(mine))
    assert await s.lease("f2", theirs, 1) is None
    await asyncio.sleep(0.6)
    assert await s.lease("e2", mine, 2) is None  # taken again: held 2 s from now
    await asyncio.sleep(0.7)  # f1 and f2 idled out; e2 is still held
    assert await s.lease("e4", mine, 1) is None
    assert await s.lease("e5", mine, 1) == p + "client:a"
    assert await s.lease("f3", theirs, 1) is None
    assert await s.lease("f4", theirs, 1) == everyone


async def test_leases_hold_amounts_that_grow_only_within_the_limit(store: tuple[Store, str]) -> None:
    """Bytes as well as places: what a member holds is replaced when it leases again; shrinking fits."""
    s, p = store
    mine, everyone = p + "bytes:a", p + "bytes:all"

    def claims(own: int, total: int) -> dict[str, Claim]:
        return {mine: Claim(own, 1000), everyone: Claim(total, 1500)}

    assert await s.lease("e1", claims(600, 600), 5) is None
    assert await s.lease("e2", claims(500, 500), 5) == mine  # 1,100 of 1,000
    assert await s.lease("e2", claims(400, 400), 5) is None  # exactly 1,000
    assert await s.lease("e1", claims(601, 601), 5) == mine  # past the limit: refused, e1 still holds 600
    assert await s.lease("f1", {p + "bytes:b": Claim(600, 1000), everyone: Claim(600, 1500)}, 5) == everyone
    assert await s.lease("e1", claims(100, 100), 5) is None  # shrinking frees 500
    assert await s.lease("f1", {p + "bytes:b": Claim(600, 1000), everyone: Claim(600, 1500)}, 5) is None
    assert await s.lease("e3", claims(501, 0), 5) == mine  # 100 + 400 + 501
    await s.release("e2", [mine])  # released from one group only: e2 still counts in the total
    assert await s.lease("e3", claims(501, 0), 5) is None
    assert await s.lease("e4", {everyone: Claim(401, 1500)}, 5) == everyone  # e1 100 + e2 400 + f1 600 + e3 0
    assert await s.lease("e4", {everyone: Claim(400, 1500)}, 5) is None
    assert await s.lease("e5", claims(0, 0), 0.3) is None  # nothing claimed always fits
    assert await s.lease("g1", {p + "bytes:c": Claim(300, 1000)}, 0.3) is None
    await asyncio.sleep(0.5)
    assert await s.lease("g2", {p + "bytes:c": Claim(1000, 1000)}, 5) is None  # g1's 300 lapsed


async def test_state_writes_name_the_version_they_replace(store: tuple[Store, str]) -> None:
    s, p = store
    key = p + "episode"
    assert await s.get_state(key) is None
    assert await s.set_state(key, b"start", 0, ttl_s=5) == 1
    with pytest.raises(StoreConflict):
        await s.set_state(key, b"lost update", 0, ttl_s=5)  # another writer read version 0 too
    assert await s.get_state(key) == Versioned(b"start", 1)
    assert await s.set_state(key, b"step", 1, ttl_s=5) == 2
    with pytest.raises(StoreConflict):
        await s.set_state(key, b"stale", 1, ttl_s=5)
    assert await s.get_state(key) == Versioned(b"step", 2)
    await s.set_state(p + "brief", b"x", 0, ttl_s=0.05)
    await asyncio.sleep(0.15)
    assert await s.get_state(p + "brief") is None


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
        # readers that skip a missing store skip a forged value
        assert isinstance(StoreTampered("x"), StoreUnavailable)
        assert [r for r in caplog.records if r.name == "corrgrpo.store" and r.levelname == "ERROR"]
    finally:
        client.close()
    stranger = RedisStore(redis_url, secret="another-secret-0123456789")
    await stranger.set(key, b"1")
    with pytest.raises(StoreTampered):  # a replica with another secret is refused too
        await redis_store.get(key)
    await stranger.close()


async def test_an_older_genuine_state_put_back_under_its_key_is_refused(
    redis_store: RedisStore, redis_url: str, key_prefix: str
) -> None:
    """Freshness (issue 48.7): a genuine sealed value of an earlier version, replayed under its own key, is
    refused; so is one whose version key was deleted, and, by a replica that saw the later version, a rollback
    of both."""
    key = key_prefix + "episode"
    await redis_store.set_state(key, b"paid", 0, ttl_s=60)
    client = redis.Redis.from_url(redis_url)
    try:
        first = client.get(key)
        await redis_store.set_state(key, b"paid and sent", 1, ttl_s=60)
        second, version_two = client.get(key), client.get(version_key(key))
        assert first is not None and second is not None and version_two == b"2"
        client.set(key, first, px=60_000)  # the payment rolled back
        with pytest.raises(StoreTampered, match="version 1, not the current"):
            await redis_store.get_state(key)
        assert client.exists(key) == 0, "a refused value is deleted"
        assert client.get(version_key(key)) == b"2", "its version key stays: a replay again is refused too"
        client.set(key, first, px=60_000)
        client.delete(version_key(key))  # a value without its version key is not current either
        with pytest.raises(StoreTampered):
            await redis_store.get_state(key)
        client.set(key, first, px=60_000)
        client.set(version_key(key), b"1", px=60_000)  # both put back: this process saw version 2
        with pytest.raises(StoreTampered, match="this process saw 2"):
            await redis_store.get_state(key)
        client.set(key, second, px=60_000)
        client.set(version_key(key), b"2", px=60_000)
        assert await redis_store.get_state(key) == Versioned(b"paid and sent", 2)  # the current one opens
        with pytest.raises(StoreConflict):
            await redis_store.set_state(key, b"from version 1", 1, ttl_s=60)  # a writer that read version 1
    finally:
        client.delete(version_key(key))
        client.close()


def test_redis_without_a_secret_refuses_to_start(redis_url: str) -> None:
    with pytest.raises(StoreMisconfigured, match="CORRGRPO_STORE_SECRET"):
        make_store(ServiceSettings(redis_url=redis_url, store_secret=None))
    with pytest.raises(StoreMisconfigured):
        RedisStore(redis_url, secret="short")
    assert isinstance(make_store(ServiceSettings(redis_url=None, store_secret=None)), MemoryStore)
