"""The search engine's ports: the vector index, the models, the embedding cache's storage, and
the two reads a recall makes of the read model — with the types they speak.

Adapters (``services/memory/adapters``) implement these; the search engine never imports an
adapter, nor the application that uses it. Optional capabilities (batch priming, index
optimisation) are part of the ports, with no-op defaults that an adapter inherits when it lacks
them.

* :class:`VectorIndex` — the memories' dense and keyword vectors (a projection, rebuilt by
  replay). Schema and search semantics: :mod:`services.memory.adapters.vectors`.
* :class:`Embedder`, :class:`LateEncoder`, :class:`Reranker` — the models (bundled as
  :class:`services.memory.search.encoders.Encoders`); :class:`CachedEncoders` — the two of them a cache primes.
* :class:`EmbeddingCacheStore` — durable storage of what the models made of a text.
* :class:`RecallReads` — what a recall reads of the memories' read model (the application's
  ``ReadModel`` has it).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import UUID

import numpy as np

from contracts.memory import MemoryView
from services.memory.domain.keywords import SparseVector

__all__ = [
    "FINGERPRINT_FIELD",
    "TENANT_FIELD",
    "CachedEncoders",
    "DocumentTokens",
    "Embedder",
    "EmbeddingCacheStore",
    "LateEncoder",
    "RecallReads",
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
#: :mod:`services.memory.search.index_sync`.
FINGERPRINT_FIELD = "fingerprint"


@runtime_checkable
class VectorIndex(Protocol):
    """Port to the vector index holding the memories' dense and keyword vectors.

    All methods are coroutines. ``ensure`` must be awaited before any other
    call (it is idempotent); ``drop`` removes everything and ``ensure``
    recreates an empty index; ``close`` releases resources (the instance is not
    usable afterwards). ``search`` runs one query as asked: ranking rules above
    a query (keyword feedback, late interaction, rerank) are the recall
    pipeline's (:mod:`services.memory.search.recall`).
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
        with_payload: bool = True,
    ) -> list[SearchHit]: ...

    async def stored_dense(self, ids: Sequence[str], fields: Sequence[str]) -> dict[str, tuple[list[float], dict[str, Any]]]:
        """The dense vector stored with each of points ``ids`` and its payload's ``fields`` (one read);
        ids the index does not hold are left out. Not tenant-filtered: the caller checks the payload's
        ``tenant``."""
        ...

    async def nearest(self, queries: Sequence[tuple[Sequence[float], SearchFilter]], limit: int) -> list[list[SearchHit]]:
        """Several dense searches, each within its filter, planned as one batch; hits carry ids and
        scores only (no payload). One list of at most ``limit`` hits per query, in the order asked."""
        ...

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

    def unindexed_points(self) -> int:
        """Points no search index covers yet (searched by full scan until ``optimize``)."""
        return 0

    async def flush_if_due(self) -> bool:
        """Persist what was written if the engine's schedule says so (bounding its write-ahead
        log); whether it did. Engines that manage their own persistence do nothing."""
        return False

    async def optimize(self) -> bool:
        """Build search indexes now (blocking the engine); True if anything was optimised."""
        return False

    def segments(self) -> int:
        """How many pieces the index is split into, each searched on its own (0: not known here)."""
        return 0

    def needs_compaction(self) -> bool:
        """Whether the index is split into enough pieces that ``compact`` would make searches cheaper."""
        return False

    async def compact(self) -> object | None:
        """Merge the index's pieces without blocking searches and writes meanwhile; what it did
        (``None``: nothing). Engines that merge by themselves do nothing."""
        return None


# models ------------------------------------------------------------------------------------------
@runtime_checkable
class Embedder(Protocol):
    """Turns texts into dense vectors.

    ``embed`` returns a ``float32`` array of shape ``(len(texts), dim)`` whose
    rows are L2-normalised, in the order of ``texts``. ``model_id`` names the
    model so stored vectors can be traced to (and re-embedded from) it.
    ``prime`` / ``cached`` are batch priming (see
    :class:`services.memory.search.embedding.PrimedEmbedder`); an
    embedder without it primes nothing and has nothing cached.
    """

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray:
        """A search query's vector, ``(dim,)`` (recall's; an embedder may run queries faster than
        memories, e.g. with another kernel, as long as they search the memories' vectors as well)."""
        vector: np.ndarray = self.embed([text])[0]
        return vector

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
    :class:`services.memory.search.vector_cache.VectorCache`."""

    async def get_many(self, keys: Sequence[tuple[str, bytes]]) -> dict[tuple[str, bytes], bytes]:
        """The stored values of ``keys`` (model, digest) that are present, in one round trip."""
        ...

    async def put_many(self, items: Sequence[tuple[str, bytes, bytes]]) -> None:
        """Store (model, digest, value) items; an existing key is left as it is."""
        ...

    async def delete_digests(self, digests: Sequence[bytes]) -> int:
        """Delete the entries of ``digests`` under every model (a purged user's texts); how many."""
        ...


class CachedEncoders(Protocol):
    """The encoders whose outputs the embedding cache primes and stores (``Encoders`` has them)."""

    @property
    def embedder(self) -> Embedder: ...

    @property
    def late_encoder(self) -> LateEncoder | None: ...


# the read model, as a recall reads it -------------------------------------------------------------
class RecallReads(Protocol):
    """What a recall reads of the memories' read model: the views of hits whose points carry none,
    the candidates' stored late-interaction tokens, and the memories naming a relation asked for."""

    async def active_views(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, MemoryView]: ...

    async def views(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, MemoryView]: ...

    async def late_tokens(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, bytes | None]: ...

    async def alias_sources(self, tenant: str, project: str | None, keys: Sequence[str], limit: int,
                            said_by: datetime | None = None) -> list[str]:
        """The words of current memories stating an alias under one of ``keys`` (newest first); with
        ``said_by``, only those created by then (a recall ``as_of`` a moment)."""
