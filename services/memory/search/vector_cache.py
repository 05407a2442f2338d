"""The embedding cache: a memory's text is embedded once, not again at every replay.

Replay rebuilds the read models from the event log, and re-extraction re-saves what it finds;
both used to embed every memory again (137 events/s: two hours for a million memories). What a
model makes of a text depends only on the model and the text, so it is kept, keyed by
(model id, SHA-256 of the text), in durable storage (the :class:`~.ports.EmbeddingCacheStore`
port; Postgres in :mod:`services.memory.adapters.embedding_cache`):

* **sentence vectors** (the embedder's, one per sentence of :func:`.indexing.embedding_texts`):
  the ``float32`` row as it was computed;
* **late-interaction token rows** of a memory's ``(context, content)``: the packed bytes the read
  model stores (:func:`.late.pack` of :func:`.late.document_matrix`), so a replay writes the very
  bytes the save wrote. The key's model id names the packing and the context weight too.

A batch is looked up with one query before it is embedded (:meth:`VectorCache.load`); what was
missing is embedded as before and written back with one statement (:meth:`VectorCache.store`). It
is a cache: a failed lookup or write is logged and costs only the embedding, never the write.

A replay also keeps what it derives from those (:meth:`VectorCache.memory_vectors`): a memory's
**dense vector** (its sentence vectors split, weighted and combined, :func:`.indexing.state_vector`)
keyed by the embedder and ``(context, content)``, and its **keyword vector**
(:func:`.indexing.keyword_vector`: terms, stemming, BM25 weights) keyed by ``(context, keyword
text)``, so a second replay does no sentence split, stemming or weighting at all. Both keys name
the recipe (:func:`recipe_fingerprint`: what :mod:`.indexing` makes of a probe memory), so a change
to how memories are split, weighted or keyword-indexed misses instead of serving stale vectors.

A purge forgets what was derived from a user's memories (:meth:`VectorCache.forget_memories`):
every entry whose digest is one of their texts' (:func:`memory_digests`), under any model or
recipe, and the process's primed vectors of those texts. The keys name no user, so an entry
another user's memory shares goes too: that costs a recomputation, never a wrong vector.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from datetime import UTC, datetime
from uuid import UUID

import numpy as np

from contracts.memory import MemoryState
from services.memory.domain.keywords import SparseVector
from services.memory.search.embedding import keep_recent
from services.memory.search.indexing import (
    embedding_texts,
    keyword_text,
    keyword_vector,
    memory_passages,
    state_vector,
)
from services.memory.search.late import CONTEXT_TOKEN_WEIGHT, document_matrix, late_document, pack
from services.memory.search.ports import CachedEncoders, EmbeddingCacheStore

log = logging.getLogger("engram.memory.cache")

Document = tuple[str | None, str]

__all__ = [
    "MemoryKeys",
    "VectorCache",
    "document_digest",
    "forget_primed",
    "late_cache_model",
    "memory_digests",
    "pack_sparse",
    "recipe_fingerprint",
    "text_digest",
    "unpack_sparse",
]


def text_digest(text: str) -> bytes:
    """The cache key of a text: SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def document_digest(document: Document) -> bytes:
    """The cache key of a late-interaction document ``(context, content)``."""
    return hashlib.sha256(json.dumps(list(document), ensure_ascii=False).encode("utf-8")).digest()


def late_cache_model(model_id: str) -> str:
    """The cache's model id for packed token rows: the encoder, the packing and the context weight."""
    return f"{model_id}|late-packed-LT1|context*{CONTEXT_TOKEN_WEIGHT}"


#: Bumped by hand for a change to what a memory is indexed with that the probe of
#: :func:`recipe_fingerprint` would not see.
RECIPE_VERSION = 2  # 2: bracketed absolute dates are not embedded (indexing.embedded_content)


@functools.cache
def recipe_fingerprint() -> str:
    """What :mod:`.indexing` makes of a probe memory (a label, abbreviations, a question, a
    context, a date; fixed stand-in sentence vectors), hashed: it changes when the sentence split,
    the labels, the passage weights, the context weight or the keyword terms, stemming and
    weights change, and with it every derived key of :class:`VectorCache`."""
    when = datetime(2024, 3, 3, 12, 0, tzinfo=UTC)
    probe = MemoryState(
        id=UUID(int=1), tenant="probe", project="probe", importance=3, source="probe", version=1,
        created_at=when, updated_at=when,
        content="Caroline: I went to the LGBTQ support group yesterday with Dr. Smith. It was so powerful! "
                "Did you go?\nWe're running 10 km e.g. in Berlin; les chiens courent vite. 我家的猫叫小白。",
        context="Melanie: How was your week? Busy, painting again.",
    )
    texts = embedding_texts(probe)
    stand_in = np.random.default_rng(7).standard_normal((len(texts), 8))
    dense = np.round(np.asarray(state_vector(probe, stand_in)), 6).tolist()
    sparse = keyword_vector(probe)
    recipe = [RECIPE_VERSION, texts, dense, list(sparse.indices), np.round(sparse.values, 6).tolist()]
    return hashlib.sha256(json.dumps(recipe).encode("utf-8")).hexdigest()[:16]


