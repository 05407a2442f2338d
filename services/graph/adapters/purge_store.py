"""The graph service's rows of one user, removed for good (the purge of a user)."""

from __future__ import annotations

import asyncpg

from kit.pg import delete_tenant_rows


class PgGraphPurge:
    def __init__(self, pool: asyncpg.Pool, schema: str = "graph") -> None:
        self.pool = pool
        self.s = schema

    async def purge(self, tenant: str) -> dict[str, int]:
        """Every table of the schema with a ``tenant`` column (those added later included)."""
        return await delete_tenant_rows(self.pool, self.s, tenant)
