"""Batch priming for the embedder: a consumer embeds a whole fetched batch in one call, then each
message, handled on its own, finds its vector ready."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from services.memory.adapters.embedder import Embedder


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
                    for text, vector in zip(missing, vectors, strict=True):
                        self._primed[text] = vector
                    while len(self._primed) > self.capacity:
                        self._primed.popitem(last=False)
        finally:
            with self._lock:
                for text in missing:
                    del self._embedding[text]
            done.set()
        for other in others:
            other.wait()
        return len(missing)

    def _lookup(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Primed vectors of ``texts`` (None where not primed); hits become most recently used."""
        with self._lock:
            found = [self._primed.get(t) for t in texts]
            for text, vector in zip(texts, found, strict=True):
                if vector is not None:
                    self._primed.move_to_end(text)
        return found

    def cached(self, texts: Sequence[str]) -> np.ndarray | None:
        """The vectors of ``texts`` if every one is primed (no embedding, no blocking), else None."""
        found = self._lookup(texts)
        if not found or any(v is None for v in found):
            return None
        return np.stack(found)  # type: ignore[arg-type]

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
