"""What both vector-index adapters share: the collection's schema and the checks of a search.

The port (:class:`services.memory.search.ports.VectorIndex`) and the types it speaks are the
search engine's; :mod:`services.memory.adapters.vector_factory` picks an adapter from configuration.
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
* ``with_keywords`` returns each hit's stored keyword vector in a hybrid search (the recall
  pipeline's keyword feedback reads them: :mod:`services.memory.search.recall`);
* IDF statistics for the keyword vector are computed over the searching
  tenant's points only (``tenant_scoped_idf``, default on), so one tenant's
  vocabulary never shifts another tenant's scores;
* scores are returned as the engine computes them (cosine similarity, BM25, or
  the RRF sum).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.memory.search.ports import TENANT_FIELD, SearchFilter, SparseVector, default_prefetch_limit

__all__ = [
    "DENSE_VECTOR",
    "KEYWORD_FIELDS",
    "RRF_K",
    "SPARSE_VECTOR",
    "TENANT_FIELD",
    "as_float_list",
    "default_prefetch_limit",
    "validate_search",
]

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "keywords"
#: Payload fields with a keyword index (the tenant one is flagged ``is_tenant``).
KEYWORD_FIELDS: tuple[str, ...] = ("tenant", "project", "status", "category")
#: Reciprocal Rank Fusion constant; 2 is Qdrant server's default for ``Fusion.RRF``.
RRF_K = 2

def as_float_list(vector: Sequence[float]) -> list[float]:
    """A plain ``list[float]`` (what the engines take) from any float sequence;
    numpy arrays are converted in C rather than element by element."""
    if isinstance(vector, np.ndarray):
        converted: list[float] = vector.astype(np.float64).ravel().tolist()
        return converted
    return [float(x) for x in vector]


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
