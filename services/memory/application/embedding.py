"""Batch priming for the embedder: a consumer embeds a whole fetched batch in one call, then each
message, handled on its own, finds its vector ready."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from services.memory.adapters.embedder import Embedder


class PrimedEmbedder:
    """Wraps an Embedder; ``prime`` embeds many texts at once, ``embed`` uses primed vectors first."""

    def __init__(self, inner: Embedder, capacity: int = 4096) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.capacity = capacity
        self._primed: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def prime(self, texts: Sequence[str]) -> int:
        """Embed the texts not primed yet in one batch; return how many were embedded."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._primed))
        if not missing:
            return 0
        vectors = self.inner.embed(missing)
        with self._lock:
            for text, vector in zip(missing, vectors, strict=True):
                self._primed[text] = vector
            while len(self._primed) > self.capacity:
                self._primed.popitem(last=False)
        return len(missing)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            found = [self._primed.pop(t, None) for t in texts]
        if all(v is not None for v in found):
            return np.stack(found) if found else np.zeros((0, self.dim), dtype=np.float32)  # type: ignore[arg-type]
        return self.inner.embed(texts)
