"""PrimedEmbedder: a batch embedded once serves every memory that contains its texts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from services.memory.application.embedding import PrimedEmbedder

pytestmark = pytest.mark.unit


class Recording:
    """A deterministic embedder that records every call."""

    model_id = "recording"
    dim = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = [[float(len(t)), float(sum(map(ord, t)) % 97), 1.0, 0.0] for t in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)


def test_prime_embeds_each_distinct_text_once() -> None:
    inner = Recording()
    primed = PrimedEmbedder(inner)
    assert primed.prime(["a", "bb", "a", "ccc"]) == 3
    assert primed.prime(["bb", "ccc"]) == 0
    assert inner.calls == [["a", "bb", "ccc"]]


def test_primed_texts_serve_every_memory_that_repeats_them() -> None:
    inner = Recording()
    primed = PrimedEmbedder(inner)
    primed.prime(["Thanks!", "I went hiking.", "I cooked."])
    first = primed.embed(["I went hiking.", "Thanks!"])
    second = primed.embed(["I cooked.", "Thanks!"])  # "Thanks!" is used a second time
    assert len(inner.calls) == 1
    np.testing.assert_array_equal(first[1], second[1])
    np.testing.assert_array_equal(first, Recording().embed(["I went hiking.", "Thanks!"]))


def test_only_the_missing_texts_are_embedded() -> None:
    inner = Recording()
    primed = PrimedEmbedder(inner)
    primed.prime(["known one", "known two"])
    out = primed.embed(["known one", "new", "new", "known two"])
    assert inner.calls[-1] == ["new"]
    np.testing.assert_array_equal(out, Recording().embed(["known one", "new", "new", "known two"]))


def test_cached_answers_only_when_everything_is_primed() -> None:
    inner = Recording()
    primed = PrimedEmbedder(inner)
    primed.prime(["x1", "x22"])
    assert primed.cached(["x1", "missing"]) is None
    assert primed.cached([]) is None
    hit = primed.cached(["x22", "x1"])
    assert hit is not None and hit.shape == (2, 4)
    assert len(inner.calls) == 1


def test_capacity_evicts_the_least_recently_used() -> None:
    inner = Recording()
    primed = PrimedEmbedder(inner, capacity=2)
    primed.prime(["old", "used"])
    primed.embed(["used"])  # refreshes "used"
    primed.prime(["newest"])  # evicts "old", the least recently used
    assert primed.cached(["used", "newest"]) is not None
    assert primed.cached(["old"]) is None
