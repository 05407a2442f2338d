"""The embedding cache in Postgres is bounded: past ``max_entries`` the oldest added entries go."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kit.pg import create_pool
from services.memory.adapters.embedding_cache import PgEmbeddingCache
from services.memory.adapters.pg_store import MemoryStore

pytestmark = pytest.mark.integration


def items(prefix: str, n: int) -> list[tuple[str, bytes, bytes]]:
    return [("model", f"{prefix}{i}".encode(), b"v" * 8) for i in range(n)]


async def test_the_oldest_entries_are_evicted_past_the_bound(infra: Any) -> None:
    pool = await create_pool(infra.database_url)
    schema = "ecb_" + uuid.uuid4().hex[:8]
    try:
        await MemoryStore(pool, schema).migrate(owner="test")
        # an entry from before the bound existed (no added_at): the first to go
        await pool.execute(f"INSERT INTO {schema}.embedding_cache (model, digest, value, added_at) "
                           f"VALUES ('model', 'legacy', 'v', NULL)")
        cache = PgEmbeddingCache(pool, schema, max_entries=8, trim_every=5)
        await cache.put_many(items("a", 4))  # 5 entries: under the bound, and no trim yet
        assert await cache.count() == 5 and cache.evicted == 0
        await cache.put_many(items("b", 5))  # 10 entries, 5 written: trimmed to 8
        assert await cache.count() == 8 and cache.evicted == 2
        found = await cache.get_many([("model", b"legacy"), ("model", b"a0"), ("model", b"a1")])
        assert not found.get(("model", b"legacy"))
        await cache.put_many(items("c", 5))
        assert await cache.count() == 8 and cache.evicted == 7
        keys = [("model", f"{p}{i}".encode()) for p, n in (("a", 4), ("b", 5), ("c", 5)) for i in range(n)]
        kept = await cache.get_many(keys)
        assert set(kept) >= {("model", f"c{i}".encode()) for i in range(5)}  # the newest stay
        assert not set(kept) & {("model", f"a{i}".encode()) for i in range(4)}  # the oldest went
        await cache.put_many(items("c", 5))  # already there: nothing written, nothing evicted
        assert await cache.count() == 8 and cache.evicted == 7
        assert await cache.trim() == 0
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await pool.close()


async def test_an_unbounded_cache_keeps_everything(infra: Any) -> None:
    pool = await create_pool(infra.database_url)
    schema = "ecu_" + uuid.uuid4().hex[:8]
    try:
        await MemoryStore(pool, schema).migrate(owner="test")
        cache = PgEmbeddingCache(pool, schema, max_entries=0, trim_every=1)
        await cache.put_many(items("a", 30))
        assert await cache.trim() == 0 and await cache.count() == 30
        with pytest.raises(ValueError):
            PgEmbeddingCache(pool, schema, max_entries=-1)
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await pool.close()