def pack_sparse(vector: SparseVector) -> bytes:
    """A keyword vector as bytes: its length, its ``uint32`` indices, its ``float32`` values (what
    the index stores them as, so the point written from them is the same)."""
    n = len(vector.indices)
    return (np.array([n], "<u4").tobytes() + np.asarray(vector.indices, "<u4").tobytes()
            + np.asarray(vector.values, "<f4").tobytes())


def unpack_sparse(value: bytes) -> SparseVector | None:
    """:func:`pack_sparse`'s inverse; None for bytes of another shape."""
    if len(value) < 4:
        return None
    n = int(np.frombuffer(value, "<u4", count=1)[0])
    if len(value) != 4 + 8 * n:
        return None
    indices = np.frombuffer(value, "<u4", count=n, offset=4)
    values = np.frombuffer(value, "<f4", count=n, offset=4 + 4 * n)
    return SparseVector(tuple(indices.tolist()), tuple(values.tolist()))


class MemoryKeys:
    """A memory's cache keys: its late-interaction document's digest (also its dense vector's:
    both are made of ``(context, content)``), its keyword text's."""

    __slots__ = ("document", "keywords")

    def __init__(self, state: MemoryState) -> None:
        self.document = document_digest(late_document(state))
        self.keywords = document_digest((state.context, keyword_text(state)))


def memory_texts(state: MemoryState) -> tuple[set[str], set[Document]]:
    """The sentence texts and late-interaction documents the cache may hold of a memory: what the
    current recipe embeds, and its content as written (what a recipe that embedded dates did)."""
    texts = {*embedding_texts(state), *memory_passages(state.content, state.context)}
    return texts, {late_document(state), (state.context, state.content)}


def memory_digests(state: MemoryState) -> set[bytes]:
    """Every digest under which the cache may hold something derived from a memory's text: its
    sentences', its late-interaction document's (also its dense vector's), its keyword text's."""
    texts, documents = memory_texts(state)
    return ({text_digest(t) for t in texts} | {document_digest(d) for d in documents}
            | {MemoryKeys(state).keywords})


def forget_primed(model: object, keys: Iterable[Hashable] | None) -> None:
    """Drop ``keys`` (None: all) from a model's primed vectors (the priming wrappers of
    :mod:`.embedding` have ``forget``); a model without priming holds nothing."""
    forget = getattr(model, "forget", None)
    if forget is not None:
        forget(keys)


