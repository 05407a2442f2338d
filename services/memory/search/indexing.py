"""How a memory becomes a point in the vector index, and how a recall searches it — one place,
shared by the service, replay and the recall-quality benchmark.

A memory's dense vector is the unit-length weighted mean of the embeddings of its sentences
(:func:`embedding_texts`, weighted by :func:`passage_weights`, combined by :func:`memory_vector`;
:func:`embed_memories` and :func:`content_vector` do all three). Mean-pooled sentence embedders such as MiniLM dilute a multi-sentence text: each
sentence's topic, and the subject named once at the start, weigh less the longer the memory is.
Embedding the sentences apart and averaging keeps every sentence's topic in the vector, and a
leading ``Label:`` (``"Caroline: ..."``, ``"Project Atlas: ..."``) is repeated on every sentence
so each one stays attached to whom or what it is about. A sentence weighs the square root of its
number of keyword terms (so "Wow!" counts less than a sentence that states something), and half
that if it is a question (it names a topic but asserts nothing about it). On LoCoMo the sentence
split raised dense recall@5 from 0.36 to 0.49 and hybrid recall@5 from 0.55 to 0.61, the weights
dense recall@5 to 0.53 (docs/recall-quality.md). A one-sentence
memory is embedded as it is, so its vector is unchanged. The keyword vector is built from the
whole text plus the day it was written (:func:`keyword_text`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from contracts.memory import MemoryState, MemoryStatus, MemoryView, RecallHit, RecallMode
from services.memory.domain.keywords import SparseVector, add_sparse, document_vector, keyword_terms
from services.memory.domain.origin import origin_of
from services.memory.search.ports import FINGERPRINT_FIELD, Embedder, SearchFilter, VectorPoint

SEARCH_MODES = {
    RecallMode.HYBRID: "hybrid", RecallMode.DENSE: "dense", RecallMode.KEYWORD: "sparse",
    RecallMode.DEEP: "hybrid",  # its first hop (services/memory/search/hops.py)
}

#: At most this many sentences are embedded apart; the rest of a long memory joins the last one.
MAX_SENTENCES = 32
# A sentence ends at . ! ? (followed by white space) or at a CJK full stop / mark; line breaks
# also separate.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])\s*|\s*\n\s*")
_ABBREVIATION = re.compile(r"(?:.*\s)?(?:[A-Z][a-z]{0,2}|[a-z]\.[a-z])\.")
# A short leading label: "Caroline: ", "Project Atlas: " (at most 4 words, 40 characters).
_LABEL = re.compile(r"^\s*([^\s:：][^:：\n]{0,39})(?::\s+|：\s*)")
_LABEL_MAX_WORDS = 4
#: A question's weight relative to a statement of the same length in a memory's dense vector.
QUESTION_WEIGHT = 0.5
_QUESTION_END = re.compile(r"[?？]\W*$")
#: How much a memory's context (where it came from, e.g. the message it answers) counts next to
#: its content, in its dense and its keyword vector. On LoCoMo, with the previous dialogue turn as
#: context, 0.3 gave hybrid R@5/R@10 +0.02/+0.03 and 0.5 a little less (docs/recall-quality.md).
CONTEXT_WEIGHT = 0.3


#: An absolute date in brackets after the words that meant it — "yesterday (2023-05-07)", "last week
#: (week of 2023-05-01)", "last month (April 2023)", as the extractor writes them: kept in the content
#: and the keyword index, kept out of what is embedded, like a memory's own date (it moved dense
#: vectors away from the content: recall with extraction on LoCoMo lost 0.013 at R@5 with it).
_MONTH_NAMES = "January|February|March|April|May|June|July|August|September|October|November|December"
_BRACKETED_DATE = re.compile(
    r"\s\((?:(?:week|weekend) of )?\d{4}-\d{2}-\d{2}\)|\s\((?:" + _MONTH_NAMES + r") \d{4}\)|\s\(\d{4}\)")


def embedded_content(content: str) -> str:
    """What of a memory's content is embedded (dense and late interaction): the content without
    bracketed absolute dates (:data:`_BRACKETED_DATE`)."""
    return _BRACKETED_DATE.sub("", content)


def indexed_text(state: MemoryState) -> str:
    """A memory's text: what is embedded (sentence by sentence, see :func:`embedding_texts`) and,
    with its date, keyword-indexed."""
    return state.content


def date_words(state: MemoryState) -> str:
    """The day the memory's content was written, as words: ``"8 May 2023"``."""
    when = state.updated_at
    return f"{when.day} {when.strftime('%B')} {when.year}"


