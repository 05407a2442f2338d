"""The task ledger in Postgres (schema ``extractor``): one row per (log_id, task_id)."""

from __future__ import annotations

from pathlib import Path

import asyncpg

from kit.pg import migrate
from services.extractor.application.ports import TaskRecord

MIGRATIONS = Path(__file__).parent / "migrations"
_COLUMNS = ("log_id, task_id, tenant, status, attempts, memory_ids, facts, prompt_tokens, completion_tokens, "
            "error, updated_at, episode")


def _record(row: asyncpg.Record) -> TaskRecord:
    return TaskRecord(
        log_id=row["log_id"], task_id=row["task_id"], tenant=row["tenant"], status=row["status"],
        attempts=row["attempts"], memory_ids=list(row["memory_ids"]), facts=row["facts"],
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"], error=row["error"],
        updated_at=row["updated_at"], episode=row["episode"],
    )


class PgTaskLedger:
    def __init__(self, pool: asyncpg.Pool, schema: str = "extractor") -> None:
        self.pool = pool
        self.schema = schema

    async def migrate(self, owner: str) -> list[str]:
        return await migrate(self.pool, self.schema, MIGRATIONS, owner=owner)

    async def start(self, tenant: str, log_id: str, task_id: str, episode: int = 0) -> TaskRecord:
        # done stays done for the episode it finished (and earlier ones); a later episode starts again
        done = "(tasks.status = 'done' AND tasks.episode >= EXCLUDED.episode)"
        row = await self.pool.fetchrow(
            f"INSERT INTO {self.schema}.tasks (log_id, task_id, tenant, status, episode) "
            f"VALUES ($1, $2, $3, 'running', $4) "
            f"ON CONFLICT (log_id, task_id) DO UPDATE SET "
            f" status = CASE WHEN {done} THEN 'done' ELSE 'running' END,"
            f" attempts = tasks.attempts + CASE WHEN {done} THEN 0 ELSE 1 END,"
            f" episode = GREATEST(tasks.episode, EXCLUDED.episode),"
            f" error = CASE WHEN {done} THEN tasks.error ELSE NULL END, updated_at = now() "
            f"RETURNING {_COLUMNS}",
            log_id, task_id, tenant, episode,
        )
        return _record(row)

    async def finish(self, record: TaskRecord) -> None:
        await self.pool.execute(
            f"UPDATE {self.schema}.tasks SET status = 'done', memory_ids = $3, facts = $4, prompt_tokens = $5,"
            f" completion_tokens = $6, error = NULL, updated_at = now() WHERE log_id = $1 AND task_id = $2",
            record.log_id, record.task_id, record.memory_ids, record.facts, record.prompt_tokens,
            record.completion_tokens,
        )

    async def fail(self, log_id: str, task_id: str, error: str) -> None:
        await self.pool.execute(
            f"UPDATE {self.schema}.tasks SET status = 'failed', error = $3, updated_at = now() "
            f"WHERE log_id = $1 AND task_id = $2 AND status <> 'done'",
            log_id, task_id, error[:2000],
        )

    async def get(self, log_id: str, task_id: str) -> TaskRecord | None:
        row = await self.pool.fetchrow(
            f"SELECT {_COLUMNS} FROM {self.schema}.tasks WHERE log_id = $1 AND task_id = $2", log_id, task_id)
        return _record(row) if row else None

    async def counts(self) -> dict[str, int]:
        """Tasks by state (for `engram status`)."""
        rows = await self.pool.fetch(f"SELECT status, count(*) AS n FROM {self.schema}.tasks GROUP BY status")
        return {r["status"]: r["n"] for r in rows}
