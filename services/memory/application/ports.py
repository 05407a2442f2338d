"""The memory application's own ports: the event log and the read model, and the types they speak.

Adapters (``services/memory/adapters``) implement these; the application never imports an
adapter. The search engine's ports (the vector index, the models, the embedding cache's storage)
are :mod:`services.memory.search.ports`.

* :class:`EventLog` — the aggregates' events (kit's bus implements it).
* :class:`ReadModel` / :class:`ReadModelTx` — the Postgres read model and its unit of work
  (``ReadModel`` includes what a recall reads of it, :class:`~services.memory.search.ports.RecallReads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import date, datetime
from typing import Any, Literal, Protocol
from uuid import UUID

from contracts.daily_logs import DailyLogState, ExtractionResultState, ExtractionTaskState
from contracts.envelope import EventEnvelope
from contracts.events import Event
from contracts.memory import (
    MemoryState,
    MemoryView,
    Profile,
    ProjectInfo,
    SharedMemoryState,
    SharedMemoryView,
)
from kit.command_log import OutcomeRecord
from services.memory.domain.supersession import Candidate, Opinion, Statement
from services.memory.search.ports import RecallReads


class Judge(Protocol):
    """A second opinion on a pair the rules flagged (an LLM engine, when one is configured):
    None when it could not answer (the flag stands)."""

    async def judge(self, new: Statement, held: Candidate) -> Opinion | None: ...


#: how candidates as of a moment are ordered: most important first (recall_memory), by importance ×
#: confidence (the profile's stable facts), or by their last change by then (its recent context)
StandingOrder = Literal["importance", "weight", "recent"]

__all__ = ["EventLog", "LogRecord", "ReadModel", "ReadModelTx"]


#: The daily-log aggregates' read models (each row locked by its id, in its own key space).
LogRecord = Literal["log", "task", "result"]


# events and the read model -----------------------------------------------------------------------
class EventLog(Protocol):
    """The event log: append with optimistic concurrency on the aggregate's subject, read back
    typed (``kit.events.TypedEventLog`` over kit's bus implements it: ``data`` is the aggregate's
    state model, never a dict)."""

    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int: ...

    async def append_event_once(
        self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None,
    ) -> tuple[int, Event[Any]]:
        """(sequence, the event as the log holds it): a retried command's event, if its first
        attempt appended it, is that attempt's (timestamps included); project and answer that one."""
        ...

    async def last_event(self, subject: str) -> tuple[Event[Any], int] | None: ...

    async def history(self, subject: str) -> list[tuple[Event[Any], int]]: ...

    async def first_event(self, subject: str) -> tuple[Event[Any], int] | None: ...


class ReadModelTx(Protocol):
    """The writes of one projection step, in one transaction (kit's ``CheckpointTx`` and more)."""

    async def lock(self, memory_id: UUID) -> int | None: ...

    async def upsert(
        self, state: MemoryState, content_hash: str, seq: int, outcome: OutcomeRecord | None = None,
        late_tokens: bytes | None = None, imported: bool = False,
    ) -> None: ...

    async def replay_memories(
        self, rows: Sequence[tuple[MemoryState, str, int, bytes | None, bytes | None, bool]], late_model: str,
    ) -> list[UUID]:
        """``upsert`` of a replay's (state, content hash, seq, late tokens, late digest) rows in
        bulk, late tokens read from the embedding cache by ``(late_model, digest)`` where a row has
        none of its own; returns the ids of rows whose digest the cache did not hold."""
        ...

    async def set_late_tokens(self, tokens: Sequence[tuple[UUID, bytes]]) -> None: ...

    async def note_cache_owners(self, owned: Sequence[tuple[str, bytes]]) -> None:
        """The embedding cache may hold what was derived from a tenant's text under a digest:
        (tenant, digest) pairs, kept until the tenant is purged, so that the purge reaches the
        entries of versions since replaced."""
        ...

    async def record_outcome(self, outcome: OutcomeRecord) -> None: ...

    async def lock_shared(self, shared_id: UUID) -> int | None: ...

    async def upsert_shared(self, state: SharedMemoryState, seq: int) -> None: ...

    async def lock_record(self, kind: LogRecord, record_id: UUID) -> int | None:
        """Serialise the appliers of one log, task or result; the sequence its row reflects."""

    async def upsert_log(self, state: DailyLogState, seq: int) -> None: ...

    async def upsert_task(self, state: ExtractionTaskState, seq: int) -> None: ...

    async def upsert_result(self, state: ExtractionResultState, seq: int) -> None: ...

    async def advance_checkpoint(self, projection: str, seq: int) -> None: ...