def keyword_text(state: MemoryState) -> str:
    """The text keyword-indexed for a memory: its content and :func:`date_words`, so a query that
    names a day ("what did we decide on 3 March 2024?") also matches what was saved that day.
    The date is not embedded: it moved dense vectors away from the content (docs/recall-quality.md)."""
    return f"{indexed_text(state)}\n{date_words(state)}"


def keyword_vector(state: MemoryState) -> SparseVector:
    """The memory's keyword vector: :func:`keyword_text`'s, plus :data:`CONTEXT_WEIGHT` times its
    context's (a word only the context has matches, at a lower weight)."""
    own = document_vector(keyword_text(state))
    if not state.context:
        return own
    return add_sparse(own, document_vector(state.context), CONTEXT_WEIGHT)


def split_sentences(text: str, max_sentences: int = MAX_SENTENCES) -> list[str]:
    """``text`` cut into sentences (non-empty, stripped); the tail beyond ``max_sentences`` joins
    the last one."""
    parts: list[str] = []
    for piece in _SENTENCE_END.split(text):
        piece = piece.strip()
        if not piece:
            continue
        if parts and _ABBREVIATION.fullmatch(parts[-1]):  # "Dr." "e.g." "St." do not end a sentence
            parts[-1] = f"{parts[-1]} {piece}"
        else:
            parts.append(piece)
    if len(parts) > max_sentences:
        parts = parts[: max_sentences - 1] + [" ".join(parts[max_sentences - 1 :])]
    return parts


def leading_label(text: str) -> str | None:
    """The ``Label`` of a text that starts ``"Label: ..."`` with a label of at most four words."""
    m = _LABEL.match(text)
    if m is None:
        return None
    label = m.group(1).strip()
    return label if label and len(label.split()) <= _LABEL_MAX_WORDS else None


def passages(text: str) -> list[str]:
    """What is embedded for a memory with content ``text``: its sentences, each after the first
    prefixed with the memory's leading label if it has one; ``[text]`` for a one-sentence text."""
    sentences = split_sentences(text)
    if len(sentences) <= 1:
        return [text]
    label = leading_label(text)
    if label is None:
        return sentences
    return [sentences[0]] + [f"{label}: {s}" for s in sentences[1:]]


def passage_weights(texts: Sequence[str]) -> list[float]:
    """How much each of a memory's :func:`passages` counts in its dense vector: the square root of
    the passage's number of keyword terms (its leading ``Label:`` left out), times
    :data:`QUESTION_WEIGHT` for a question. A one-passage memory gets ``[1.0]``; if no passage
    has a keyword term, all weigh the same."""
    if len(texts) <= 1:
        return [1.0] * len(texts)
    weights = []
    for text in texts:
        label = leading_label(text)
        body = _LABEL.sub("", text, count=1) if label is not None else text
        weight = float(len(keyword_terms(body))) ** 0.5
        if _QUESTION_END.search(body):
            weight *= QUESTION_WEIGHT
        weights.append(weight)
    if sum(weights) <= 0:
        return [1.0] * len(texts)
    return weights


def memory_passages(content: str, context: str | None = None) -> list[str]:
    """The texts embedded for a memory with this content and context: the content's
    :func:`passages`, then the context's."""
    return passages(content) + (passages(context) if context else [])


def embedding_texts(state: MemoryState) -> list[str]:
    """The texts embedded for a memory; :func:`state_vector` combines their vectors."""
    return memory_passages(embedded_content(indexed_text(state)), state.context)


def state_vector(state: MemoryState, vectors: np.ndarray | Sequence[Sequence[float]]) -> list[float]:
    """The memory's dense vector from the embeddings of its :func:`embedding_texts`: the content's
    :func:`passages_vector`, plus :data:`CONTEXT_WEIGHT` times the context's, to unit length."""
    texts = embedding_texts(state)
    own = len(texts) - (len(passages(state.context)) if state.context else 0)
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.shape[0] != len(texts):
        raise ValueError(f"{matrix.shape[0]} vectors for {len(texts)} texts")
    content = passages_vector(texts[:own], matrix[:own])
    if own == len(texts):
        return content
    context = passages_vector(texts[own:], matrix[own:])
    return memory_vector([content, context], [1.0, CONTEXT_WEIGHT])


