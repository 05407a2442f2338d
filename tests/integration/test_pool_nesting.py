"""More operations at once than the pool has connections: none holds a pooled connection (a
transaction) while it waits for another connection of the same pool, or they would all wait forever
(asyncpg's ``pool.acquire()`` has no timeout)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from kit.pg import create_pool
from kit.projector import CheckpointedProjector
from services.graph.adapters.pg_store import PgGraphStore
from services.memory.adapters.pg_store import MemoryStore

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("service", ["memory", "graph"])
async def test_more_checkpoint_moves_at_once_than_the_pool_has_connections_all_finish(infra: Any, service: str) -> None:
    """A replay hands over to the live consumer with ``move_checkpoint``: the replay's checkpoint
    (read through the pool) is read before the transaction that advances the live one. Read
    inside it, pool_size + 6 moves at once held every connection and each waited for another: the
    memory store's hung; the graph's queued on its order lock behind the one waiting for a
    connection, until the lock statements' 30 s command timeout failed them."""
    pool = await create_pool(infra.database_url)
    schema = f"pn{service[0]}_" + uuid.uuid4().hex[:8]
    try:
        store: Any = MemoryStore(pool, schema) if service == "memory" else PgGraphStore(pool, schema)
        await store.migrate(owner="test")
        projector: CheckpointedProjector[Any] = CheckpointedProjector(store)
        async with store.transaction() as tx:
            await tx.advance_checkpoint("replay", 42)
        targets = [f"live-{i}" for i in range(pool.get_max_size() + 6)]
        await asyncio.wait_for(asyncio.gather(*(projector.move_checkpoint("replay", t) for t in targets)), 120)
        assert [await store.checkpoint(t) for t in targets] == [42] * len(targets)
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await pool.close()
