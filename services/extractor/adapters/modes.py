"""Extraction modes in the extractor's schema: ``project_modes`` (a project's own mode, projected
from its ``extractionmode`` events) and ``waiting`` (pending logs left to agents)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import asyncpg

from contracts.extraction_modes import ExtractionMode
from services.extractor.application.ports import LogNotice


class PgModes:
    def __init__(self, pool: asyncpg.Pool, schema: str = "extractor") -> None:
        self.pool = pool
        self.s = schema

    # a project's own mode ------------------------------------------------------------------------
    async def project_modes(self, tenant: str) -> dict[str, ExtractionMode]:
        rows = await self.pool.fetch(f"SELECT project, mode FROM {self.s}.project_modes WHERE tenant = $1 "
                                     "ORDER BY project", tenant)
        return {r["project"]: ExtractionMode(r["mode"]) for r in rows}

    async def project_mode(self, tenant: str, project: str) -> ExtractionMode | None:
        mode = await self.pool.fetchval(f"SELECT mode FROM {self.s}.project_modes WHERE tenant = $1 AND project = $2",
                                        tenant, project)
        return ExtractionMode(mode) if mode else None

    async def set_project_mode(self, tenant: str, project: str, mode: ExtractionMode | None) -> None:
        if mode is None:
            await self.pool.execute(f"DELETE FROM {self.s}.project_modes WHERE tenant = $1 AND project = $2",
                                    tenant, project)
            return
        await self.pool.execute(
            f"INSERT INTO {self.s}.project_modes (tenant, project, mode) VALUES ($1, $2, $3) "
            f"ON CONFLICT (tenant, project) DO UPDATE SET mode = EXCLUDED.mode, updated_at = now()",
            tenant, project, mode.value)

    async def replace_project_modes(self, modes: Iterable[tuple[str, str, ExtractionMode]]) -> int:
        """The table rebuilt from scratch (a replay of the event log): how many projects."""
        rows = [(t, p, m.value) for t, p, m in modes]
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"DELETE FROM {self.s}.project_modes")
            await conn.executemany(f"INSERT INTO {self.s}.project_modes (tenant, project, mode) VALUES ($1, $2, $3)",
                                   rows)
        return len(rows)

    # logs left to agents -------------------------------------------------------------------------
    async def wait(self, notice: LogNotice, since: datetime) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.waiting (tenant, log_id, project, version, pending_since) VALUES ($1, $2, $3, $4, $5) "
            f"ON CONFLICT (tenant, log_id) DO UPDATE SET version = GREATEST(waiting.version, EXCLUDED.version),"
            f" project = EXCLUDED.project, pending_since = LEAST(waiting.pending_since, EXCLUDED.pending_since)",
            notice.tenant, notice.log_id, notice.project, notice.version, since)

    async def done_waiting(self, tenant: str, log_id: str) -> None:
        await self.pool.execute(f"DELETE FROM {self.s}.waiting WHERE tenant = $1 AND log_id = $2", tenant, log_id)

    async def waiting(self, limit: int = 1_000) -> list[tuple[LogNotice, datetime]]:
        rows = await self.pool.fetch(
            f"SELECT tenant, log_id, project, version, pending_since FROM {self.s}.waiting "
            f"ORDER BY pending_since LIMIT $1", limit)
        return [(LogNotice(tenant=r["tenant"], log_id=r["log_id"], status="pending", version=r["version"],
                           project=r["project"], since=r["pending_since"]), r["pending_since"]) for r in rows]
