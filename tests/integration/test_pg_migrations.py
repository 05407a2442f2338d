"""Schema migrations on a real Postgres: applied once, append-only, and a schema belongs to one install."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from kit.bus import Bus
from kit.pg import SchemaConflict, create_pool, migrate
from services.memory.config import MemorySettings
from services.memory.main import memory_app

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool(infra) -> AsyncIterator[asyncpg.Pool]:  # type: ignore[no-untyped-def]
    p = await create_pool(infra.database_url, max_size=4)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
def schema() -> str:
    return "mig_" + uuid.uuid4().hex[:8]


def write(folder: Path, name: str, sql: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(sql, encoding="utf-8")


async def test_applies_in_order_once_and_records_checksums(pool: asyncpg.Pool, schema: str, tmp_path: Path) -> None:
    write(tmp_path, "0001_init.sql", "CREATE TABLE {schema}.t (id int PRIMARY KEY);")
    write(tmp_path, "0002_more.sql", "ALTER TABLE {schema}.t ADD COLUMN note text;")
    assert await migrate(pool, schema, tmp_path, owner="ns1") == ["0001_init", "0002_more"]
    assert await migrate(pool, schema, tmp_path, owner="ns1") == []
    rows = await pool.fetch(f"SELECT version, checksum FROM {schema}.schema_migrations ORDER BY version")
    assert [r["version"] for r in rows] == [1, 2]
    assert all(len(r["checksum"]) == 64 for r in rows)
    await pool.execute(f"INSERT INTO {schema}.t (id, note) VALUES (1, 'x')")


async def test_replicas_starting_together_apply_each_migration_once(
    pool: asyncpg.Pool, schema: str, tmp_path: Path
) -> None:
    write(tmp_path, "0001_init.sql", "CREATE TABLE {schema}.t (id int PRIMARY KEY);")
    results = await asyncio.gather(*(migrate(pool, schema, tmp_path, owner="ns1") for _ in range(3)))
    assert sorted(map(len, results)) == [0, 0, 1]


async def test_another_install_is_refused_and_nothing_changes(pool: asyncpg.Pool, schema: str, tmp_path: Path) -> None:
    write(tmp_path, "0001_init.sql", "CREATE TABLE {schema}.t (id int PRIMARY KEY);")
    await migrate(pool, schema, tmp_path, owner="prod")
    write(tmp_path, "0002_more.sql", "CREATE TABLE {schema}.u (id int PRIMARY KEY);")
    with pytest.raises(SchemaConflict) as err:
        await migrate(pool, schema, tmp_path, owner="staging")
    message = str(err.value)
    assert "'prod'" in message and "'staging'" in message and "ENGRAM_MEMORY_SCHEMA" in message
    assert await pool.fetchval("SELECT to_regclass($1)", f"{schema}.u") is None  # the other's migration did not run
    assert await migrate(pool, schema, tmp_path, owner="prod") == ["0002_more"]  # the owner still can


async def test_an_applied_migration_that_was_edited_stops_start_up(
    pool: asyncpg.Pool, schema: str, tmp_path: Path
) -> None:
    write(tmp_path, "0001_init.sql", "CREATE TABLE {schema}.t (id int PRIMARY KEY);")
    await migrate(pool, schema, tmp_path, owner="ns1")
    write(tmp_path, "0001_init.sql", "CREATE TABLE {schema}.t (id bigint PRIMARY KEY);")
    write(tmp_path, "0002_more.sql", "CREATE TABLE {schema}.u (id int PRIMARY KEY);")
    with pytest.raises(SchemaConflict, match="0001_init .*changed after it was applied.*new numbered migration"):
        await migrate(pool, schema, tmp_path, owner="ns1")
    assert await pool.fetchval("SELECT to_regclass($1)", f"{schema}.u") is None


async def test_schemas_from_before_checksums_are_adopted(pool: asyncpg.Pool, schema: str, tmp_path: Path) -> None:
    """A database migrated by an older Engram (no owner, no checksum column) is claimed and checked from now on."""
    await pool.execute(f"CREATE SCHEMA {schema}")
    await pool.execute(f"CREATE TABLE {schema}.schema_migrations (version int PRIMARY KEY, name text NOT NULL, "
                       "applied_at timestamptz NOT NULL DEFAULT now())")
    await pool.execute(f"CREATE TABLE {schema}.t (id int PRIMARY KEY)")
    await pool.execute(f"INSERT INTO {schema}.schema_migrations (version, name) VALUES (1, '0001_init')")
    write(tmp_path, "0001_init.sql", "CREATE TABLE {schema}.t (id int PRIMARY KEY);")
    assert await migrate(pool, schema, tmp_path, owner="old") == []
    assert await pool.fetchval(f"SELECT namespace FROM {schema}.schema_owner") == "old"
    assert await pool.fetchval(f"SELECT checksum FROM {schema}.schema_migrations") is not None
    write(tmp_path, "0001_init.sql", "CREATE TABLE {schema}.t (id text PRIMARY KEY);")
    with pytest.raises(SchemaConflict):
        await migrate(pool, schema, tmp_path, owner="old")


async def test_memory_service_refuses_a_schema_of_another_namespace(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    schema = "mem_" + uuid.uuid4().hex[:8]
    first = MemorySettings(home=tmp_path / "a", nats_url=infra.nats_url, database_url=infra.database_url,
                           namespace=infra.fresh_namespace(), memory_schema=schema)
    second = first.model_copy(update={"home": tmp_path / "b", "namespace": infra.fresh_namespace()})
    async with memory_app(first) as app:
        try:
            with pytest.raises(SchemaConflict, match=first.namespace):
                async with memory_app(second):
                    pass
        finally:
            await app.bus.delete_streams()
            other = await Bus.connect(infra.nats_url, second.names, name="test-cleanup")
            await other.delete_streams()  # the refused service had created its streams already
            await other.close()
