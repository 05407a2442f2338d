"""The command log every command-handling service keeps in its own schema: one stored outcome per
(tenant, operation, client idempotency key), with the fingerprint of the request it answered.

``kit.service`` reads and writes it; a service whose handler writes its read model in a
transaction may record the outcome in that same transaction (``insert_outcome``), so the effect
and its outcome commit together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from contracts.envelope import AnyReply, Reply
from kit.pg import migrate

MIGRATIONS = Path(__file__).parent / "migrations"
LEDGER = "kit_migrations"


@dataclass(frozen=True)
class OutcomeRecord:
    """A command's outcome as it is kept for retries."""

    command_id: str  # contracts.messages.scoped_command_id(tenant, operation, key)
    tenant: str
    operation: str
    key: str
    fingerprint: str
    reply: Reply[Any]

    def args(self) -> tuple[str, str, str, str, str, str]:
        return (self.command_id, self.tenant, self.operation, self.key, self.fingerprint,
                self.reply.model_dump_json())


@dataclass(frozen=True)
class StoredOutcome:
    fingerprint: str
    reply: Reply[Any]
    recorded_at: datetime


def insert_outcome(schema: str, first: int = 1) -> str:
    """The INSERT of one outcome (parameters ``$first`` … ``$first+5``, as ``OutcomeRecord.args``);
    a second record of the same command keeps the first."""
    p = [f"${first + i}" for i in range(6)]
    return (f"INSERT INTO {schema}.command_outcomes (command_id, tenant, operation, key, fingerprint, outcome) "
            f"VALUES ({', '.join(p)}) ON CONFLICT (command_id) DO NOTHING")


class PgCommandLog:
    """The command log in one Postgres schema."""

    def __init__(self, pool: asyncpg.Pool, schema: str) -> None:
        self.pool = pool
        self.s = schema

    async def migrate(self, owner: str) -> list[str]:
        return await migrate(self.pool, self.s, MIGRATIONS, owner=owner, ledger=LEDGER)

    async def find(self, command_id: str) -> StoredOutcome | None:
        row = await self.pool.fetchrow(
            f"SELECT fingerprint, outcome, recorded_at FROM {self.s}.command_outcomes WHERE command_id = $1",
            command_id,
        )
        if row is None:
            return None
        return StoredOutcome(row["fingerprint"], AnyReply.model_validate(json.loads(row["outcome"])),
                             row["recorded_at"])

    async def known(self, command_ids: Iterable[str]) -> set[str]:
        """Which of these commands already have an outcome (one query for a batch)."""
        ids = sorted(set(command_ids))
        if not ids:
            return set()
        rows = await self.pool.fetch(
            f"SELECT command_id FROM {self.s}.command_outcomes WHERE command_id = ANY($1::text[])", ids
        )
        return {r["command_id"] for r in rows}

    async def record(self, outcome: OutcomeRecord, conn: asyncpg.Connection | None = None) -> None:
        await (conn or self.pool).execute(insert_outcome(self.s), *outcome.args())
