"""Postgres plumbing: a connection pool and versioned SQL migrations applied at start-up.

Each service owns one schema and keeps its migrations as numbered SQL files
(``0001_init.sql``, ``0002_….sql``) in a folder of its own. ``migrate`` applies the missing ones in
order, each in its own transaction, under an advisory lock so that replicas starting together do
not race. Applied versions are recorded in ``<schema>.schema_migrations`` with the SHA-256 of the
file: a migration is append-only, and one edited after it was applied stops the service with a
message saying so (the database would otherwise silently keep the old version).

A schema belongs to one Engram install (its bus namespace): ``<schema>.schema_owner`` records the
namespace that first migrated it, and another namespace is refused. Two installs sharing a schema
would read each other's rows, and a replay of one would empty the other's read model.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import asyncpg

MIN_SERVER_VERSION = 150000  # PostgreSQL 15
_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class DatabaseUnavailable(Exception):
    """Postgres could not be reached or is too old; the message says what to do."""


class SchemaConflict(DatabaseUnavailable):
    """The schema belongs to another install, or an applied migration was edited."""


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


#: SQLSTATEs a statement raises again with the same data: bad data (class 22: a NUL byte in text,
#: a value out of range, ...), a NOT NULL or a CHECK constraint it can never satisfy.
_DETERMINISTIC_CLASSES = ("22",)
_DETERMINISTIC_STATES = frozenset({"23502", "23514"})


def deterministic_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a Postgres error that retrying the same message can
    never clear (see ``_DETERMINISTIC_CLASSES``): the bus dead-letters such a message at once
    instead of retrying it ``max_deliver`` times. A unique violation is not one (a concurrent
    writer, gone on retry); nor is a lost connection or a serialization failure."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        state = getattr(seen, "sqlstate", None) if isinstance(seen, asyncpg.PostgresError) else None
        if state and (state.startswith(_DETERMINISTIC_CLASSES) or state in _DETERMINISTIC_STATES):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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


async def migrate(
    pool: asyncpg.Pool, schema: str, folder: Path, *, owner: str, ledger: str = "schema_migrations"
) -> list[str]:
    """Claim ``schema`` for the install ``owner`` (its namespace) and apply its missing migrations;
    return the names applied now. ``ledger`` is the table recording them: a service's own
    migrations use ``schema_migrations``; the tables ``kit`` keeps in a service's schema (its
    command log) are migrated by kit with a ledger of their own."""
    if not _SCHEMA.match(schema) or not _SCHEMA.match(ledger):
        raise ValueError(f"invalid schema or ledger name {schema!r}.{ledger!r}")
    applied_now: list[str] = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock(hashtext($1))", f"engram-migrate-{schema}")
        try:
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            await _claim(conn, schema, owner)
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {schema}.{ledger} ("
                " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            await conn.execute(f"ALTER TABLE {schema}.{ledger} ADD COLUMN IF NOT EXISTS checksum text")
            done = {r["version"]: r["checksum"] for r in
                    await conn.fetch(f"SELECT version, checksum FROM {schema}.{ledger}")}
            for version, name, path in discover(folder):
                text = path.read_text(encoding="utf-8")
                checksum = hashlib.sha256(text.encode()).hexdigest()
                if version in done:
                    if done[version] is None:  # applied before checksums were kept: trust it from now on
                        await conn.execute(f"UPDATE {schema}.{ledger} SET checksum = $2 WHERE version = $1",
                                           version, checksum)
                    elif done[version] != checksum:
                        raise SchemaConflict(
                            f"migration {name} of schema {schema!r} was changed after it was applied here "
                            f"(applied sha256 {done[version][:12]}…, file {checksum[:12]}…). Applied migrations "
                            "are append-only: restore the file and put the change in a new numbered migration."
                        )
                    continue
                async with conn.transaction():
                    await conn.execute(text.replace("{schema}", schema))
                    await conn.execute(
                        f"INSERT INTO {schema}.{ledger} (version, name, checksum) VALUES ($1, $2, $3)",
                        version, name, checksum,
                    )
                applied_now.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", f"engram-migrate-{schema}")
    return applied_now


async def _claim(conn: asyncpg.Connection, schema: str, owner: str) -> None:
    await conn.execute(
        f"CREATE TABLE IF NOT EXISTS {schema}.schema_owner (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),"
        " namespace text NOT NULL, claimed_at timestamptz NOT NULL DEFAULT now())"
    )
    await conn.execute(f"INSERT INTO {schema}.schema_owner (namespace) VALUES ($1) ON CONFLICT DO NOTHING", owner)
    found = await conn.fetchval(f"SELECT namespace FROM {schema}.schema_owner")
    if found != owner:
        raise SchemaConflict(
            f"Postgres schema {schema!r} belongs to the Engram install with namespace {found!r}, not {owner!r}: "
            "two installs must not share a schema (each would read the other's rows, and a replay of one would "
            "empty the other's). Give this install its own database (ENGRAM_DATABASE_URL) or its own schemas "
            "(ENGRAM_MEMORY_SCHEMA, ENGRAM_AUTH_SCHEMA)."
        )


async def delete_tenant_rows(pool: asyncpg.Pool, schema: str, tenant: str) -> dict[str, int]:
    """Delete one tenant's rows from every table of ``schema`` that has a ``tenant`` column (tables
    added by later migrations included), in one transaction; returns the rows removed per table.
    A service purging a user calls it on its own schema only."""
    removed: dict[str, int] = {}
    async with pool.acquire() as conn, conn.transaction():
        tables = await conn.fetch(
            """SELECT table_name FROM information_schema.columns
               WHERE table_schema = $1 AND column_name = 'tenant' ORDER BY table_name""", schema)
        for row in tables:
            status = await conn.execute(f'DELETE FROM {schema}."{row["table_name"]}" WHERE tenant = $1', tenant)
            removed[row["table_name"]] = int(status.split()[-1])
    return removed