class VectorCache:
    """Loads a batch's vectors from the store before it is embedded and stores what was embedded.

    Sentence vectors go into the embedder's primed vectors (``PrimedEmbedder.preload``); packed
    token rows are kept here (:meth:`packed`, least recently used evicted past ``capacity``) for
    the projection to write as they are. ``hits`` / ``misses`` count texts and documents.
    """

    def __init__(self, store: EmbeddingCacheStore, capacity: int = 4096) -> None:
        self.store = store
        self.capacity = capacity
        self._packed: OrderedDict[Document, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    # packed late-interaction rows ----------------------------------------------------------
    def packed(self, document: Document) -> bytes | None:
        """The packed token rows of ``document`` if loaded or stored by this process, else None."""
        with self._lock:
            found = self._packed.get(document)
            if found is not None:
                self._packed.move_to_end(document)
            return found

    def forget_packed(self) -> None:
        """Drop every packed row this process holds (see :func:`.encoders.forget_local_texts`)."""
        with self._lock:
            self._packed.clear()

    def _keep(self, packed: dict[Document, bytes]) -> None:
        with self._lock:
            keep_recent(self._packed, packed.items(), self.capacity)

    # a batch --------------------------------------------------------------------------------
    async def load(
        self, models: CachedEncoders, texts: Sequence[str], documents: Sequence[Document],
    ) -> tuple[list[str], list[Document]]:
        """Prime ``models`` with what the store has of ``texts`` and ``documents`` (one query);
        return the texts and documents still to be computed."""
        embedder, encoder = models.embedder, models.late_encoder
        texts = [t for t in dict.fromkeys(texts) if embedder.cached([t]) is None]
        documents = [d for d in dict.fromkeys(documents) if self.packed(d) is None] if encoder is not None else []
        if not texts and not documents:
            return [], []
        dense_model = embedder.model_id
        late_model = late_cache_model(encoder.model_id) if encoder is not None else ""
        text_keys = [(dense_model, text_digest(t)) for t in texts]
        document_keys = [(late_model, document_digest(d)) for d in documents]
        try:
            found = await self.store.get_many(text_keys + document_keys)
        except Exception as exc:  # a cache: without it everything is computed
            log.warning("embedding cache lookup failed (%s: %s); embedding the batch", type(exc).__name__, exc)
            return texts, documents
        vectors: dict[str, np.ndarray] = {}
        missing_texts: list[str] = []
        width = embedder.dim * 4
        for text, key in zip(texts, text_keys, strict=True):
            value = found.get(key)
            if value is not None and len(value) == width:
                vectors[text] = np.frombuffer(value, dtype=np.float32)
            else:
                missing_texts.append(text)
        packed = {d: found[k] for d, k in zip(documents, document_keys, strict=True) if k in found}
        missing_documents = [d for d in documents if d not in packed]
        preload = getattr(embedder, "preload", None)
        if preload is not None and vectors:
            preload(vectors)
        elif vectors:  # an embedder without priming: nothing to put them in
            missing_texts += list(vectors)
        self._keep(packed)
        self.hits += len(vectors) + len(packed)
        self.misses += len(missing_texts) + len(missing_documents)
        return missing_texts, missing_documents

    async def store_computed(self, models: CachedEncoders, texts: Sequence[str], documents: Sequence[Document]) -> None:
        """Write to the store what was just computed for ``texts`` and ``documents`` (primed in
        ``models``); the packed rows are kept for :meth:`packed` too. One statement."""
        items: list[tuple[str, bytes, bytes]] = []
        embedder, encoder = models.embedder, models.late_encoder
        for text in texts:
            vector = embedder.cached([text])
            if vector is not None:
                items.append((embedder.model_id, text_digest(text), np.ascontiguousarray(vector[0], np.float32).tobytes()))
        if encoder is not None and documents:
            late_model = late_cache_model(encoder.model_id)
            packed: dict[Document, bytes] = {}
            for document in documents:
                tokens = encoder.cached([document])
                if tokens is not None:
                    packed[document] = pack(document_matrix(tokens[0]))
                    items.append((late_model, document_digest(document), packed[document]))
            self._keep(packed)
        if not items:
            return
        try:
            await self.store.put_many(items)
        except Exception as exc:
            log.warning("embedding cache write failed (%s: %s); the vectors are recomputed when needed",
                        type(exc).__name__, exc)

    # a purge --------------------------------------------------------------------------------
    async def forget_memories(self, models: CachedEncoders, states: Sequence[MemoryState]) -> int:
        """Delete every entry derived from ``states``' texts (one statement; any model, any
        recipe) and drop those texts from this process's primed vectors and packed rows; how many
        entries were deleted. Unlike a lookup, a failure here is raised: a purge must not report
        success with the user's vectors left behind (run again, it finds them again)."""
        texts: set[str] = set()
        documents: set[Document] = set()
        digests: set[bytes] = set()
        for state in states:
            more_texts, more_documents = memory_texts(state)
            texts |= more_texts
            documents |= more_documents
            digests |= memory_digests(state)
        forget_primed(models.embedder, texts)
        forget_primed(models.late_encoder, documents)
        with self._lock:
            for document in documents:
                self._packed.pop(document, None)
        return await self.store.delete_digests(sorted(digests)) if digests else 0

    async def forget_digests(self, digests: Sequence[bytes]) -> int:
        """Delete every entry under ``digests`` (any model); how many. Raised on failure, as above."""
        return await self.store.delete_digests(sorted(set(digests))) if digests else 0

    # what a replay derives: each memory's dense and keyword vectors -----------------------------
    @staticmethod
    def derived_models(models: CachedEncoders) -> tuple[str, str]:
        """The cache's model ids of memories' dense vectors and keyword vectors."""
        recipe = recipe_fingerprint()
        return f"{models.embedder.model_id}|memory-dense|{recipe}", f"keywords|{recipe}"

    async def memory_vectors(
        self, models: CachedEncoders, keys: Sequence[MemoryKeys],
    ) -> list[tuple[np.ndarray, SparseVector] | None]:
        """Each memory's stored dense and keyword vectors (one query), None where either is missing."""
        if not keys:
            return []
        dense_model, sparse_model = self.derived_models(models)
        wanted = [(dense_model, k.document) for k in keys] + [(sparse_model, k.keywords) for k in keys]
        try:
            found = await self.store.get_many(wanted)
        except Exception as exc:
            log.warning("embedding cache lookup failed (%s: %s); computing the vectors", type(exc).__name__, exc)
            return [None] * len(keys)
        width = models.embedder.dim * 4
        out: list[tuple[np.ndarray, SparseVector] | None] = []
        for k in keys:
            dense, sparse = found.get((dense_model, k.document)), found.get((sparse_model, k.keywords))
            keywords = unpack_sparse(sparse) if sparse is not None else None
            if dense is None or len(dense) != width or keywords is None:
                out.append(None)
                self.misses += 1
            else:
                out.append((np.frombuffer(dense, np.float32), keywords))
                self.hits += 1
        return out

    async def store_memory_vectors(
        self, models: CachedEncoders, items: Sequence[tuple[MemoryKeys, Sequence[float], SparseVector]],
    ) -> None:
        """Keep computed dense and keyword vectors for the next replay (one statement)."""
        if not items:
            return
        dense_model, sparse_model = self.derived_models(models)
        rows: list[tuple[str, bytes, bytes]] = []
        for k, dense, sparse in items:
            rows.append((dense_model, k.document, np.asarray(dense, np.float32).tobytes()))
            rows.append((sparse_model, k.keywords, pack_sparse(sparse)))
        try:
            await self.store.put_many(rows)
        except Exception as exc:
            log.warning("embedding cache write failed (%s: %s); the vectors are recomputed when needed",
                        type(exc).__name__, exc)
