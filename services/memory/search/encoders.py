"""The encoders the memory service runs (the sentence embedder, the late-interaction encoder, the
reranker), bundled: shared by saving, projecting and recalling, so that one configuration (e.g. no
late-interaction encoder) holds on every path — with what a memory is indexed with (its point, its
late-interaction tokens, what the embedding cache holds of its text), computed here and nowhere
else, and the priming of a batch."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from contracts.memory import MemoryState
from services.memory.domain.model import indexed
from services.memory.search.index_sync import fingerprint, point_recipe
from services.memory.search.indexing import embedding_texts, point_for, state_vector
from services.memory.search.late import document_matrix, late_document, pack
from services.memory.search.ports import Embedder, LateEncoder, Reranker, VectorPoint
from services.memory.search.vector_cache import VectorCache, forget_primed, memory_digests

__all__ = ["Encoders", "Indexed", "forget_local_texts", "owned_by"]

#: what a memory is indexed with: its point (None: not active, no point), its packed late-interaction
#: tokens (None: not active, or no late encoder), and (tenant, digest) of what the embedding cache
#: holds of its text (empty without a cache)
Indexed = tuple[VectorPoint | None, bytes | None, list[tuple[str, bytes]]]


@dataclass
class Encoders:
    """The encoders the service runs: shared by saving, projecting and recalling, so that one
    configuration (e.g. no late-interaction encoder) holds on every path. ``cache`` (optional)
    keeps their outputs across restarts and replays (``vector_cache.VectorCache``)."""

    embedder: Embedder
    late_encoder: LateEncoder | None = None
    reranker: Reranker | None = None
    cache: VectorCache | None = None

    async def indexed(self, state: MemoryState, restored: bool = False) -> Indexed:
        """What ``state`` is indexed with (:data:`Indexed`), both encoders at once (``restored``: its
        event came from an import)."""
        if not indexed(state):
            return None, None, []
        vector, late = await asyncio.gather(self.memory_vector(state), self.late_tokens(state))
        point = point_for(state, vector, fingerprint=self.fingerprint(state), restored=restored)
        return point, late, owned_by(state) if self.cache is not None else []

    def fingerprint(self, state: MemoryState) -> str:
        """The fingerprint of ``state``'s point (:mod:`.index_sync`)."""
        return fingerprint(point_recipe(self.embedder.model_id), state)

    async def memory_vector(self, state: MemoryState) -> list[float]:
        """The memory's dense vector; from primed sentence vectors without leaving the event loop
        when the batch was primed, else embedded in a worker thread."""
        texts = embedding_texts(state)
        embedder = self.embedder
        vectors = embedder.cached(texts)
        if vectors is None and self.cache is not None:  # not primed: through the cache
            await self.prime(texts, [])
            vectors = embedder.cached(texts)
        if vectors is None:
            vectors = await asyncio.to_thread(embedder.embed, texts)
        return state_vector(state, vectors)

    async def late_tokens(self, state: MemoryState) -> bytes | None:
        """The memory's packed late-interaction token vectors (None without an encoder)."""
        encoder = self.late_encoder
        if encoder is None:
            return None
        document = late_document(state)
        cache = self.cache
        if cache is not None:
            if cache.packed(document) is None and encoder.cached([document]) is None:
                await self.prime([], [document])  # not primed: through the cache
            stored = cache.packed(document)
            if stored is not None:
                return stored  # the bytes computed when this text was first written
        primed = encoder.cached([document])  # a primed batch: no thread hop
        (tokens,) = primed or await asyncio.to_thread(encoder.encode_documents, [document])
        return pack(document_matrix(tokens))

    async def prime(self, texts: list[str], documents: list[tuple[str | None, str]]) -> None:
        """Embed a batch's texts and encode its late-interaction documents, each in one call and
        both at once (each one's last, part-filled chunk leaves a core to the other); a single one
        is left to its own use. With an embedding cache (``cache``) what it holds is loaded first
        (one query), only the rest is computed, and that is stored (one statement)."""
        cache = self.cache
        least = 1
        if cache is not None:
            texts, documents = await cache.load(self, texts, documents)
            least = 0  # even a single one is computed here, so that it can be stored

        async def embed() -> None:
            if len(texts) > least:
                await asyncio.to_thread(self.embedder.prime, texts)

        async def encode() -> None:
            encoder = self.late_encoder
            if encoder is not None and len(documents) > least:
                await asyncio.to_thread(encoder.prime, documents)

        await asyncio.gather(embed(), encode())
        if cache is not None:
            await cache.store_computed(self, texts, documents)


def owned_by(state: MemoryState) -> list[tuple[str, bytes]]:
    """(tenant, digest) of everything the embedding cache may hold of ``state``'s text."""
    return [(state.tenant, digest) for digest in sorted(memory_digests(state))]


def forget_local_texts(encoders: Encoders) -> None:
    """Drop every text this process holds vectors of (primed sentence and token vectors, packed
    rows): after a purge, the texts of the user's replaced versions are in no row to find them by,
    and these are caches (refilled from the embedding cache as texts are needed again)."""
    forget_primed(encoders.embedder, None)
    forget_primed(encoders.late_encoder, None)
    if encoders.cache is not None:
        encoders.cache.forget_packed()
