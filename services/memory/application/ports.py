"""The memory application's ports: what it needs from the outside world, and the types they speak.

Adapters (``services/memory/adapters``) implement these; the application never imports an
adapter. Optional capabilities (batch priming, index optimisation) are part of the ports, with
no-op defaults that an adapter inherits when it lacks them.

* :class:`VectorIndex` — the memories' dense and keyword vectors (a projection, rebuilt by
  replay). Schema and search semantics: :mod:`services.memory.adapters.vectors`.
* :class:`Embedder`, :class:`LateEncoder`, :class:`Reranker` — the models.
* :class:`EventLog` — the aggregates' events (kit's bus implements it).
* :class:`ReadModel` / :class:`ReadModelTx` — the Postgres read model and its unit of work.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable
from uuid import UUID

import numpy as np

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
from services.memory.domain.keywords import SparseVector

if TYPE_CHECKING:
    from services.memory.application.vector_cache import VectorCache

__all__ = [
    "TENANT_FIELD",
    "DocumentTokens",
    "Embedder",
    "EventLog",
    "LateEncoder",
    "Models",
    "LogRecord",
    "ReadModel",
    "ReadModelTx",
    "Reranker",
    "SearchFilter",
    "SearchHit",
    "SearchMode",
    "SparseVector",
    "VectorIndex",
    "VectorPoint",
    "default_prefetch_limit",
]

TENANT_FIELD = "tenant"
SearchMode = Literal["hybrid", "dense", "sparse"]


def default_prefetch_limit(limit: int) -> int:
    """Candidates each prefetch of a hybrid search contributes when none is asked: ``max(4*limit, 50)``."""
    return max(limit * 4, 50)


# vectors -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VectorPoint:
    """One memory as the index stores it.

    ``id`` is the memory's UUID (string form); ``payload`` must contain
    ``tenant`` and should contain the other filter fields it wants to be
    filterable by (``project``, ``status``, ``category``).
    """

    id: str
    dense: Sequence[float]
    sparse: SparseVector
    payload: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        uuid.UUID(self.id)  # raises ValueError on a malformed id
        if not isinstance(self.payload.get(TENANT_FIELD), str) or not self.payload[TENANT_FIELD]:
            raise ValueError(f"point {self.id}: payload needs a non-empty string 'tenant'")


@dataclass(frozen=True)
class SearchFilter:
    """Conditions every hit must meet. ``None`` leaves a field unconstrained,
    except ``tenant``, which is always required."""

    tenant: str
    project: str | None = None
    status: str | None = "active"
    category: str | None = None

    def __post_init__(self) -> None:
        if not self.tenant:
            raise ValueError("SearchFilter.tenant must be a non-empty string")

    def conditions(self) -> dict[str, str]:
        """Field -> required value, tenant first; unconstrained fields omitted."""
        pairs = {
            "tenant": self.tenant,
            "project": self.project,
            "status": self.status,
            "category": self.category,
        }
        return {k: v for k, v in pairs.items() if v is not None}


@dataclass(frozen=True)
class SearchHit:
    """A search result: the point's id (UUID string), engine score, payload, and its stored
    keyword vector when the search asked for it (``with_keywords``; empty if it has none)."""

    id: str
    score: float
    payload: dict[str, Any]
    keywords: SparseVector | None = None


#: The payload field of a memory's point that fingerprints everything the point is made of (the
#: memory's state, the embedder, the indexing recipe, the point's layout):
#: :mod:`services.memory.application.index_sync`.
FINGERPRINT_FIELD = "fingerprint"


@runtime_checkable
class VectorIndex(Protocol):
    """Port to the vector index holding the memories' dense and keyword vectors.

    All methods are coroutines. ``ensure`` must be awaited before any other
    call (it is idempotent); ``drop`` removes everything and ``ensure``
    recreates an empty index; ``close`` releases resources (the instance is not
    usable afterwards). ``search`` runs one query as asked: ranking rules above
    a query (keyword feedback, late interaction, rerank) are the recall
    pipeline's (:mod:`services.memory.application.recall`).
    """

    #: whether the engine builds its search indexes by itself (a Qdrant server); when not, the
    #: service asks it to in quiet moments (``needs_optimize`` / ``optimize``)
    optimizes_itself: bool = True
    #: ``ensure()`` created the index (there was none): it holds nothing yet
    created: bool = False

    async def ensure(self) -> None: ...

    async def upsert(self, points: Sequence[VectorPoint]) -> None: ...

    async def delete(self, ids: Sequence[str]) -> None: ...

    async def set_payload(self, ids: Sequence[str], payload: dict[str, Any]) -> None: ...

    async def search(
        self,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector | None,
        filter: SearchFilter,
        limit: int,
        mode: SearchMode = "hybrid",
        prefetch_limit: int | None = None,
        with_keywords: bool = False,
    ) -> list[SearchHit]: ...

    async def count(self, filter: SearchFilter) -> int: ...

    async def fingerprints(self, ids: Sequence[str]) -> dict[str, str | None]:
        """The :data:`FINGERPRINT_FIELD` stored with each of ``ids`` the index holds (None for a
        point written without one); ids it does not hold are left out. What a replay compares
        with the points it would write, to leave the ones already right alone."""
        ...

    async def size(self) -> int:
        """How many points the index holds, of every tenant."""
        ...

    async def point_ids(self) -> list[str]:
        """The id of every point the index holds (a replay's sweep of points the log does not have)."""
        ...

    async def delete_tenant(self, tenant: str) -> None:
        """Delete every point of ``tenant`` (a purged user, on a replica that did not run the purge)."""
        ...

    async def drop(self) -> None: ...

    async def close(self) -> None: ...

    def needs_optimize(self) -> bool:
        """Whether enough points wait for an index build to make ``optimize`` worthwhile."""
        return False

    async def optimize(self) -> bool:
        """Build search indexes now (blocking the engine); True if anything was optimised."""
        return False


# models ------------------------------------------------------------------------------------------
@runtime_checkable
class Embedder(Protocol):
    """Turns texts into dense vectors.

    ``embed`` returns a ``float32`` array of shape ``(len(texts), dim)`` whose
    rows are L2-normalised, in the order of ``texts``. ``model_id`` names the
    model so stored vectors can be traced to (and re-embedded from) it.
    ``prime`` / ``cached`` are batch priming (see
    :class:`services.memory.application.embedding.PrimedEmbedder`); an
    embedder without it primes nothing and has nothing cached.
    """

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def prime(self, texts: Sequence[str]) -> int:
        """Embed many texts at once ahead of their use; return how many were embedded."""
        return 0

    def cached(self, texts: Sequence[str]) -> np.ndarray | None:
        """The vectors of ``texts`` if every one is primed (no embedding), else None."""
        return None


@dataclass(frozen=True)
class DocumentTokens:
    """A document's token vectors (unit rows, ``float32``) and which rows come from its context."""

    vectors: np.ndarray
    from_context: np.ndarray  # bool, one per row


@runtime_checkable
class LateEncoder(Protocol):
    """Encodes queries and documents into unit token vectors of ``dim`` dimensions; ``prime`` /
    ``cached`` as for :class:`Embedder`."""

    model_id: str
    dim: int

    def encode_query(self, text: str) -> np.ndarray: ...

    def encode_documents(self, documents: Sequence[tuple[str | None, str]]) -> list[DocumentTokens]: ...

    def prime(self, documents: Sequence[tuple[str | None, str]]) -> int:
        return 0

    def cached(self, documents: Sequence[tuple[str | None, str]]) -> list[DocumentTokens] | None:
        return None


@runtime_checkable
class Reranker(Protocol):
    """Scores how well each text answers ``query``: one relevance in (0, 1) per text, same order."""

    model_id: str

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class EmbeddingCacheStore(Protocol):
    """Durable storage of what a model made of a text (a sentence vector, a memory's packed token
    rows), keyed by (model id, SHA-256 of the text): a cache, never the source of truth (a miss
    recomputes; it may be emptied at any time). See
    :class:`services.memory.application.vector_cache.VectorCache`."""

    async def get_many(self, keys: Sequence[tuple[str, bytes]]) -> dict[tuple[str, bytes], bytes]:
        """The stored values of ``keys`` (model, digest) that are present, in one round trip."""
        ...

    async def put_many(self, items: Sequence[tuple[str, bytes, bytes]]) -> None:
        """Store (model, digest, value) items; an existing key is left as it is."""
        ...

    async def delete_digests(self, digests: Sequence[bytes]) -> int:
        """Delete the entries of ``digests`` under every model (a purged user's texts); how many."""
        ...


@dataclass
class Models:
    """The models the application runs: shared by saving, projecting and recalling, so that one
    configuration (e.g. no late-interaction encoder) holds on every path. ``cache`` (optional)
    keeps their outputs across restarts and replays (``vector_cache.VectorCache``)."""

    embedder: Embedder
    late_encoder: LateEncoder | None = None
    reranker: Reranker | None = None
    cache: VectorCache | None = None


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
        late_tokens: bytes | None = None,
    ) -> None: ...

    async def replay_memories(
        self, rows: Sequence[tuple[MemoryState, str, int, bytes | None, bytes | None]], late_model: str,
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


class ReadModel(Protocol):
    """Reads of the memory read model, and its unit of work (``transaction``)."""

    def transaction(self) -> AbstractAsyncContextManager[ReadModelTx]: ...

    async def checkpoint(self, projection: str) -> int: ...

    async def active_hashes(self, keys: Sequence[tuple[str, str, str]]) -> set[tuple[str, str, str]]: ...

    async def find_active_by_hash(self, tenant: str, project: str, content_hash: str) -> MemoryState | None: ...

    async def get(self, tenant: str, memory_id: UUID) -> MemoryState | None: ...

    async def active_views(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, MemoryView]: ...

    async def late_tokens(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, bytes | None]: ...

    async def list_active(
        self, tenant: str, project: str | None, category: str | None, keyword: str | None, limit: int
    ) -> list[MemoryView]: ...

    async def shared_memories(
        self, tenant: str, title: str | None, keyword: str | None, limit: int
    ) -> list[SharedMemoryView]: ...

    async def projects(self, tenant: str) -> list[ProjectInfo]: ...

    async def profile(self, tenant: str, project: str | None, static_limit: int, dynamic_limit: int) -> Profile: ...

    async def active_memory_count(self) -> int:
        """How many memories are active, of every tenant."""
        ...

    async def active_memory_ids(self) -> list[UUID]:
        """The ids of every active memory, of every tenant."""
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

    async def get_task(self, tenant: str, task_uuid: UUID) -> ExtractionTaskState | None: ...

    async def tasks(
        self, tenant: str, project: str | None, status: str | None, task_id: str | None, limit: int
    ) -> list[ExtractionTaskState]: ...

    async def results(
        self, tenant: str, project: str | None, log_id: UUID | None, task_id: str | None, limit: int
    ) -> list[ExtractionResultState]: ...

    async def existing_ids(
        self, table: Literal["memories", "shared_memories"], tenant: str, ids: Sequence[UUID]
    ) -> set[UUID]:
        """Which of ``ids`` the tenant has memories (or shared memories) under."""

    async def drop_read_model(self) -> None: ...
