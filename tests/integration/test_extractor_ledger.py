"""The extractor's ledger on real Postgres: one row per (log_id, task_id), races included."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from kit.pg import create_pool
from services.extractor.adapters.ledger import PgTaskLedger

pytestmark = pytest.mark.integration


@pytest.fixture
async def ledger(infra) -> AsyncIterator[PgTaskLedger]:  # type: ignore[no-untyped-def]
    pool = await create_pool(infra.database_url, max_size=6)
    schema = "ext_" + uuid.uuid4().hex[:8]
    store = PgTaskLedger(pool, schema)
    try:
        assert await store.migrate(owner="t-ledger") == ["0001_tasks", "0002_tenants", "0003_episodes", "0004_modes"]
        assert await store.migrate(owner="t-ledger") == []
        yield store
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await pool.close()


async def test_one_row_per_log_and_task_and_done_stays_done(ledger: PgTaskLedger) -> None:
    row = await ledger.start("alice", "log-1", "t1")
    assert (row.status, row.attempts) == ("running", 1)
    row.memory_ids, row.facts, row.prompt_tokens = ["m1", "m2"], 2, 123
    await ledger.finish(row)
    again = await ledger.start("alice", "log-1", "t1")
    assert (again.status, again.attempts, again.memory_ids, again.prompt_tokens) == ("done", 1, ["m1", "m2"], 123)
    await ledger.fail("log-1", "t1", "late failure")
    assert (await ledger.get("log-1", "t1")).status == "done"  # type: ignore[union-attr]
    other = await ledger.start("alice", "log-1", "t2")
    assert other.status == "running"
    assert await ledger.counts() == {"done": 1, "running": 1}


async def test_done_means_done_for_a_pending_episode_and_a_later_one_starts_again(ledger: PgTaskLedger) -> None:
    row = await ledger.start("alice", "log-4", "t1", episode=3)
    row.memory_ids = ["m1"]
    await ledger.finish(row)
    for earlier in (1, 3):  # a redelivered or late event of an episode already learned from
        again = await ledger.start("alice", "log-4", "t1", episode=earlier)
        assert (again.status, again.attempts, again.episode) == ("done", 1, 3)
    requeued = await ledger.start("alice", "log-4", "t1", episode=7)  # sent back to pending: version 7
    assert (requeued.status, requeued.attempts, requeued.episode) == ("running", 2, 7)
    assert not requeued.done_for(7) and requeued.memory_ids == ["m1"]
    await ledger.finish(requeued)
    assert (await ledger.get("log-4", "t1")).done_for(7)  # type: ignore[union-attr]


async def test_a_failed_task_runs_again_with_its_attempts_counted(ledger: PgTaskLedger) -> None:
    await ledger.start("alice", "log-2", "t1")
    await ledger.fail("log-2", "t1", "endpoint down")
    failed = await ledger.get("log-2", "t1")
    assert failed is not None and (failed.status, failed.error) == ("failed", "endpoint down")
    retry = await ledger.start("alice", "log-2", "t1")
    assert (retry.status, retry.attempts, retry.error) == ("running", 2, None)


async def test_replicas_starting_one_task_together_share_one_row(ledger: PgTaskLedger) -> None:
    rows = await asyncio.gather(*(ledger.start("alice", "log-3", "t1") for _ in range(20)))
    assert {r.log_id for r in rows} == {"log-3"}
    assert sorted(r.attempts for r in rows) == list(range(1, 21))
    count = await ledger.pool.fetchval(f"SELECT count(*) FROM {ledger.schema}.tasks WHERE log_id = 'log-3'")
    assert count == 1


async def test_the_schema_belongs_to_one_install(ledger: PgTaskLedger) -> None:
    from kit.pg import SchemaConflict

    with pytest.raises(SchemaConflict):
        await ledger.migrate(owner="another-install")
    assert isinstance(ledger.pool, asyncpg.Pool)