def memory_vector(
    vectors: np.ndarray | Sequence[Sequence[float]], weights: Sequence[float] | None = None
) -> list[float]:
    """The memory's dense vector from the vectors of its :func:`embedding_texts`: their mean
    (weighted by ``weights`` if given, see :func:`passage_weights`), scaled to unit length (a
    single vector is returned as it is, normalised)."""
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise ValueError("memory_vector needs a non-empty (n, dim) matrix")
    if weights is None:
        mean = matrix.mean(axis=0)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (matrix.shape[0],) or not np.all(w >= 0) or w.sum() <= 0:
            raise ValueError("memory_vector needs one non-negative weight per vector, not all zero")
        mean = w @ matrix / w.sum()
    norm = float(np.linalg.norm(mean))
    if norm > 0:
        mean /= norm
    combined: list[float] = mean.tolist()
    return combined


def _embed_groups(embedder: Embedder, groups: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """The embeddings of each group of texts, from one ``embedder.embed`` call over all of them."""
    texts = [text for group in groups for text in group]
    if not texts:
        return []
    matrix = embedder.embed(texts)
    out, start = [], 0
    for group in groups:
        out.append(matrix[start : start + len(group)])
        start += len(group)
    return out


def embed_passages(embedder: Embedder, groups: Sequence[Sequence[str]]) -> list[list[float]]:
    """One dense vector per group of :func:`passages`, with one ``embedder.embed`` call over all
    of them: :func:`memory_vector` of each group's embeddings, weighted by
    :func:`passage_weights`. Blocking (run it in a thread from async code)."""
    return [passages_vector(group, matrix) for group, matrix in zip(groups, _embed_groups(embedder, groups), strict=False)]


def passages_vector(texts: Sequence[str], vectors: np.ndarray | Sequence[Sequence[float]]) -> list[float]:
    """The dense vector of a memory whose :func:`passages` are ``texts`` with embeddings
    ``vectors`` (e.g. primed ones): :func:`memory_vector` weighted by :func:`passage_weights`."""
    return memory_vector(vectors, passage_weights(texts))


def content_vector(embedder: Embedder, text: str) -> list[float]:
    """The dense vector a memory with content ``text`` gets (to compare a text with memories the
    way they are embedded: without bracketed dates, :func:`embedded_content`). Blocking."""
    return embed_passages(embedder, [passages(embedded_content(text))])[0]


def embed_memories(embedder: Embedder, states: Sequence[MemoryState]) -> list[list[float]]:
    """Dense vectors of ``states`` (:func:`state_vector`) with one ``embedder.embed`` call over all
    their texts. Blocking (run it in a thread from async code)."""
    matrices = _embed_groups(embedder, [embedding_texts(state) for state in states])
    return [state_vector(state, matrix) for state, matrix in zip(states, matrices, strict=False)]


def point_for(
    state: MemoryState, dense: Sequence[float], sparse: SparseVector | None = None, fingerprint: str | None = None,
    restored: bool = False,
) -> VectorPoint:
    """The memory's point: vectors, the fields searches filter on, and the rest of its view, so
    that a recall answers from its hits without reading them back from Postgres. ``sparse``: its
    :func:`keyword_vector` if already known (a replay's cache); ``fingerprint``: what the point is
    made of (:mod:`.index_sync`), stored with it so that a replay leaves it alone when unchanged;
    ``restored``: its event was appended by an import (its :func:`origin_of`)."""
    point = VectorPoint(
        id=str(state.id),
        dense=dense,
        sparse=keyword_vector(state) if sparse is None else sparse,
        payload={
            "tenant": state.tenant,
            "project": state.project,
            "status": state.status.value,
            "category": state.category.value if state.category else None,
            "memory_key": state.memory_key,
            "importance": state.importance,
            "created_at": state.created_at.isoformat(),
            "content": state.content,
            "context": state.context,
            "confidence": state.confidence,
            "source": state.source,
            "version": state.version,
            "updated_at": state.updated_at.isoformat(),
            "provenance": state.provenance.model_dump(mode="json") if state.provenance else None,
            # issue 30: recall as_of filters on these, decay weighs them, relations name them
            **state.model_dump(mode="json", include=set(TRUTH_VIEW_FIELDS)),
            "origin": origin_of(restored=restored, source=state.source, extracted=state.provenance is not None),
        },
    )
    if fingerprint is not None:
        point.payload[FINGERPRINT_FIELD] = fingerprint
    return point


#: The view fields of memories that stay true (issue 30), in a point's payload only when not at
#: their defaults (most memories never need them).
TRUTH_VIEW_FIELDS = ("valid_from", "valid_until", "superseded_by", "supersedes", "repeats", "pinned", "forget_after")
#: (``changed_since`` and ``content_chars`` are never stored: they are computed for an answer, as
#: of a past moment, and where a long content is cut)
_VIEW_FIELDS = frozenset(MemoryView.model_fields) - {"id", "changed_since", "content_chars"}
#: View fields added after points first carried views: a point without them takes their default.
_LATER_VIEW_FIELDS = frozenset({"context", "provenance", "origin", *TRUTH_VIEW_FIELDS})


def view_of(point_id: str, payload: Mapping[str, Any]) -> MemoryView | None:
    """The memory view a hit's payload carries, or None for a point written before payloads
    carried views (its view is read from Postgres instead)."""
    if not _VIEW_FIELDS - _LATER_VIEW_FIELDS <= payload.keys():
        return None
    return MemoryView.model_validate({"id": point_id, **{k: payload[k] for k in _VIEW_FIELDS if k in payload}})


def active_filter(tenant: str, project: str | None, category: str | None = None) -> SearchFilter:
    return SearchFilter(tenant=tenant, project=project, status=MemoryStatus.ACTIVE.value, category=category)


#: At most this much of a memory's context (its end, nearest the memory) goes before the content
#: in what the cross-encoder reads, so that a long context cannot push the content past the
#: reranker's token limit (it cuts the text's end).
RERANK_CONTEXT_CHARS = 400


def rerank_text(memory: MemoryView | MemoryState) -> str:
    """What the cross-encoder reads for a memory: the end of its context, if any, then its content
    (a turn read after the message it answers; on LoCoMo R@5 0.689 → 0.710, docs/recall-quality.md)."""
    if not memory.context:
        return memory.content
    context = memory.context
    if len(context) > RERANK_CONTEXT_CHARS:
        tail = context[-RERANK_CONTEXT_CHARS:]
        context = "…" + (tail.split(" ", 1)[1] if " " in tail else tail)
    return f"{context}\n{memory.content}"


#: A rerank fuses the cross-encoder's order with the search's: each candidate scores
#: ``1 / (k + its cross-encoder rank) + w / (k + its search rank)`` (ranks from 1), with k
#: :data:`RERANK_FUSION_K` and w :data:`RERANK_SEARCH_WEIGHT`. The cross-encoder leads; the search
#: settles what it is unsure about. On LoCoMo (50 candidates, memories with context) R@5 / R@10
#: 0.702 / 0.795 → 0.724 / 0.802; k 2 and k 60 were also tried (docs/recall-quality.md).
RERANK_FUSION_K = 10
RERANK_SEARCH_WEIGHT = 0.5


def _competition_ranks(values: Sequence[float]) -> list[int]:
    """1 + how many values are strictly greater, for each value (equal values share a rank)."""
    ordered = sorted(values, reverse=True)
    first = {}
    for r, v in enumerate(ordered, start=1):
        first.setdefault(v, r)
    return [first[v] for v in values]


def rerank_order(relevance: Sequence[float], search_scores: Sequence[float]) -> list[tuple[int, float]]:
    """``(position, score)`` of each candidate, best first, from the cross-encoder's ``relevance``
    and the search's scores: the fused score above, scaled so that a candidate first for both
    scores 1.0. Ranks come from the scores (equal scores share a rank) and ties are broken by
    relevance, then by the search score, so the result does not depend on the order in which
    the engine returned equally scored hits."""
    if len(relevance) != len(search_scores):
        raise ValueError(f"{len(relevance)} relevances for {len(search_scores)} hits")
    ce_rank = _competition_ranks(relevance)
    search_rank = _competition_ranks(search_scores)
    best = (1.0 + RERANK_SEARCH_WEIGHT) / (RERANK_FUSION_K + 1)
    fused = [(1.0 / (RERANK_FUSION_K + c) + RERANK_SEARCH_WEIGHT / (RERANK_FUSION_K + r)) / best
             for c, r in zip(ce_rank, search_rank, strict=True)]
    order = sorted(range(len(fused)), key=lambda i: (-fused[i], -relevance[i], -search_scores[i]))
    return [(i, fused[i]) for i in order]


def reranked(hits: Sequence[RecallHit], relevance: Sequence[float]) -> list[RecallHit]:
    """``hits`` re-ordered by :func:`rerank_order` with the cross-encoder's ``relevance`` (one per
    hit) and their search scores; the fused score becomes their score."""
    if len(hits) != len(relevance):
        raise ValueError(f"{len(relevance)} relevances for {len(hits)} hits")
    order = rerank_order(relevance, [h.score for h in hits])
    return [RecallHit(memory=hits[i].memory, score=round(score, 6)) for i, score in order]
