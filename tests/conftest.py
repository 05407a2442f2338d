"""Test infrastructure: real NATS JetStream and Postgres.

Set ENGRAM_TEST_NATS_URL / ENGRAM_TEST_DATABASE_URL to use running servers; otherwise the
embedded launchers (the same ones `engram up` uses) start them in a temporary folder. Every
session works in a fresh namespace and a fresh database, and removes both at the end.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from contracts.subjects import Names
from kit.bus import Bus


@dataclass
class Infra:
    nats_url: str
    database_url: str
    admin_database_url: str
    namespace: str
    root: Path

    def fresh_namespace(self) -> str:
        return "t" + uuid.uuid4().hex[:10]


def _with_database(url: str, database: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{database}"


def _admin_sql(url: str, statement: str) -> None:
    """Run one statement outside a transaction (CREATE/DROP DATABASE) on the admin database."""

    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


@pytest.fixture(scope="session")
def infra() -> Iterator[Infra]:
    root = Path(tempfile.mkdtemp(prefix="engram-test-"))
    started = []
    nats_url = os.environ.get("ENGRAM_TEST_NATS_URL")
    pg_url = os.environ.get("ENGRAM_TEST_DATABASE_URL")
    try:
        if not nats_url:
            from deploy.embedded.nats import EmbeddedNats

            nats = EmbeddedNats(root / "nats", port=None)
            nats_url = nats.start()
            started.append(nats)
        if not pg_url:
            from deploy.embedded.postgres import EmbeddedPostgres

            pg = EmbeddedPostgres(root / "postgres", port=None)
            pg_url = pg.start()
            started.append(pg)
        database = "engram_test_" + uuid.uuid4().hex[:10]
        _admin_sql(pg_url, f'CREATE DATABASE "{database}"')
        yield Infra(
            nats_url=nats_url,
            database_url=_with_database(pg_url, database),
            admin_database_url=pg_url,
            namespace="t" + uuid.uuid4().hex[:10],
            root=root,
        )

        _admin_sql(pg_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        for server in reversed(started):
            server.stop()
        if os.environ.get("ENGRAM_TEST_KEEP"):  # keep the services' logs to read after a failure
            print(f"\nENGRAM_TEST_KEEP: the test stack's files (logs) are kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def bus(infra: Infra) -> AsyncIterator[Bus]:
    """A bus in a namespace of its own, streams created, removed afterwards."""
    b = await Bus.connect(infra.nats_url, Names(infra.fresh_namespace()), name="engram-test")
    await b.ensure_streams()
    try:
        yield b
    finally:
        await b.delete_streams()
        await b.close()


@pytest.fixture(scope="session")
async def session_bus(infra: Infra) -> AsyncIterator[Bus]:
    b = await Bus.connect(infra.nats_url, Names(infra.namespace), name="engram-test-session")
    await b.ensure_streams()
    try:
        yield b
    finally:
        await b.delete_streams()
        await b.close()
