"""The tenants with daily logs, in the extractor's own schema (``extractor.tenants``): noted from
every daily-log event the consumer reads, rebuilt from the event log by a replay."""

from __future__ import annotations

from collections.abc import Iterable

import asyncpg


class PgTenants:
    def __init__(self, pool: asyncpg.Pool, schema: str = "extractor") -> None:
        self.pool = pool
        self.schema = schema
        self._known: set[str] = set()

    async def seen(self, tenant: str) -> None:
        if tenant in self._known:
            return
        await self.pool.execute(f"INSERT INTO {self.schema}.tenants (tenant) VALUES ($1) ON CONFLICT DO NOTHING",
                                tenant)
        self._known.add(tenant)

    async def all(self) -> list[str]:
        rows = await self.pool.fetch(f"SELECT tenant FROM {self.schema}.tenants ORDER BY tenant")
        return [r["tenant"] for r in rows]

    async def replace(self, tenants: Iterable[str]) -> int:
        """The list rebuilt from scratch (a replay of the event log): how many tenants."""
        found = sorted(set(tenants))
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"DELETE FROM {self.schema}.tenants")
            await conn.executemany(f"INSERT INTO {self.schema}.tenants (tenant) VALUES ($1)", [(t,) for t in found])
        self._known = set(found)
        return len(found)
