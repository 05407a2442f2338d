"""Batch priming for the encoders: a consumer embeds a whole fetched batch in one call, then each
message, handled on its own, finds its vectors ready."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from services.memory.search.ports import DocumentTokens, Embedder, LateEncoder

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def keep_recent(cache: OrderedDict[K, V], items: Iterable[tuple[K, V]], capacity: int) -> None:
    """``items`` kept in ``cache`` as the most recently used, the least recently used evicted past
    ``capacity`` (the caller holds the cache's lock)."""
    for key, value in items:
        cache[key] = value
        cache.move_to_end(key)
    while len(cache) > capacity:
        cache.popitem(last=False)


def _recently_used(cache: OrderedDict[K, V], keys: Sequence[K]) -> list[V | None]:
    """``cache``'s values of ``keys`` (None where absent); the ones found become most recently used."""
    found = [cache.get(k) for k in keys]
    for key, value in zip(keys, found, strict=True):
        if value is not None:
            cache.move_to_end(key)
    return found



def query_vector_of(embedder: Any, text: str) -> np.ndarray:
    """``embedder.embed_query(text)``, or its one-text ``embed`` for an embedder without a query path
    (a wrapper or a test's fake)."""
    query = getattr(embedder, "embed_query", None)
    if query is not None:
        vector: np.ndarray = query(text)
        return vector
    vector = embedder.embed([text])[0]
    return vector

class PrimedEmbedder:
    """Wraps an Embedder; ``prime`` embeds many texts at once, ``embed`` uses primed vectors first.

    Primed vectors stay cached (least recently used evicted past ``capacity``), so a text primed
    once serves every memory that contains it, and is never embedded twice while it is cached.
    Primes may overlap (a consumer prepares the next batch while the previous one still embeds):
    a text that an earlier prime is embedding is waited for, not embedded again.
    """

    def __init__(self, inner: Embedder, capacity: int = 4096) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.capacity = capacity
        self._primed: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._embedding: dict[str, threading.Event] = {}  # texts a running prime is embedding

    def prime(self, texts: Sequence[str]) -> int:
        """Embed the texts not primed yet in one batch; return how many were embedded. Returns
        once every text is primed, or is known to have failed (``embed`` then retries it)."""
        done = threading.Event()
        with self._lock:
            wanted = [t for t in dict.fromkeys(texts) if t not in self._primed]
            others = {self._embedding[t] for t in wanted if t in self._embedding}
            missing = [t for t in wanted if t not in self._embedding]
            self._embedding.update(dict.fromkeys(missing, done))
        try:
            if missing:
                vectors = self.inner.embed(missing)
                with self._lock:
                    keep_recent(self._primed, zip(missing, vectors, strict=True), self.capacity)
        finally:
            with self._lock:
                for text in missing:
                    del self._embedding[text]
            done.set()
        for other in others:
            other.wait()
        return len(missing)

    def preload(self, vectors: Mapping[str, np.ndarray]) -> None:
        """Prime texts with vectors computed earlier (the embedding cache), without embedding."""
        with self._lock:
            keep_recent(self._primed, vectors.items(), self.capacity)

    def forget(self, texts: Iterable[str] | None) -> None:
        """Drop ``texts`` from the primed vectors (a purged user's texts); None: every text, the
        inner embedder's own cache of single texts (recall queries) included."""
        with self._lock:
            if texts is None:
                self._primed.clear()
                clear = getattr(self.inner, "cache_clear", None)
                if clear is not None:
                    clear()
            for text in texts or ():
                self._primed.pop(text, None)

    def _lookup(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Primed vectors of ``texts`` (None where not primed); hits become most recently used."""
        with self._lock:
            return _recently_used(self._primed, texts)

    def cached(self, texts: Sequence[str]) -> np.ndarray | None:
        """The vectors of ``texts`` if every one is primed (no embedding, no blocking), else None."""
        found = self._lookup(texts)
        if not found or any(v is None for v in found):
            return None
        return np.stack(found)  # type: ignore[arg-type]

    def embed_query(self, text: str) -> np.ndarray:
        """A search query's vector: the inner embedder's (primed memory texts are not looked up: a
        query is embedded the way its embedder embeds queries)."""
        return query_vector_of(self.inner, text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts``: primed ones from the cache (they stay there: short sentences
        such as "Thanks!" recur across memories), the rest embedded together in one call."""
        found = self._lookup(texts)
        missing = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        if missing:
            fresh = dict(zip(missing, self.inner.embed(missing), strict=True))
            found = [v if v is not None else fresh[t] for t, v in zip(texts, found, strict=True)]
        if not found:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(found)  # type: ignore[arg-type]


class PrimedLateEncoder:
    """Wraps a LateEncoder the way :class:`PrimedEmbedder` wraps an embedder: ``prime`` encodes a
    fetched batch's documents in one call (the encoder runs them side by side on every core), and
    ``encode_documents`` takes primed ones first. Without it each save encoded its memory on its
    own, one document per call: saves reached 73% of the encoders' own rate (3,000 LoCoMo turns).

    Primed entries stay cached (least recently used evicted past ``capacity``). A document primed
    twice at once is encoded twice; the results are identical (every document is encoded alone).

    A query's tokens are kept too, for the ``query_capacity`` most recent queries (as the sentence
    embedder keeps query vectors): a question asked again — a client's retry, the same question at
    each session's start, deep recall's parts — skips the encoder's ~4–5 CPU-ms. Forgetting anything
    forgets them all (a purge).
    """

    def __init__(self, inner: LateEncoder, capacity: int = 2048, query_capacity: int = 256) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.capacity = capacity
        self.query_capacity = query_capacity
        self._primed: OrderedDict[tuple[str | None, str], DocumentTokens] = OrderedDict()
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def encode_query(self, text: str) -> np.ndarray:
        """The query's unit token vectors (read-only), from the most recent queries' when asked before."""
        with self._lock:
            (hit,) = _recently_used(self._queries, [text])
        if hit is not None:
            return hit
        tokens = self.inner.encode_query(text)
        tokens.setflags(write=False)
        if self.query_capacity:
            with self._lock:
                keep_recent(self._queries, [(text, tokens)], self.query_capacity)
        return tokens

    def prime(self, documents: Sequence[tuple[str | None, str]]) -> int:
        """Encode the documents not primed yet in one call; return how many were encoded."""
        with self._lock:
            missing = [d for d in dict.fromkeys(documents) if d not in self._primed]
        if missing:
            self._store(missing, self.inner.encode_documents(missing))
        return len(missing)

    def _store(self, documents: Sequence[tuple[str | None, str]], tokens: Sequence[DocumentTokens]) -> None:
        with self._lock:
            keep_recent(self._primed, zip(documents, tokens, strict=True), self.capacity)

    def forget(self, documents: Iterable[tuple[str | None, str]] | None) -> None:
        """Drop ``documents`` from the primed token vectors (a purged user's texts); None: every one.
        The recent queries' tokens are dropped either way."""
        with self._lock:
            self._queries.clear()
            if documents is None:
                self._primed.clear()
            for document in documents or ():
                self._primed.pop(document, None)

    def _lookup(self, documents: Sequence[tuple[str | None, str]]) -> list[DocumentTokens | None]:
        """Primed tokens of ``documents`` (None where not primed); hits become most recently used."""
        with self._lock:
            return _recently_used(self._primed, documents)

    def cached(self, documents: Sequence[tuple[str | None, str]]) -> list[DocumentTokens] | None:
        """The token vectors of ``documents`` if every one is primed (no encoding, no blocking), else None."""
        found = self._lookup(documents)
        if any(t is None for t in found):
            return None
        return found  # type: ignore[return-value]  # no None left

    def encode_documents(self, documents: Sequence[tuple[str | None, str]]) -> list[DocumentTokens]:
        """Token vectors of ``documents``: primed ones from the cache, the rest encoded together."""
        found = self._lookup(documents)
        missing = list(dict.fromkeys(d for d, t in zip(documents, found, strict=True) if t is None))
        if missing:
            fresh = dict(zip(missing, self.inner.encode_documents(missing), strict=True))
            found = [t if t is not None else fresh[d] for d, t in zip(documents, found, strict=True)]
        return found  # type: ignore[return-value]  # every None was replaced
