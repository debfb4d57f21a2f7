"""One test body, two stores: in-memory and the real Redis server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from corrgrpo_service import MemoryStore, RedisStore, Store, StoreUnavailable


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, str]]:
    if request.param == "memory":
        yield MemoryStore(), f"t:{uuid.uuid4().hex}:"
    else:
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("key_prefix")
        redis_store = RedisStore(url)
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
    s = RedisStore("redis://127.0.0.1:1/0", timeout_s=0.5)
    with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:1"):
        await s.get("k")
    with pytest.raises(StoreUnavailable):
        await s.ping()
    await s.close()
