"""The memory service's Postgres read model (schema ``memory`` by default)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Literal
from uuid import UUID

import asyncpg

from contracts.daily_logs import DailyLogState, ExtractionResultState, ExtractionTaskState, ProcessingStatus
from contracts.memory import (
    IMPORTED_SOURCES,
    MemoryState,
    MemoryView,
    Profile,
    ProjectInfo,
    SharedMemoryState,
    SharedMemoryView,
)
from kit.bus import PoisonMessage
from kit.command_log import OutcomeRecord, insert_outcome
from kit.pg import migrate
from services.memory.application.ports import LogRecord, ReadModel, ReadModelTx, StandingOrder
from services.memory.domain.aliases import alias_keys
from services.memory.domain.errors import Conflict
from services.memory.domain.origin import origin_of

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
_COLUMNS = (
    "id, tenant, project, content, category, memory_key, importance, confidence, source, version, status, "
    "forget_reason, created_at, updated_at, last_seq, context, provenance, truth, imported"
)
#: :func:`services.memory.domain.origin.origin_of` over a row (``imported``: its last event came from an import)
_ORIGIN = ("(CASE WHEN imported OR source IN ({}) THEN 'imported' WHEN provenance IS NOT NULL THEN 'extracted' "
           "ELSE 'saved' END)").format(", ".join(f"'{s}'" for s in IMPORTED_SOURCES))
#: the state's fields kept in the ``truth`` JSON column (issue 30), absent when at their defaults
_TRUTH_FIELDS = ("valid_from", "valid_until", "superseded_by", "supersedes", "conflicts", "repeats", "sources",
                 "pinned", "forget_after")
#: A replayed memory row: state, content hash, sequence, its late tokens if computed here, else the
#: digest of its late-interaction document in the embedding cache (None: no late tokens)
#: digest of its late-interaction document in the embedding cache (None: no late tokens), and whether
#: its last event was appended by an import
ReplayRow = tuple[MemoryState, str, int, bytes | None, bytes | None, bool]
#: log, task, result -> (table, lock key space)
_RECORDS: dict[str, tuple[str, int]] = {"log": ("daily_logs", 2), "task": ("extraction_tasks", 3),
                                        "result": ("extraction_results", 4)}


#: GET /v1/memories' orders: the sort keys (column, SQL type), the ORDER BY, its direction (one for every key)
LIST_ORDERS: dict[str, tuple[tuple[tuple[str, str], ...], str, str]] = {
    "importance": ((("importance", "int"), ("updated_at", "timestamptz"), ("id", "uuid")),
                   "importance DESC, updated_at DESC, id DESC", "DESC"),
    "newest": ((("created_at", "timestamptz"), ("id", "uuid")), "created_at DESC, id DESC", "DESC"),
    "oldest": ((("created_at", "timestamptz"), ("id", "uuid")), "created_at ASC, id ASC", "ASC"),
}

#: ``standing``'s orders (a memory changed since counts as changed when it was said: its change
#: after the moment is not visible then)
_STANDING_ORDER = {
    "importance": "importance DESC, updated_at DESC",
    "weight": "importance * confidence DESC, updated_at DESC",
    "recent": "CASE WHEN updated_at <= $2 THEN updated_at "
              "ELSE COALESCE((truth->>'valid_from')::timestamptz, created_at) END DESC",
}


class ForeignRow(Conflict, PoisonMessage):
    """A read-model write naming a row of another tenant. Ids are the read model's global keys
    (``ON CONFLICT (id)``), so every upsert is also checked by tenant: a row is only ever changed
    by events of the tenant it was written for, and an event of another tenant under its id is
    refused (a command's caller gets a conflict; the projector consumer dead-letters the event:
    retrying never clears it) — never written over another user's row."""


def _like(keyword: str) -> str:
    """A case-insensitive substring pattern with LIKE's wildcards escaped."""
    return "%" + keyword.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _state(row: asyncpg.Record) -> MemoryState:
    return MemoryState.model_validate(_memory_fields(row))


def _memory_fields(row: asyncpg.Record) -> dict[str, object]:
    """A memory row's fields (its provenance, stored as JSON text, parsed)."""
    fields = dict(row)
    if fields.get("provenance") is not None:
        fields["provenance"] = json.loads(fields["provenance"])
    kept = fields.pop("truth", None)
    if kept is not None:
        fields.update(json.loads(kept))
    return {k: v for k, v in fields.items() if k in MemoryState.model_fields}


def _truth(state: MemoryState) -> str | None:
    """The ``truth`` column of a memory's row: its issue-30 fields that are not at their defaults."""
    kept = state.model_dump(mode="json", include=set(_TRUTH_FIELDS))
    return json.dumps(kept) if kept else None


