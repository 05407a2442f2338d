"""The graph service's rows of one user, removed for good (the purge of a user)."""

from __future__ import annotations

import asyncpg


class PgGraphPurge:
    def __init__(self, pool: asyncpg.Pool, schema: str = "graph") -> None:
        self.pool = pool
        self.s = schema

    async def purge(self, tenant: str) -> dict[str, int]:
        """Every table of the schema with a ``tenant`` column (those added later included)."""
        removed: dict[str, int] = {}
        async with self.pool.acquire() as conn, conn.transaction():
            tables = await conn.fetch(
                """SELECT table_name FROM information_schema.columns
                   WHERE table_schema = $1 AND column_name = 'tenant' ORDER BY table_name""", self.s)
            for row in tables:
                status = await conn.execute(f'DELETE FROM {self.s}."{row["table_name"]}" WHERE tenant = $1', tenant)
                removed[row["table_name"]] = int(status.split()[-1])
        return removed