class ReadModel(RecallReads, Protocol):
    """Reads of the memory read model (a recall's among them), and its unit of work (``transaction``)."""

    def transaction(self) -> AbstractAsyncContextManager[ReadModelTx]: ...

    async def checkpoint(self, projection: str) -> int: ...

    async def active_hashes(self, keys: Sequence[tuple[str, str, str]]) -> set[tuple[str, str, str]]: ...

    async def find_active_by_hash(self, tenant: str, project: str, content_hash: str) -> MemoryState | None: ...

    async def conflicted(self, tenant: str, project: str | None, limit: int) -> list[MemoryState]: ...

    async def views(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, MemoryView]: ...

    async def superseded_by(self, tenant: str, memory_id: UUID) -> list[MemoryView]:
        """The tenant's memories superseded by ``memory_id`` now (status superseded, naming it)."""
        ...

    async def get(self, tenant: str, memory_id: UUID) -> MemoryState | None: ...

    async def list_active(
        self, tenant: str, project: str | None, category: str | None, keyword: str | None, limit: int,
        statuses: Sequence[str] = ("active",), *, created_from: datetime | None = None,
        created_before: datetime | None = None, source: str | None = None, sort: str = "importance",
        after: Sequence[object] | None = None,
    ) -> list[MemoryView]: ...

    async def shared_memories(
        self, tenant: str, title: str | None, keyword: str | None, limit: int
    ) -> list[SharedMemoryView]: ...

    async def projects(self, tenant: str) -> list[ProjectInfo]: ...

    async def profile(self, tenant: str, project: str | None, static_limit: int, dynamic_limit: int) -> Profile: ...

    async def standing(
        self, tenant: str, project: str | None, moment: datetime, *, order: StandingOrder, limit: int,
        category: str | None = None, keyword: str | None = None, profile_facts: bool = False,
        then: frozenset[str] = frozenset({"standing"}),
    ) -> list[MemoryView]:
        """The candidates for an answer as of ``moment``: current or superseded memories said by then
        and, per ``then``, not superseded then ("standing") and/or superseded by then ("superseded"),
        in ``order``; the filters are applied to the current version, except for a memory changed since
        (it may have matched then: the caller decides on the version then)."""
        ...

    async def indexed_memory_count(self) -> int:
        """How many memories have a point in the vector index (active or superseded), of every tenant."""
        ...

    async def indexed_memory_ids(self) -> list[UUID]:
        """The ids of every memory with a point in the vector index, of every tenant."""
        ...

    async def applied_sequences(self, ids: Sequence[UUID]) -> dict[UUID, int]: ...

    # daily logs, extraction tasks and results (project None: every project of the tenant)
    async def get_log(self, tenant: str, log_id: UUID) -> DailyLogState | None:
        """A log that is not deleted."""

    async def waiting_logs(
        self, tenant: str, project: str | None, include_failed: bool, limit: int
    ) -> list[DailyLogState]: ...

    async def stuck_log_ids(self, tenant: str, project: str | None, started_before: datetime, limit: int) -> list[UUID]: ...

    async def unreconciled_log_ids(self, tenant: str, project: str | None, limit: int) -> list[UUID]:
        """Processed logs with no extraction result."""

    async def expired_log_ids(self, tenant: str, project: str | None, cutoff: datetime, limit: int) -> list[UUID]:
        """Processed logs last updated before ``cutoff``."""

    async def learnt_from_log(self, tenant: str, log_id: UUID, limit: int = 1000) -> list[MemoryState]:
        """Current memories whose provenance names the daily log."""

    async def expired_superseders(self, now: datetime, limit: int) -> list[tuple[str, UUID, int]]:
        """``(tenant, memory id, version)`` of current memories, of every user, whose ``forget_after``
        has passed by ``now`` and that still hide a memory they superseded: the soonest expired
        first, at most ``limit``."""

    async def get_task(self, tenant: str, task_uuid: UUID) -> ExtractionTaskState | None: ...

    async def tasks(
        self, tenant: str, project: str | None, status: str | None, task_id: str | None, limit: int,
        log_id: UUID | None = None,
    ) -> list[ExtractionTaskState]: ...

    async def logs(
        self, tenant: str, project: str | None, status: str | None, date_from: date | None, date_to: date | None,
        limit: int, after: tuple[date, UUID] | None = None,
    ) -> list[DailyLogState]: ...

    async def results(
        self, tenant: str, project: str | None, log_id: UUID | None, task_id: str | None, limit: int
    ) -> list[ExtractionResultState]: ...

    async def existing_ids(
        self, table: Literal["memories", "shared_memories"], tenant: str, ids: Sequence[UUID]
    ) -> set[UUID]:
        """Which of ``ids`` the tenant has memories (or shared memories) under."""

    async def drop_read_model(self) -> None: ...
