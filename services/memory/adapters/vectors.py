"""Vector-index port, the types it speaks, and the adapter factory.

The index is a *projection*: Postgres holds the memories, the index holds, per
memory, a dense embedding, a keyword (sparse) vector and a small payload used
for filtering. It can always be dropped and rebuilt by replaying events.

Schema, identical in both adapters:

* dense vector ``dense`` - cosine distance, ``dim`` dimensions;
* sparse vector ``keywords`` - Qdrant's ``idf`` modifier, so stored
  term-frequency weights (:func:`services.memory.domain.keywords.document_vector`)
  and unit query weights score as BM25;
* keyword payload indexes on ``tenant`` (``is_tenant``), ``project``,
  ``status`` and ``category``.

Search semantics, identical in both adapters:

* the tenant condition is part of every search and count - there is no way to
  query across tenants through this port;
* ``hybrid`` runs a dense and a sparse prefetch (each limited to
  ``prefetch_limit``, default ``max(4 * limit, 50)``, each carrying the full
  filter) fused by Reciprocal Rank Fusion with ``k = RRF_K``; ``dense`` and
  ``sparse`` query one vector with the filter;
* keyword feedback (``keyword_feedback``, default on): a ``hybrid`` search
  first runs as above with limit ``max(limit, FEEDBACK_POOL)``, reading the
  hits' stored keyword vectors;
  :func:`~services.memory.domain.keywords.expand_query` adds the terms that
  characterise its best hits to the sparse query, and the search runs again
  with it (the dense query is unchanged). When nothing can be added, the first
  round's top ``limit`` is the answer. Two engine queries instead of one; on
  LoCoMo hybrid recall@10 rose from 0.711 to 0.725 (docs/recall-quality.md).
  ``sparse`` searches stay literal: every hit shares a term with the query;
* IDF statistics for the keyword vector are computed over the searching
  tenant's points only (``tenant_scoped_idf``, default on), so one tenant's
  vocabulary never shifts another tenant's scores;
* scores are returned as the engine computes them (cosine similarity, BM25, or
  the RRF sum).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from services.memory.domain.keywords import SparseVector

__all__ = [
    "DENSE_VECTOR",
    "KEYWORD_FIELDS",
    "RRF_K",
    "SPARSE_VECTOR",
    "TENANT_FIELD",
    "SearchFilter",
    "SearchHit",
    "SearchMode",
    "SparseVector",
    "VectorIndex",
    "VectorPoint",
    "as_float_list",
    "build_vector_index",
    "default_prefetch_limit",
    "feedback_pool_limit",
    "validate_search",
]

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "keywords"
TENANT_FIELD = "tenant"
#: Payload fields with a keyword index (the tenant one is flagged ``is_tenant``).
KEYWORD_FIELDS: tuple[str, ...] = ("tenant", "project", "status", "category")
#: Reciprocal Rank Fusion constant; 2 is Qdrant server's default for ``Fusion.RRF``.
RRF_K = 2
#: Hits of a keyword-feedback search's first round: the best ``FEEDBACK_DOCS`` of them are read
#: as relevant, all of them are the background a feedback term must stand out from.
FEEDBACK_POOL = 50

SearchMode = Literal["hybrid", "dense", "sparse"]


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
    """A search result: the point's id (UUID string), engine score, payload."""

    id: str
    score: float
    payload: dict[str, Any]


@runtime_checkable
class VectorIndex(Protocol):
    """Port to the vector index holding the memories' dense and keyword vectors.

    All methods are coroutines. ``ensure`` must be awaited before any other
    call (it is idempotent); ``drop`` removes everything and ``ensure``
    recreates an empty index; ``close`` releases resources (the instance is not
    usable afterwards).
    """

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
    ) -> list[SearchHit]: ...

    async def count(self, filter: SearchFilter) -> int: ...

    async def drop(self) -> None: ...

    async def close(self) -> None: ...


def as_float_list(vector: Sequence[float]) -> list[float]:
    """A plain ``list[float]`` (what the engines take) from any float sequence;
    numpy arrays are converted in C rather than element by element."""
    if isinstance(vector, np.ndarray):
        converted: list[float] = vector.astype(np.float64).ravel().tolist()
        return converted
    return [float(x) for x in vector]


def default_prefetch_limit(limit: int) -> int:
    """Candidates each prefetch of a hybrid search contributes: ``max(4*limit, 50)``."""
    return max(limit * 4, 50)


def feedback_pool_limit(limit: int) -> int:
    """Hits of the first round of a keyword-feedback search: ``max(limit, FEEDBACK_POOL)``."""
    return max(limit, FEEDBACK_POOL)


def validate_search(
    *,
    dense: Sequence[float] | None,
    sparse: SparseVector | None,
    filter: SearchFilter,
    limit: int,
    mode: str,
    dim: int,
) -> None:
    """Shared argument checks of ``VectorIndex.search``: ``ValueError`` for a bad
    mode, limit or a missing/mis-sized vector, ``TypeError`` for a filter that is
    not a :class:`SearchFilter`."""
    if not isinstance(filter, SearchFilter):
        raise TypeError("search needs a SearchFilter (the tenant condition is mandatory)")
    if mode not in ("hybrid", "dense", "sparse"):
        raise ValueError(f"unknown search mode {mode!r}; expected 'hybrid', 'dense' or 'sparse'")
    if limit <= 0:
        raise ValueError("limit must be positive")
    if mode in ("hybrid", "dense"):
        if dense is None:
            raise ValueError(f"mode {mode!r} needs a dense query vector")
        if len(dense) != dim:
            raise ValueError(f"dense query vector has {len(dense)} dimensions, index has {dim}")
    if mode in ("hybrid", "sparse") and sparse is None:
        raise ValueError(f"mode {mode!r} needs a sparse query vector")


def build_vector_index(
    *,
    qdrant_url: str | None,
    path: Path,
    dim: int,
    collection: str = "memories",
    api_key: str | None = None,
    tenant_scoped_idf: bool = True,
    keyword_feedback: bool = True,
    owner: str | None = None,
) -> VectorIndex:
    """Pick the adapter from configuration.

    * ``qdrant_url`` ``None`` or ``""`` - :class:`EdgeVectorIndex`, the embedded
      engine, storing its shard in ``path``;
    * ``":memory:"`` - :class:`QdrantServerVectorIndex` over qdrant-client's
      in-process local mode (tests, demos; nothing persisted);
    * any other value - :class:`QdrantServerVectorIndex` against that server URL
      (``api_key`` optional).

    ``tenant_scoped_idf=False`` falls back to collection-wide IDF, for Qdrant
    servers that predate IDF corpus scoping. ``keyword_feedback=False`` turns
    the second round of hybrid searches off. ``owner`` (the install's namespace)
    claims a Qdrant server collection for one install (an embedded shard lives in
    the install's own folder and needs no claim).
    """
    if not qdrant_url:
        from services.memory.adapters.vectors_edge import EdgeVectorIndex

        return EdgeVectorIndex(
            Path(path), dim, tenant_scoped_idf=tenant_scoped_idf, keyword_feedback=keyword_feedback
        )

    from qdrant_client import AsyncQdrantClient

    from services.memory.adapters.vectors_qdrant import QdrantServerVectorIndex

    if qdrant_url == ":memory:":
        client = AsyncQdrantClient(location=":memory:")
    else:
        client = AsyncQdrantClient(url=qdrant_url, api_key=api_key)
    return QdrantServerVectorIndex(
        client, collection, dim, tenant_scoped_idf=tenant_scoped_idf, keyword_feedback=keyword_feedback,
        owner=owner,
    )