def _view(row: asyncpg.Record) -> MemoryView:
    fields = _memory_fields(row)
    origin = origin_of(restored=bool(row.get("imported")), source=str(fields["source"]),
                       extracted=fields.get("provenance") is not None)
    return MemoryView.model_validate({**fields, "origin": origin})


def _memory_args(state: MemoryState, content_hash: str, seq: int, late_tokens: bytes | None,
                 imported: bool = False) -> tuple[object, ...]:
    """The parameters of a memory row's upsert, in ``_COLUMNS`` order, then content hash, late tokens
    and the keys of the aliases its words state (:func:`~services.memory.domain.aliases.alias_keys`)."""
    return (
        state.id, state.tenant, state.project, state.content,
        state.category.value if state.category else None, state.memory_key, state.importance,
        state.confidence, state.source, state.version, state.status.value, state.forget_reason,
        state.created_at, state.updated_at, seq, state.context,
        state.provenance.model_dump_json() if state.provenance else None, _truth(state), imported, content_hash,
        late_tokens, alias_keys(state.content) or None,
    )


class Tx(ReadModelTx):
    """Writes of one projection step, inside one transaction."""

    def __init__(self, conn: asyncpg.Connection, schema: str) -> None:
        self.conn = conn
        self.s = schema

    async def lock(self, memory_id: UUID) -> int | None:
        """Serialise appliers of one memory; return the sequence already applied to it."""
        return await self.conn.fetchval(f"SELECT {self.s}.lock_aggregate('{self.s}.memories', 0, $1)", memory_id)

    async def upsert(
        self, state: MemoryState, content_hash: str, seq: int, outcome: OutcomeRecord | None = None,
        late_tokens: bytes | None = None, imported: bool = False,
    ) -> None:
        """Write the memory's row (with its packed late-interaction token vectors, if any) unless
        it already reflects ``seq`` or later; with ``outcome``, record the command's outcome in the
        same statement (one round trip). ``imported``: the event came from an import (the row
        says where its current version came from)."""
        memory_args = _memory_args(state, content_hash, seq, late_tokens, imported)
        upsert = f"{self._upsert_sql()} RETURNING 1"
        if outcome is None:
            written = await self.conn.fetchval(upsert, *memory_args)
        else:
            written = await self.conn.fetchval(
                f"WITH written AS ({upsert}), kept AS ({insert_outcome(self.s, first=len(memory_args) + 1)})"
                f" SELECT count(*) FROM written",
                *memory_args, *outcome.args(),
            )
        if not written:
            await self._same_tenant("memories", "memory", state.id, state.tenant)

    async def _same_tenant(self, table: str, what: str, row_id: UUID, tenant: str) -> None:
        """After an upsert that wrote nothing (the row reflects this sequence or a later one, or
        it is another tenant's): refuse the second case (:class:`ForeignRow`)."""
        owner = await self.conn.fetchval(f"SELECT tenant FROM {self.s}.{table} WHERE id = $1", row_id)
        if owner is not None and owner != tenant:
            raise ForeignRow(f"{what} {row_id} is another user's: an event of {tenant} under its id was not applied",
                             "id")

    async def replay_memories(self, rows: Sequence[ReplayRow], late_model: str) -> list[UUID]:
        """A replay's rows in bulk: ``COPY`` into a temporary table, then one ``INSERT ... SELECT``
        with :meth:`upsert`'s rule (a row only moves forward, ``last_seq``). A row's late tokens are
        its own bytes, else the embedding cache's value under ``(late_model, its digest)``, copied
        inside Postgres (10-50 KB a row that never travel to the replaying process and back).
        Returns the ids of written rows whose digest the cache did not hold (their late tokens
        left NULL: :meth:`set_late_tokens`). Synchronous commit is off for this transaction: a
        replay interrupted by a crash is run again (it starts by emptying the read model)."""
        if not rows:
            return []
        temp = f"replay_{self.s}"
        await self.conn.execute(
            f"SET LOCAL synchronous_commit = off; "
            f"CREATE TEMP TABLE IF NOT EXISTS {temp} ON COMMIT DELETE ROWS AS "
            f"SELECT {_COLUMNS}, content_hash, late_tokens, alias_keys, NULL::bytea AS late_digest "
            f"FROM {self.s}.memories WITH NO DATA"
        )
        await self.conn.copy_records_to_table(
            temp, records=[(*_memory_args(st, h, seq, late, imported), digest)
                           for st, h, seq, late, digest, imported in rows],
        )
        selected = ", ".join(f"r.{c.strip()}" for c in _COLUMNS.split(","))
        foreign = await self.conn.fetch(
            f"SELECT r.id, r.tenant FROM {temp} r JOIN {self.s}.memories m ON m.id = r.id AND m.tenant <> r.tenant")
        for row in foreign:  # (the live projector dead-letters such an event; a replay goes on without it)
            log.error("replay: memory %s is another user's row; the event of %s under its id is not applied",
                      row["id"], row["tenant"])
        missing = await self.conn.fetch(
            f"""WITH written AS (
                  INSERT INTO {self.s}.memories ({_COLUMNS}, content_hash, late_tokens, alias_keys)
                  SELECT {selected}, r.content_hash, coalesce(r.late_tokens, c.value), r.alias_keys
                  FROM {temp} r LEFT JOIN {self.s}.embedding_cache c ON c.model = $1 AND c.digest = r.late_digest
                  {self._on_conflict()}
                  RETURNING id, late_tokens IS NULL AS unfilled)
                SELECT w.id FROM written w JOIN {temp} r ON r.id = w.id
                WHERE w.unfilled AND r.late_digest IS NOT NULL""",
            late_model,
        )
        return [r["id"] for r in missing]

    async def set_late_tokens(self, tokens: Sequence[tuple[UUID, bytes]]) -> None:
        """Set rows' late tokens (those :meth:`replay_memories` found no cached value for)."""
        if tokens:
            await self.conn.executemany(f"UPDATE {self.s}.memories SET late_tokens = $2 WHERE id = $1", tokens)

    async def note_cache_owners(self, owned: Sequence[tuple[str, bytes]]) -> None:
        pairs = sorted(set(owned))  # (in key order: concurrent transactions lock rows in one order)
        if pairs:
            await self.conn.execute(
                f"""INSERT INTO {self.s}.embedding_cache_owners (tenant, digest)
                    SELECT * FROM unnest($1::text[], $2::bytea[]) ON CONFLICT DO NOTHING""",
                [t for t, _ in pairs], [d for _, d in pairs])

    def _upsert_sql(self) -> str:
        return f"""INSERT INTO {self.s}.memories ({_COLUMNS}, content_hash, late_tokens, alias_keys)
                VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17::jsonb,$18::jsonb,$19,$20,$21,
                        $22::text[])
                {self._on_conflict()}"""

    def _on_conflict(self) -> str:
        return f"""ON CONFLICT (id) DO UPDATE SET
                  project=EXCLUDED.project, content=EXCLUDED.content, category=EXCLUDED.category,
                  memory_key=EXCLUDED.memory_key, importance=EXCLUDED.importance,
                  confidence=EXCLUDED.confidence, source=EXCLUDED.source, version=EXCLUDED.version,
                  status=EXCLUDED.status, forget_reason=EXCLUDED.forget_reason,
                  updated_at=EXCLUDED.updated_at, last_seq=EXCLUDED.last_seq,
                  context=EXCLUDED.context, content_hash=EXCLUDED.content_hash,
                  late_tokens=EXCLUDED.late_tokens, provenance=EXCLUDED.provenance, truth=EXCLUDED.truth,
                  imported=EXCLUDED.imported, alias_keys=EXCLUDED.alias_keys
                WHERE {self.s}.memories.last_seq < EXCLUDED.last_seq AND {self.s}.memories.tenant = EXCLUDED.tenant"""

    async def record_outcome(self, outcome: OutcomeRecord) -> None:
        """Record a command's outcome in this transaction (kit's command log, in this schema)."""
        await self.conn.execute(insert_outcome(self.s), *outcome.args())

    async def lock_shared(self, shared_id: UUID) -> int | None:
        return await self.conn.fetchval(
            f"SELECT {self.s}.lock_aggregate('{self.s}.shared_memories', 1, $1)", shared_id
        )

    async def upsert_shared(self, state: SharedMemoryState, seq: int) -> None:
        written = await self.conn.fetchval(
            f"""INSERT INTO {self.s}.shared_memories
                  (id, tenant, title, event, importance, version, created_at, updated_at, last_seq)
                VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)
                ON CONFLICT (id) DO UPDATE SET event=EXCLUDED.event, importance=EXCLUDED.importance,
                  version=EXCLUDED.version, updated_at=EXCLUDED.updated_at, last_seq=EXCLUDED.last_seq
                WHERE {self.s}.shared_memories.last_seq < EXCLUDED.last_seq
                  AND {self.s}.shared_memories.tenant = EXCLUDED.tenant
                RETURNING 1""",
            state.id, state.tenant, state.title, state.event, state.importance, state.version,
            state.created_at, state.updated_at, seq,
        )
        if not written:
            await self._same_tenant("shared_memories", "shared memory", state.id, state.tenant)

    async def lock_record(self, kind: LogRecord, record_id: UUID) -> int | None:
        table, space = _RECORDS[kind]
        return await self.conn.fetchval(
            f"SELECT {self.s}.lock_aggregate('{self.s}.{table}', {space}, $1)", record_id
        )

    async def upsert_log(self, state: DailyLogState, seq: int) -> None:
        written = await self.conn.fetchval(
            f"""INSERT INTO {self.s}.daily_logs (id, tenant, project, log_date, processing_status, retry_count,
                  claimed_at, deleted, updated_at, last_seq, state)
                VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11::jsonb)
                ON CONFLICT (id) DO UPDATE SET processing_status=EXCLUDED.processing_status,
                  retry_count=EXCLUDED.retry_count, claimed_at=EXCLUDED.claimed_at, deleted=EXCLUDED.deleted,
                  updated_at=EXCLUDED.updated_at, last_seq=EXCLUDED.last_seq, state=EXCLUDED.state
                WHERE {self.s}.daily_logs.last_seq < EXCLUDED.last_seq AND {self.s}.daily_logs.tenant = EXCLUDED.tenant
                RETURNING 1""",
            state.id, state.tenant, state.project, state.log_date, state.processing_status.value, state.retry_count,
            state.claimed_at, state.deleted, state.updated_at, seq, state.model_dump_json(),
        )
        if not written:
            await self._same_tenant("daily_logs", "daily log", state.id, state.tenant)

    async def upsert_task(self, state: ExtractionTaskState, seq: int) -> None:
        written = await self.conn.fetchval(
            f"""INSERT INTO {self.s}.extraction_tasks (id, tenant, task_id, project, status, updated_at, last_seq, state)
                VALUES ($1,$2,$3,$4,$5,$6,$7,$8::jsonb)
                ON CONFLICT (id) DO UPDATE SET project=EXCLUDED.project, status=EXCLUDED.status,
                  updated_at=EXCLUDED.updated_at, last_seq=EXCLUDED.last_seq, state=EXCLUDED.state
                WHERE {self.s}.extraction_tasks.last_seq < EXCLUDED.last_seq
                  AND {self.s}.extraction_tasks.tenant = EXCLUDED.tenant
                RETURNING 1""",
            state.id, state.tenant, state.task_id, state.project, state.status.value, state.updated_at, seq,
            state.model_dump_json(),
        )
        if not written:
            await self._same_tenant("extraction_tasks", "extraction task", state.id, state.tenant)

    async def upsert_result(self, state: ExtractionResultState, seq: int) -> None:
        written = await self.conn.fetchval(
            f"""INSERT INTO {self.s}.extraction_results (id, tenant, project, log_id, task_id, updated_at, last_seq, state)
                VALUES ($1,$2,$3,$4,$5,$6,$7,$8::jsonb)
                ON CONFLICT (id) DO UPDATE SET updated_at=EXCLUDED.updated_at, last_seq=EXCLUDED.last_seq,
                  state=EXCLUDED.state
                WHERE {self.s}.extraction_results.last_seq < EXCLUDED.last_seq
                  AND {self.s}.extraction_results.tenant = EXCLUDED.tenant
                RETURNING 1""",
            state.id, state.tenant, state.project, state.log_id, state.task_id, state.updated_at, seq,
            state.model_dump_json(),
        )
        if not written:
            await self._same_tenant("extraction_results", "extraction result", state.id, state.tenant)

    async def advance_checkpoint(self, projection: str, seq: int) -> None:
        await self.conn.execute(
            f"""INSERT INTO {self.s}.checkpoints (projection, last_seq) VALUES ($1, $2)
                ON CONFLICT (projection) DO UPDATE SET last_seq = GREATEST({self.s}.checkpoints.last_seq, $2),
                updated_at = now()""",
            projection, seq,
        )


