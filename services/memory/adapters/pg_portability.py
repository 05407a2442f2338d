"""The read model's side of portability: ids in stable order for export pages, and the purge of
every row of a user in the memory schema."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from uuid import UUID

import asyncpg

from contracts.portability import RecordKind
from kit.pg import delete_tenant_rows

_TABLES: dict[RecordKind, str] = {
    "memory": "memories", "shared_memory": "shared_memories", "daily_log": "daily_logs",
    "extraction_task": "extraction_tasks", "extraction_result": "extraction_results",
}


class PgPortability:
    def __init__(self, pool: asyncpg.Pool, schema: str = "memory") -> None:
        self.pool = pool
        self.s = schema

    async def page_ids(self, kind: RecordKind, tenant: str, project: str | None, after: UUID | None,
                       limit: int) -> list[UUID]:
        table = _TABLES[kind]
        where = ["tenant = $1", "($2::uuid IS NULL OR id > $2)"]
        if project is not None and kind != "shared_memory":
            where.append("project = $4")
        args: list[object] = [tenant, after, limit] + ([project] if project is not None and kind != "shared_memory" else [])
        rows = await self.pool.fetch(
            f"SELECT id FROM {self.s}.{table} WHERE {' AND '.join(where)} ORDER BY id LIMIT $3", *args)
        return [r["id"] for r in rows]

    async def log_refs(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, tuple[str, date]]:
        if not ids:
            return {}
        rows = await self.pool.fetch(
            f"SELECT id, project, log_date FROM {self.s}.daily_logs WHERE tenant = $1 AND id = ANY($2::uuid[])",
            tenant, list(ids))
        return {r["id"]: (r["project"], r["log_date"]) for r in rows}

    async def memory_ids(self, tenant: str) -> list[UUID]:
        rows = await self.pool.fetch(f"SELECT id FROM {self.s}.memories WHERE tenant = $1", tenant)
        return [r["id"] for r in rows]

    async def delete_tenant(self, tenant: str) -> dict[str, int]:
        """Every table of the schema with a ``tenant`` column (those added later included)."""
        return await delete_tenant_rows(self.pool, self.s, tenant)
