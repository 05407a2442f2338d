"""Postgres plumbing: a connection pool and versioned SQL migrations applied at start-up.

Each service owns one schema and keeps its migrations as numbered SQL files
(``0001_init.sql``, ``0002_….sql``) in a folder of its own. ``migrate`` applies the missing ones in
order, each in its own transaction, under an advisory lock so that replicas starting together do
not race. Applied versions are recorded in ``<schema>.schema_migrations``.
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

MIN_SERVER_VERSION = 150000  # PostgreSQL 15
_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class DatabaseUnavailable(Exception):
    """Postgres could not be reached or is too old; the message says what to do."""


class _PooledConnection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection returned without asyncpg's reset query.

    asyncpg resets a connection on every release (unlock all advisory locks, CLOSE ALL, UNLISTEN,
    RESET ALL): one more round trip per acquire. Engram keeps no session state on pooled
    connections — advisory locks are transaction-scoped (``migrate`` releases its session lock
    itself), and nothing SETs, LISTENs or holds cursors — so there is nothing to reset; an open
    transaction is still rolled back by asyncpg.
    """

    def get_reset_query(self) -> str:
        return ""


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """Open a pool and check the server version."""
    try:
        pool = await asyncpg.create_pool(
            url, min_size=min_size, max_size=max_size, command_timeout=30, connection_class=_PooledConnection
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise DatabaseUnavailable(
            f"cannot connect to Postgres at {redact(url)}: {exc}. Start it (`engram up` does) "
            "or set ENGRAM_DATABASE_URL to a running server."
        ) from exc
    assert pool is not None
    version = await pool.fetchval("SELECT current_setting('server_version_num')::int")
    if version < MIN_SERVER_VERSION:
        await pool.close()
        raise DatabaseUnavailable(f"Postgres {version} is too old: Engram needs PostgreSQL 15 or newer")
    return pool


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def discover(folder: Path) -> list[tuple[int, str, Path]]:
    """Migration files in ``folder``, ordered by version; refuses gaps and duplicates."""
    found = []
    for path in sorted(folder.iterdir()):
        match = _MIGRATION.match(path.name)
        if match:
            found.append((int(match.group(1)), path.stem, path))
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations in {folder} must be numbered 0001, 0002, … without gaps: {versions}")
    return found


async def migrate(pool: asyncpg.Pool, schema: str, folder: Path) -> list[str]:
    """Apply the missing migrations of ``schema``; return the names applied now."""
    if not _SCHEMA.match(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    applied_now: list[str] = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock(hashtext($1))", f"engram-migrate-{schema}")
        try:
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
                " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch(f"SELECT version FROM {schema}.schema_migrations")}
            for version, name, path in discover(folder):
                if version in done:
                    continue
                sql = path.read_text(encoding="utf-8").replace("{schema}", schema)
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        f"INSERT INTO {schema}.schema_migrations (version, name) VALUES ($1, $2)", version, name
                    )
                applied_now.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", f"engram-migrate-{schema}")
    return applied_now
