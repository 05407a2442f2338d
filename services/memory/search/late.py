"""Late interaction: a memory's token vectors, how they are stored, and how a query scores them.

Recall's default (hybrid) search finds candidates with one dense vector and one keyword vector
per memory. It cannot tell "How long has Nate had his turtles?" answered by "I've had them for 3
years now" from a dozen turns that mention turtles. A late-interaction encoder
(:class:`services.memory.search.ports.LateEncoder`) keeps one vector per token: the question's
"how long" meets the answer's "3 years", its "turtles" meets the context's "turtles". The best
:data:`LATE_CANDIDATES` hits of the hybrid search are scored by MaxSim (each query token takes
its best match among the memory's tokens, summed) and that order is fused with the search's
(:func:`services.memory.search.indexing.rerank_order`: ``1/(10 + late rank) + 0.5/(10 +
search rank)``). On LoCoMo R@5 / R@10 0.650 / 0.742 → ~0.72 / ~0.80 for ~2–4 ms
(docs/recall-quality.md). :func:`late_order` then puts the candidates in the learned order
(:mod:`services.memory.domain.candidate_order`: 0.774 / 0.834).

* A memory's context counts, token for token, :data:`CONTEXT_TOKEN_WEIGHT` of its content: the
  rows from the context are scaled before they are stored, so MaxSim prefers the content's own
  word when both match.
* Stored form (:func:`pack` / :func:`unpack`): one ``int8`` row per token with its own ``float32``
  scale (~388 bytes a token at 384 dims, ~10–50 KB a memory). Scoring with the unpacked rows
  matched the exact ones on LoCoMo to the third decimal.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from contracts.memory import MemoryState, MemoryView
from services.memory.domain.candidate_order import Candidate, learned_order
from services.memory.domain.truth import valid_from
from services.memory.search.indexing import embedded_content, rerank_order
from services.memory.search.ports import DocumentTokens

__all__ = [
    "CONTEXT_TOKEN_WEIGHT",
    "LATE_CANDIDATES",
    "document_matrix",
    "late_document",
    "late_order",
    "late_prefetch_limit",
    "maxsim",
    "maxsim_packed",
    "pack",
    "unpack",
]

#: How much a token of a memory's context counts next to a token of its content. On LoCoMo 1.0
#: gave R@5 0.703, 0.9 gave 0.726 and 0.8 0.723 (docs/recall-quality.md).
CONTEXT_TOKEN_WEIGHT = 0.9
#: How many of the hybrid search's best hits late interaction re-orders (at least the limit).
LATE_CANDIDATES = 50


def late_prefetch_limit(candidates: int) -> int:
    """Hits each leg of the hybrid search contributes when late interaction re-orders its best
    ``candidates``: twice as many (LoCoMo, 50 candidates: prefetch 100 gave R@5 / R@10 0.729 / 0.803,
    the default 200 0.726 / 0.802, at half the search time at 100,000 memories)."""
    return 2 * candidates


_MAGIC = b"LT1"
_HEADER = struct.Struct("<3sHI")  # magic, dims, rows


def late_document(state: MemoryState | MemoryView) -> tuple[str | None, str]:
    """What the late-interaction encoder reads for a memory: its context and its content (without
    bracketed absolute dates, as the dense vector: :func:`.indexing.embedded_content`)."""
    return state.context, embedded_content(state.content)


def document_matrix(tokens: DocumentTokens) -> np.ndarray:
    """The rows a memory is scored with: its token vectors, the context's scaled by
    :data:`CONTEXT_TOKEN_WEIGHT`."""
    weights = np.where(tokens.from_context, CONTEXT_TOKEN_WEIGHT, 1.0).astype(np.float32)
    matrix: np.ndarray = tokens.vectors.astype(np.float32) * weights[:, None]
    return matrix


def pack(matrix: np.ndarray) -> bytes:
    """``matrix`` (rows × dims, float) as bytes: a header, one float32 scale per row, int8 rows."""
    rows, dims = matrix.shape
    peak = np.abs(matrix).max(axis=1) if rows else np.zeros(0, dtype=np.float32)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    values = np.clip(np.rint(matrix / scales[:, None]), -127, 127).astype(np.int8)
    return _HEADER.pack(_MAGIC, dims, rows) + scales.astype("<f4").tobytes() + values.tobytes()


def _parts(blob: bytes | None, dims: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(scales, int8 rows) of a blob :func:`pack` wrote, as views; None if it did not, or for
    other dimensions."""
    if not blob or len(blob) < _HEADER.size:
        return None
    magic, stored_dims, rows = _HEADER.unpack_from(blob)
    if magic != _MAGIC or stored_dims != dims or len(blob) != _HEADER.size + rows * (4 + dims):
        return None
    scales = np.frombuffer(blob, dtype="<f4", count=rows, offset=_HEADER.size)
    values = np.frombuffer(blob, dtype=np.int8, count=rows * dims, offset=_HEADER.size + 4 * rows)
    return scales, values.reshape(rows, dims)