_SHARED_COLUMNS = "id, title, event, importance, version, created_at, updated_at"


class MemoryStore(ReadModel):
    """Reads and transactional writes of the memory read model."""

    def __init__(self, pool: asyncpg.Pool, schema: str = "memory") -> None:
        self.pool = pool
        self.s = schema

    async def migrate(self, owner: str) -> list[str]:
        """Claim the schema for the install ``owner`` (its namespace) and apply missing migrations."""
        return await migrate(self.pool, self.s, MIGRATIONS, owner=owner)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        async with self.pool.acquire() as conn, conn.transaction():
            yield Tx(conn, self.s)

    async def active_hashes(self, keys: Sequence[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
        """Which of these (tenant, project, content hash) an active memory has (one query, index
        probes on ``memories_content``: a join with ``unnest`` would be planned as a scan)."""
        if not keys:
            return set()
        rows = await self.pool.fetch(
            f"""SELECT tenant, project, content_hash FROM {self.s}.memories
                WHERE status = 'active' AND tenant = ANY($1::text[]) AND project = ANY($2::text[])
                  AND content_hash = ANY($3::text[])""",
            sorted({k[0] for k in keys}), sorted({k[1] for k in keys}), sorted({k[2] for k in keys}),
        )
        return {(r["tenant"], r["project"], r["content_hash"]) for r in rows} & set(keys)

    async def find_active_by_hash(self, tenant: str, project: str, content_hash: str) -> MemoryState | None:
        row = await self.pool.fetchrow(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND project = $2 AND content_hash = $3 AND status = 'active'
                ORDER BY created_at LIMIT 1""",
            tenant, project, content_hash,
        )
        return _state(row) if row else None

    async def get(self, tenant: str, memory_id: UUID) -> MemoryState | None:
        row = await self.pool.fetchrow(
            f"SELECT {_COLUMNS} FROM {self.s}.memories WHERE tenant = $1 AND id = $2", tenant, memory_id
        )
        return _state(row) if row else None

    async def active_views(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, MemoryView]:
        rows = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND id = ANY($2::uuid[]) AND status = 'active'""",
            tenant, list(ids),
        )
        return {r["id"]: _view(r) for r in rows}

    async def views(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, MemoryView]:
        """The tenant's memories among ``ids``, whatever their status."""
        rows = await self.pool.fetch(
            f"SELECT {_COLUMNS} FROM {self.s}.memories WHERE tenant = $1 AND id = ANY($2::uuid[])", tenant, list(ids))
        return {r["id"]: _view(r) for r in rows}

    async def superseded_by(self, tenant: str, memory_id: UUID) -> list[MemoryView]:
        """The tenant's memories superseded by ``memory_id`` now (a scan of the tenant's superseded
        rows: asked by an update that changes a memory's content, rare)."""
        rows = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND status = 'superseded' AND truth -> 'superseded_by' ->> 'memory_id' = $2""",
            tenant, str(memory_id))
        return [_view(r) for r in rows]

    async def conflicted(self, tenant: str, project: str | None, limit: int) -> list[MemoryState]:
        """The tenant's active memories carrying an open flag (within ``project``) against another
        active memory, newest first (a flag against a forgotten or superseded memory is moot: only one
        of the two is current)."""
        rows = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories m
                WHERE tenant = $1 AND truth ? 'conflicts' AND status = 'active' AND ($2::text IS NULL OR project = $2)
                  AND EXISTS (SELECT 1 FROM jsonb_array_elements(m.truth -> 'conflicts') AS c
                              JOIN {self.s}.memories o ON o.tenant = m.tenant AND o.id = (c ->> 'memory_id')::uuid
                              WHERE o.status = 'active')
                ORDER BY updated_at DESC LIMIT $3""", tenant, project, limit)
        return [_state(r) for r in rows]

    async def alias_sources(self, tenant: str, project: str | None, keys: Sequence[str],
                            limit: int, said_by: datetime | None = None) -> list[str]:
        """The words of the tenant's current memories (of ``project``, or all) that state an alias under
        one of ``keys``, the most recently changed first (index ``memories_alias_keys``); with
        ``said_by``, only those created by then."""
        rows = await self.pool.fetch(
            f"""SELECT content FROM {self.s}.memories
                WHERE tenant = $1 AND ($2::text IS NULL OR project = $2) AND status = 'active'
                  AND alias_keys && $3::text[] AND ($5::timestamptz IS NULL OR created_at <= $5)
                ORDER BY updated_at DESC LIMIT $4""", tenant, project, list(keys), limit, said_by)
        return [r["content"] for r in rows]

    async def late_tokens(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, bytes | None]:
        """The packed late-interaction token vectors of the tenant's active memories among ``ids``
        (None where none were stored)."""
        rows = await self.pool.fetch(
            f"""SELECT id, late_tokens FROM {self.s}.memories
                WHERE tenant = $1 AND id = ANY($2::uuid[]) AND status IN ('active', 'superseded')""",
            tenant, list(ids),
        )
        return {r["id"]: r["late_tokens"] for r in rows}

    async def list_active(
        self, tenant: str, project: str | None, category: str | None, keyword: str | None, limit: int,
        statuses: Sequence[str] = ("active",), *, created_from: datetime | None = None,
        created_before: datetime | None = None, source: str | None = None, sort: str = "importance",
        after: Sequence[object] | None = None,
    ) -> list[MemoryView]:
        """Memories of ``statuses`` (active by default) by category and/or keyword (case-insensitive
        substring), created in [created_from, created_before), of one origin (saved, extracted or imported:
        :mod:`services.memory.domain.origin`), in ``sort`` (:data:`LIST_ORDERS`); ``after``: the sort keys of the page before's last row."""
        pattern = _like(keyword) if keyword else None
        keys, order, direction = LIST_ORDERS[sort]
        page = ""
        if after is not None:
            marks = ", ".join(f"${10 + i}::{cast}" for i, (_, cast) in enumerate(keys))
            page = f"AND ({', '.join(k for k, _ in keys)}) {'<' if direction == 'DESC' else '>'} ({marks})"
        rows = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND status = ANY($6::text[])
                  AND ($2::text IS NULL OR project = $2)
                  AND ($3::text IS NULL OR category = $3)
                  AND ($4::text IS NULL OR content ILIKE $4)
                  AND ($7::timestamptz IS NULL OR created_at >= $7)
                  AND ($8::timestamptz IS NULL OR created_at < $8)
                  AND ($9::text IS NULL OR {_ORIGIN} = $9)
                  {page}
                ORDER BY {order} LIMIT $5""",
            tenant, project, category, pattern, limit, list(statuses), created_from, created_before, source,
            *(after or ()),
        )
        return [_view(r) for r in rows]

    async def shared_memories(
        self, tenant: str, title: str | None, keyword: str | None, limit: int
    ) -> list[SharedMemoryView]:
        pattern = _like(keyword) if keyword else None
        rows = await self.pool.fetch(
            f"""SELECT {_SHARED_COLUMNS} FROM {self.s}.shared_memories
                WHERE tenant = $1 AND ($2::text IS NULL OR title = $2)
                  AND ($3::text IS NULL OR title ILIKE $3 OR event ILIKE $3)
                ORDER BY updated_at DESC LIMIT $4""",
            tenant, title, pattern, limit,
        )
        return [SharedMemoryView.model_validate(dict(r)) for r in rows]

    async def projects(self, tenant: str) -> list[ProjectInfo]:
        rows = await self.pool.fetch(
            f"""SELECT project, count(*) AS memories, max(updated_at) AS last_updated FROM {self.s}.memories
                WHERE tenant = $1 AND status = 'active' GROUP BY project ORDER BY max(updated_at) DESC""",
            tenant,
        )
        return [ProjectInfo.model_validate(dict(r)) for r in rows]

    async def profile(self, tenant: str, project: str | None, static_limit: int, dynamic_limit: int) -> Profile:
        """Stable facts ranked by importance × confidence, and the most recently changed memories."""
        static = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND status = 'active' AND category IS NOT NULL
                  AND category <> 'relationship' AND category <> 'emotional_pattern'
                  AND ($2::text IS NULL OR project = $2)
                ORDER BY importance * confidence DESC, updated_at DESC LIMIT $3""",
            tenant, project, static_limit,
        )
        static_ids = [r["id"] for r in static]
        dynamic = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND status = 'active' AND ($2::text IS NULL OR project = $2)
                  AND NOT (id = ANY($4::uuid[]))
                ORDER BY updated_at DESC LIMIT $3""",
            tenant, project, dynamic_limit, static_ids,
        )
        return Profile(
            static=[_view(r) for r in static],
            dynamic=[_view(r) for r in dynamic],
        )

    async def standing(
        self, tenant: str, project: str | None, moment: datetime, *, order: StandingOrder, limit: int,
        category: str | None = None, keyword: str | None = None, profile_facts: bool = False,
        then: frozenset[str] = frozenset({"standing"}),
    ) -> list[MemoryView]:
        until = "(truth->>'valid_until')::timestamptz"
        superseded = {frozenset({"standing"}): f"(truth->>'valid_until' IS NULL OR {until} > $2)",
                      frozenset({"superseded"}): f"(truth->>'valid_until' IS NOT NULL AND {until} <= $2)"}.get(then, "TRUE")
        # a memory with versions may have stood in an earlier one (its row says when the last was said)
        changed = "updated_at > $2"
        said = "LEAST(created_at, COALESCE((truth->>'valid_from')::timestamptz, created_at))"
        args = (tenant, moment, project, category, _like(keyword) if keyword else None, profile_facts, limit)

        def query(part: str, order_by: str) -> str:
            return f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND status IN ('active', 'superseded') AND ({said} <= $2 OR version > 1)
                  AND {superseded} AND {part}
                  AND ($3::text IS NULL OR project = $3)
                  AND ($4::text IS NULL OR category = $4 OR {changed})
                  AND ($5::text IS NULL OR content ILIKE $5 OR {changed})
                  AND (NOT $6 OR (category IS NOT NULL AND category <> 'relationship'
                                  AND category <> 'emotional_pattern') OR {changed})
                ORDER BY {order_by} LIMIT $7"""

        if order == "recent":
            # the most recent by then, in two parts that each walk an index (migration 0013) instead of
            # sorting every row by a key that depends on the moment: what has not changed since, by its
            # last change; what has, by when it was said. The caller orders the union (at most 2 × limit).
            settled, since = await asyncio.gather(
                self.pool.fetch(query("updated_at <= $2", "updated_at DESC"), *args),
                self.pool.fetch(query(changed, _STANDING_ORDER["recent"]), *args))
            return [_view(r) for r in (*settled, *since)]
        rows = await self.pool.fetch(query("TRUE", _STANDING_ORDER[order]), *args)
        return [_view(r) for r in rows]

    async def indexed_memory_count(self) -> int:
        return int(await self.pool.fetchval(f"SELECT count(*) FROM {self.s}.memories WHERE status <> 'forgotten'"))

    async def indexed_memory_ids(self) -> list[UUID]:
        return [r["id"] for r in await self.pool.fetch(f"SELECT id FROM {self.s}.memories WHERE status <> 'forgotten'")]

    async def applied_sequences(self, ids: Sequence[UUID]) -> dict[UUID, int]:
        rows = await self.pool.fetch(
            f"SELECT id, last_seq FROM {self.s}.memories WHERE id = ANY($1::uuid[])", list(ids)
        )
        return {r["id"]: r["last_seq"] for r in rows}

    # daily logs, extraction tasks and results ------------------------------------------------
    async def get_log(self, tenant: str, log_id: UUID) -> DailyLogState | None:
        raw = await self.pool.fetchval(
            f"SELECT state FROM {self.s}.daily_logs WHERE tenant = $1 AND id = $2 AND NOT deleted", tenant, log_id
        )
        return DailyLogState.model_validate_json(raw) if raw else None

    async def waiting_logs(
        self, tenant: str, project: str | None, include_failed: bool, limit: int
    ) -> list[DailyLogState]:
        statuses = [ProcessingStatus.PENDING.value] + ([ProcessingStatus.FAILED.value] if include_failed else [])
        rows = await self.pool.fetch(
            f"""SELECT state FROM {self.s}.daily_logs
                WHERE tenant = $1 AND NOT deleted AND processing_status = ANY($2::text[])
                  AND ($3::text IS NULL OR project = $3)
                ORDER BY log_date, updated_at LIMIT $4""",
            tenant, statuses, project, limit,
        )
        return [DailyLogState.model_validate_json(r["state"]) for r in rows]

    async def logs(
        self, tenant: str, project: str | None, status: str | None, date_from: date | None, date_to: date | None,
        limit: int, after: tuple[date, UUID] | None = None,
    ) -> list[DailyLogState]:
        """Logs (none deleted) by status and day range, newest day first (then by id: keys that
        never change, so that pages neither skip nor repeat a log whose status moves meanwhile);
        ``after``: the (day, id) of the page before's last log."""
        day, last = after or (None, None)
        rows = await self.pool.fetch(
            f"""SELECT state FROM {self.s}.daily_logs
                WHERE tenant = $1 AND NOT deleted AND ($2::text IS NULL OR project = $2)
                  AND ($3::text IS NULL OR processing_status = $3)
                  AND ($4::date IS NULL OR log_date >= $4) AND ($5::date IS NULL OR log_date <= $5)
                  AND ($7::date IS NULL OR (log_date, id) < ($7, $8::uuid))
                ORDER BY log_date DESC, id DESC LIMIT $6""",
            tenant, project, status, date_from, date_to, limit, day, last,
        )
        return [DailyLogState.model_validate_json(r["state"]) for r in rows]

    async def _log_ids(self, where: str, tenant: str, project: str | None, limit: int, *args: object) -> list[UUID]:
        rows = await self.pool.fetch(
            f"""SELECT id FROM {self.s}.daily_logs l
                WHERE tenant = $1 AND NOT deleted AND ($2::text IS NULL OR project = $2) AND {where}
                ORDER BY log_date, id LIMIT $3""",
            tenant, project, limit, *args,
        )
        return [r["id"] for r in rows]

    async def stuck_log_ids(self, tenant: str, project: str | None, started_before: datetime, limit: int) -> list[UUID]:
        return await self._log_ids("processing_status = 'processing' AND coalesce(claimed_at, updated_at) <= $4",
                                   tenant, project, limit, started_before)

    async def unreconciled_log_ids(self, tenant: str, project: str | None, limit: int) -> list[UUID]:
        return await self._log_ids(
            f"""processing_status = 'processed' AND NOT EXISTS (
                  SELECT 1 FROM {self.s}.extraction_results r WHERE r.tenant = l.tenant AND r.log_id = l.id)""",
            tenant, project, limit,
        )

    async def expired_log_ids(self, tenant: str, project: str | None, cutoff: datetime, limit: int) -> list[UUID]:
        return await self._log_ids("processing_status = 'processed' AND updated_at < $4", tenant, project, limit, cutoff)

    async def learnt_from_log(self, tenant: str, log_id: UUID, limit: int = 1000) -> list[MemoryState]:
        """The tenant's current memories whose provenance names daily log ``log_id`` (index
        ``memories_provenance_log``), oldest first."""
        rows = await self.pool.fetch(
            f"""SELECT {_COLUMNS} FROM {self.s}.memories
                WHERE tenant = $1 AND status = 'active' AND provenance IS NOT NULL
                  AND provenance->>'log_id' = $2::text
                ORDER BY created_at LIMIT $3""", tenant, str(log_id), limit)
        return [_state(r) for r in rows]

    async def expired_superseders(self, now: datetime, limit: int) -> list[tuple[str, UUID, int]]:
        rows = await self.pool.fetch(
            f"""SELECT m.tenant, m.id, m.version FROM {self.s}.memories m
                WHERE m.truth ? 'forget_after' AND m.status = 'active' AND NOT m.truth ? 'superseded_by'
                  AND (m.truth->>'forget_after')::timestamptz <= $1
                  AND EXISTS (SELECT 1 FROM jsonb_array_elements(m.truth->'supersedes') w
                              JOIN {self.s}.memories o ON o.tenant = m.tenant AND o.id = (w->>'memory_id')::uuid
                              WHERE o.status = 'superseded' AND o.truth->'superseded_by'->>'memory_id' = m.id::text)
                ORDER BY (m.truth->>'forget_after')::timestamptz LIMIT $2""", now, limit)
        return [(r["tenant"], r["id"], r["version"]) for r in rows]

    async def get_task(self, tenant: str, task_uuid: UUID) -> ExtractionTaskState | None:
        raw = await self.pool.fetchval(
            f"SELECT state FROM {self.s}.extraction_tasks WHERE tenant = $1 AND id = $2", tenant, task_uuid
        )
        return ExtractionTaskState.model_validate_json(raw) if raw else None

    async def tasks(
        self, tenant: str, project: str | None, status: str | None, task_id: str | None, limit: int,
        log_id: UUID | None = None,
    ) -> list[ExtractionTaskState]:
        rows = await self.pool.fetch(
            f"""SELECT state FROM {self.s}.extraction_tasks
                WHERE tenant = $1 AND ($2::text IS NULL OR project = $2) AND ($3::text IS NULL OR status = $3)
                  AND ($4::text IS NULL OR task_id = $4)
                  AND ($6::text IS NULL OR state->'log_ids' ? $6::text)
                ORDER BY updated_at DESC, id LIMIT $5""",
            tenant, project, status, task_id, limit, str(log_id) if log_id else None,
        )
        return [ExtractionTaskState.model_validate_json(r["state"]) for r in rows]

    async def results(
        self, tenant: str, project: str | None, log_id: UUID | None, task_id: str | None, limit: int
    ) -> list[ExtractionResultState]:
        rows = await self.pool.fetch(
            f"""SELECT state FROM {self.s}.extraction_results
                WHERE tenant = $1 AND ($2::text IS NULL OR project = $2) AND ($3::uuid IS NULL OR log_id = $3)
                  AND ($4::text IS NULL OR task_id = $4)
                ORDER BY updated_at DESC, id LIMIT $5""",
            tenant, project, log_id, task_id, limit,
        )
        return [ExtractionResultState.model_validate_json(r["state"]) for r in rows]

    async def existing_ids(
        self, table: Literal["memories", "shared_memories"], tenant: str, ids: Sequence[UUID]
    ) -> set[UUID]:
        assert table in ("memories", "shared_memories")
        rows = await self.pool.fetch(
            f"SELECT id FROM {self.s}.{table} WHERE tenant = $1 AND id = ANY($2::uuid[])", tenant, list(ids)
        )
        return {r["id"] for r in rows}

    async def checkpoint(self, projection: str) -> int:
        return await self.pool.fetchval(
            f"SELECT coalesce(max(last_seq), 0) FROM {self.s}.checkpoints WHERE projection = $1", projection
        )

    async def counts(self) -> dict[str, int]:
        rows = await self.pool.fetch(f"SELECT status, count(*) AS n FROM {self.s}.memories GROUP BY status")
        return {r["status"]: r["n"] for r in rows}

    async def drop_read_model(self) -> None:
        """Empty every projected table (the command log stays: it is idempotency, not a projection)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                f"TRUNCATE {self.s}.memories, {self.s}.shared_memories, {self.s}.daily_logs, "
                f"{self.s}.extraction_tasks, {self.s}.extraction_results, {self.s}.checkpoints"
            )
