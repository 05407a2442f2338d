"""PrimedEmbedder: a batch embedded once serves every memory that contains its texts."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from services.memory.adapters.late_encoder import DocumentTokens, LateEncoder
from services.memory.search.embedding import PrimedEmbedder, PrimedLateEncoder

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


class Gated(Recording):
    """Blocks inside ``embed`` until released, so a second prime can overlap the first."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = super().embed(texts)
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(5)
            if self.fail:
                raise RuntimeError("embedder down")
        return out


def test_overlapping_primes_embed_a_shared_text_once() -> None:
    inner = Gated()
    primed = PrimedEmbedder(inner)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(primed.prime, ["Thanks!", "I went hiking."])
        assert inner.entered.wait(5)
        second = pool.submit(primed.prime, ["Thanks!", "I cooked."])
        # the second prime embeds only its own new text, then waits for the first
        for _ in range(500):
            if len(inner.calls) == 2:
                break
            time.sleep(0.01)
        assert not second.done()
        inner.release.set()
        assert first.result(5) == 2 and second.result(5) == 1
    assert inner.calls == [["Thanks!", "I went hiking."], ["I cooked."]]
    assert primed.cached(["Thanks!", "I cooked."]) is not None


def test_a_failed_prime_releases_the_primes_waiting_for_it() -> None:
    inner = Gated(fail=True)
    primed = PrimedEmbedder(inner)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(primed.prime, ["Thanks!"])
        assert inner.entered.wait(5)
        second = pool.submit(primed.prime, ["Thanks!", "Bye."])
        inner.release.set()
        with pytest.raises(RuntimeError):
            first.result(5)
        assert second.result(5) == 1  # returned, though "Thanks!" is not primed
    assert primed.cached(["Thanks!"]) is None
    np.testing.assert_array_equal(primed.embed(["Thanks!"]), Recording().embed(["Thanks!"]))  # embedded now


class RecordingLate:
    """A deterministic late-interaction encoder that records every call."""

    model_id = "recording-late"
    dim = 2

    def __init__(self) -> None:
        self.calls: list[list[tuple[str | None, str]]] = []
        self.queries: list[str] = []

    def encode_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return np.ones((len(text), self.dim), dtype=np.float32)

    def encode_documents(self, documents: Sequence[tuple[str | None, str]]) -> list[DocumentTokens]:
        self.calls.append(list(documents))
        return [
            DocumentTokens(vectors=np.full((len(content), self.dim), len(context or ""), dtype=np.float32),
                           from_context=np.zeros(len(content), dtype=bool))
            for context, content in documents
        ]


def test_primed_late_encoder_encodes_each_document_once() -> None:
    inner = RecordingLate()
    primed = PrimedLateEncoder(inner)
    assert isinstance(primed, LateEncoder) and primed.dim == 2 and primed.model_id == "recording-late"
    first, second = (None, "I like tea"), ("What do you drink?", "I like tea")  # same content, other context
    assert primed.cached([first]) is None
    assert primed.prime([first, second, first]) == 2
    assert primed.prime([second]) == 0
    assert inner.calls == [[first, second]]
    cached = primed.cached([second, first])
    assert cached is not None and cached[0].vectors[0, 0] == len("What do you drink?") and cached[1].vectors[0, 0] == 0
    # encode_documents: primed ones from the cache, the rest in one call, in order
    third = (None, "Something new")
    out = primed.encode_documents([third, first, third])
    assert inner.calls[-1] == [third]
    assert [len(t.vectors) for t in out] == [len("Something new"), len("I like tea"), len("Something new")]
    assert primed.encode_query("abc").shape == (3, 2)


def test_primed_late_encoder_forgets_the_least_recently_used() -> None:
    inner = RecordingLate()
    primed = PrimedLateEncoder(inner, capacity=2)
    primed.prime([(None, "a"), (None, "b")])
    primed.encode_documents([(None, "a")])  # read: "a" is now the most recently used
    primed.prime([(None, "c")])
    assert primed.cached([(None, "b")]) is None and primed.cached([(None, "a")]) is not None
    assert primed.cached([(None, "c")]) is not None and len(inner.calls) == 2


class WithQueries(Recording):
    """An embedder with a query path of its own."""

    def embed_query(self, text: str) -> np.ndarray:
        self.calls.append(["query:" + text])
        return np.full(self.dim, 0.5, dtype=np.float32)


def test_a_query_takes_the_embedders_query_path_not_a_primed_memory_text() -> None:
    inner = WithQueries()
    primed = PrimedEmbedder(inner)
    primed.prime(["where is Ana?"])  # the same words as a memory's text, primed
    np.testing.assert_array_equal(primed.embed_query("where is Ana?"), np.full(4, 0.5, dtype=np.float32))
    assert inner.calls == [["where is Ana?"], ["query:where is Ana?"]]


def test_a_query_falls_back_to_one_text_embed_for_an_embedder_without_a_query_path() -> None:
    from kit.metrics import TimedEmbedder

    inner = Recording()
    for wrapped in (PrimedEmbedder(inner), PrimedEmbedder(TimedEmbedder(inner))):
        np.testing.assert_array_equal(wrapped.embed_query("hello"), Recording().embed(["hello"])[0])
    assert inner.calls == [["hello"], ["hello"]]


def test_primed_late_encoder_keeps_the_recent_queries_tokens() -> None:
    """A question asked again is not encoded again (the most recent ``query_capacity``); the tokens
    are read-only, and forgetting anything (a purge) forgets them."""
    inner = RecordingLate()
    primed = PrimedLateEncoder(inner, query_capacity=2)
    first = primed.encode_query("Where do I live?")
    assert primed.encode_query("Where do I live?") is first and inner.queries == ["Where do I live?"]
    with pytest.raises(ValueError):
        first[0, 0] = 5.0
    primed.encode_query("b")
    primed.encode_query("Where do I live?")  # (most recent again)
    primed.encode_query("c")  # "b" leaves
    primed.encode_query("b")
    assert inner.queries == ["Where do I live?", "b", "c", "b"]
    primed.forget([(None, "I live in Porto")])
    primed.encode_query("c")
    assert inner.queries[-1] == "c" and len(inner.queries) == 5
    uncached = PrimedLateEncoder(inner, query_capacity=0)
    uncached.encode_query("d")
    uncached.encode_query("d")
    assert inner.queries[-2:] == ["d", "d"]