def unpack(blob: bytes | None, dims: int) -> np.ndarray | None:
    """The rows :func:`pack` stored, or None if ``blob`` is missing or of another form or size
    (e.g. written by another encoder: such a memory is encoded again, see the service)."""
    parts = _parts(blob, dims)
    if parts is None:
        return None
    scales, values = parts
    matrix: np.ndarray = values.astype(np.float32) * scales[:, None]
    return matrix


def _best_per_document(products: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """Sum over the query's rows of each document's best product; ``products`` (document rows ×
    query rows) holds the documents' rows one after the other, ``lengths`` rows each (all > 0).
    (Documents × query is the faster layout for BLAS here: 0.55 vs 0.67 ms for 50 candidates.)"""
    starts = np.cumsum([0, *lengths[:-1]])
    best: np.ndarray = np.maximum.reduceat(products, starts, axis=0).sum(axis=1, dtype=np.float64)
    return best


def maxsim_packed(query: np.ndarray, blobs: Sequence[bytes | None], dims: int) -> np.ndarray:
    """:func:`maxsim` of ``query`` against the stored (packed) token vectors of each document,
    without unpacking them one by one: the int8 rows of all documents are converted and
    multiplied at once, and each product scaled by its row's scale. NaN for a blob that
    :func:`unpack` would refuse (the caller encodes that document), 0.0 for one without rows."""
    scores = np.full(len(blobs), np.nan, dtype=np.float64)
    parts = {i: p for i, blob in enumerate(blobs) if (p := _parts(blob, dims)) is not None}
    scores[list(parts)] = 0.0
    present = [i for i, (scale, _) in parts.items() if len(scale)]
    if not present or not len(query):
        return scores
    values = np.concatenate([parts[i][1] for i in present]).astype(np.float32)
    row_scales = np.concatenate([parts[i][0] for i in present])
    products = (values @ query.astype(np.float32).T) * row_scales[:, None]  # (all document rows, query rows)
    scores[present] = _best_per_document(products, [len(parts[i][0]) for i in present])
    return scores


def maxsim(query: np.ndarray, documents: Sequence[np.ndarray]) -> np.ndarray:
    """For each document, the sum over the query's rows of their best dot product with one of
    the document's rows (0.0 for a document without rows). One matrix product for all of them."""
    scores = np.zeros(len(documents), dtype=np.float64)
    present = [i for i, d in enumerate(documents) if len(d)]
    if not present or not len(query):
        return scores
    stacked = np.concatenate([documents[i] for i in present]).astype(np.float32)
    products = stacked @ query.astype(np.float32).T  # (all document rows, query rows)
    scores[present] = _best_per_document(products, [len(documents[i]) for i in present])
    return scores


def late_order(
    question: str, memories: Sequence[MemoryState | MemoryView], search_scores: Sequence[float],
    late_scores: Sequence[float],
) -> list[tuple[int, float]]:
    """``(position, score)`` of each candidate, best first: the search's and late interaction's
    orders fused by rank (:func:`~services.memory.search.indexing.rerank_order`), then ordered by
    :func:`~services.memory.domain.candidate_order.learned_order` over that fused order (their
    scores, words and neighbours among the candidates). Scores are rank scores in (0, 1]."""
    fused = rerank_order(late_scores, search_scores)
    candidates = [
        Candidate(content=memories[i].content, context=memories[i].context, said_at=valid_from(memories[i]),
                  search_score=search_scores[i], late_score=late_scores[i])
        for i, _ in fused
    ]
    return [(fused[j][0], score) for j, score in learned_order(question, candidates)]
