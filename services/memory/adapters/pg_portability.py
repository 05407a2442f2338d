"""The read model's side of portability: ids in stable order for export pages, the keys and titles
a restore into another user maps names by, and the purge of every row of a user in the memory
schema (with the memories it derives the embedding cache's keys from)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from uuid import UUID

import asyncpg

from contracts.memory import MemoryState
from contracts.portability import RecordKind
from kit.pg import delete_tenant_rows
from services.memory.adapters.pg_store import _COLUMNS, _state

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

    async def memory_states(self, tenant: str, after: UUID | None, limit: int) -> list[MemoryState]:
        rows = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories WHERE tenant = $1 AND ($2::uuid IS NULL OR id > $2)
                ORDER BY id LIMIT $3""", tenant, after, limit)
        return [_state(r) for r in rows]

    async def cache_owned(self, tenant: str) -> list[bytes]:
        rows = await self.pool.fetch(f"SELECT digest FROM {self.s}.embedding_cache_owners WHERE tenant = $1", tenant)
        return [bytes(r["digest"]) for r in rows]

    async def keyed_memories(self, tenant: str) -> list[tuple[str, str]]:
        rows = await self.pool.fetch(
            f"SELECT DISTINCT project, memory_key FROM {self.s}.memories WHERE tenant = $1 AND memory_key IS NOT NULL",
            tenant)
        return [(r["project"], r["memory_key"]) for r in rows]

    async def shared_titles(self, tenant: str) -> list[str]:
        rows = await self.pool.fetch(f"SELECT title FROM {self.s}.shared_memories WHERE tenant = $1", tenant)
        return [r["title"] for r in rows]

    async def delete_tenant(self, tenant: str) -> dict[str, int]:
        """Every table of the schema with a ``tenant`` column (those added later included)."""
        return await delete_tenant_rows(self.pool, self.s, tenant)
