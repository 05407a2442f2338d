"""What the extractor's application needs from the world, as protocols (adapters implement them).

- :class:`ExtractionEngine` — turns → facts (built-in rules, an LLM endpoint…).
- :class:`LogSource` — the memory service's daily-log lifecycle (claim, mark, result), the same
  commands an external agent uses through the maintenance tools.
- :class:`MemoryWriter` — the memory service's memory commands and the lookup by key.
- :class:`ExtractedMemories` — a user's extracted memories, for the consolidation schedule.
- :class:`TaskLedger` — the extractor's own table: one row per ``(log_id, task_id)``.
- :class:`Tenants` — the tenants seen in daily-log events (the lifecycle's batch commands are per
  tenant: the schedules run them for each), rebuildable from the event log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Protocol
from uuid import UUID

from services.extractor.domain.consolidate import Held
from services.extractor.domain.model import Extraction, Fact, Turn


class ExtractionEngine(Protocol):
    name: str
    #: the largest piece of a log handed to one call (a larger log is split between turns)
    max_chars: int

    async def extract(self, turns: Sequence[Turn]) -> Extraction: ...


@dataclass(frozen=True)
class LogNotice:
    """A daily-log event as the extractor reads it: which log, and where its lifecycle stands."""

    tenant: str
    log_id: str
    status: str  # pending | processing | processed | failed
    version: int  # the log aggregate's version (stream sequence of the event) — new claim per version
    project: str = "default"
    since: datetime | None = None  # when the event was written (for a pending log: pending since)


@dataclass(frozen=True)
class ClaimedLog:
    """A log this worker holds (status processing), with what extraction reads."""

    tenant: str
    log_id: str
    project: str
    log_date: str
    turns: list[Turn]
    retry_count: int = 0
    #: the log's version at the pending event this claim answers (0: read without a claim)
    episode: int = 0


@dataclass(frozen=True)
class KnownMemory:
    memory_id: UUID
    content: str
    memory_key: str | None
    version: int
    #: when its content was said: (its log's date, its first turn) for an extracted memory, (the day
    #: it was last written, -1) for another; None when unknown
    as_of: tuple[date, int] | None = None
    #: (log id, turn digest) of the turns its provenance names: the same turns said again, wherever
    #: a later save of the log has put them, are not a new saying
    turns_said: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Written:
    memory_id: UUID
    created: bool
    updated: bool


@dataclass
class TaskRecord:
    log_id: str
    task_id: str
    tenant: str
    status: str  # running | done | failed
    attempts: int = 0
    memory_ids: list[str] = field(default_factory=list)
    facts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    updated_at: datetime | None = None
    #: the log's version at the pending event this row's attempt handled (0: a re-extraction task)
    episode: int = 0

    def done_for(self, episode: int) -> bool:
        """Whether the task has learned from this pending episode of the log (or a later one)."""
        return self.status == "done" and self.episode >= episode


class LogSource(Protocol):
    async def claim(self, notice: LogNotice, task_id: str, *, key: str) -> ClaimedLog | None:
        """Claim the log (pending → processing); None when another worker holds it or it is done."""
        ...

    async def record_result(self, tenant: str, log_id: str, task_id: str, memory_ids: Sequence[UUID], *,
                            key: str) -> None: ...

    async def mark_processed(self, tenant: str, log_id: str, *, key: str) -> None: ...

    async def mark_failed(self, tenant: str, log_id: str, reason: str, *, key: str) -> None: ...

    async def record_task(self, tenant: str, task_id: str, *, status: str, engine: str,
                          log_ids: Sequence[str] = (), metrics: dict[str, float] | None = None,
                          error: str | None = None, project: str | None = None, key: str) -> None:
        """Record an extraction run's metadata (RecordExtractionTask: status, engine, logs, counts;
        ``project`` when the run covers one project's logs, else tenant-wide)."""
        ...

    async def recover_stuck(self, tenant: str, timeout_minutes: int, *, key: str) -> int:
        """Logs of ``tenant`` stuck in processing → pending (or failed): how many changed."""
        ...

    async def delete_processed(self, tenant: str, retention_days: int, *, key: str) -> int:
        """Processed logs of ``tenant`` older than the retention deleted: how many."""
        ...


@dataclass(frozen=True)
class Origin:
    """Where a fact was extracted: the log and the task (its provenance, with the fact's turns), and
    the digest of each turn of the log as claimed (``turn_digest``, by index): what the memory keeps
    of the turns it came from, even when the log is saved again while it is being extracted."""

    log_id: str
    task_id: str
    turn_digests: Mapping[int, str] = field(default_factory=dict)


class MemoryWriter(Protocol):
    async def by_key(self, tenant: str, project: str, memory_key: str) -> KnownMemory | None: ...

    async def save(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str,
                   origin: Origin | None = None) -> Written: ...

    async def update(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str,
                     origin: Origin | None = None) -> Written: ...


class ExtractedMemories(Protocol):
    """What consolidation reads and writes: a user's extracted memories, and merges."""

    async def extracted(self, tenant: str) -> list[Held]:
        """The user's active memories written by the extractor (every project)."""
        ...

    async def merge(self, tenant: str, held: Held, into: Held, reason: str, *, key: str) -> bool:
        """``held`` merged into ``into`` (one more saying of it); False when it had been already."""
        ...


class Tenants(Protocol):
    async def seen(self, tenant: str) -> None:
        """Note a tenant that has daily logs (cheap when already known)."""
        ...

    async def all(self) -> list[str]: ...


class TaskLedger(Protocol):
    async def start(self, tenant: str, log_id: str, task_id: str, episode: int = 0) -> TaskRecord:
        """The row of (log_id, task_id), created as running or marked running again (attempts + 1)
        unless it is done for ``episode`` (the log's version at its pending event) or a later one."""
        ...

    async def finish(self, record: TaskRecord) -> None: ...

    async def fail(self, log_id: str, task_id: str, error: str) -> None: ...

    async def get(self, log_id: str, task_id: str) -> TaskRecord | None: ...
