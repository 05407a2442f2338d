"""The encoders the memory service runs (the sentence embedder, the late-interaction encoder, the
reranker), bundled: shared by saving, projecting and recalling, so that one configuration (e.g. no
late-interaction encoder) holds on every path."""

from __future__ import annotations

from dataclasses import dataclass

from services.memory.search.ports import Embedder, LateEncoder, Reranker
from services.memory.search.vector_cache import VectorCache, forget_primed

__all__ = ["Encoders", "forget_local_texts"]


@dataclass
class Encoders:
    """The encoders the service runs: shared by saving, projecting and recalling, so that one
    configuration (e.g. no late-interaction encoder) holds on every path. ``cache`` (optional)
    keeps their outputs across restarts and replays (``vector_cache.VectorCache``)."""

    embedder: Embedder
    late_encoder: LateEncoder | None = None
    reranker: Reranker | None = None
    cache: VectorCache | None = None


def forget_local_texts(encoders: Encoders) -> None:
    """Drop every text this process holds vectors of (primed sentence and token vectors, packed
    rows): after a purge, the texts of the user's replaced versions are in no row to find them by,
    and these are caches (refilled from the embedding cache as texts are needed again)."""
    forget_primed(encoders.embedder, None)
    forget_primed(encoders.late_encoder, None)
    if encoders.cache is not None:
        encoders.cache.forget_packed()
