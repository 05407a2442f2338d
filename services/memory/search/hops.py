"""Deep recall: a second hop, and questions taken apart (``Recall.mode == "deep"``).

A question that needs two memories put together ("What books has John read?", "What subject have
Caroline and Melanie both painted?") is answered by memories that share few words with it: the
first search finds one of them, and the others share words with *that* one (the book's title, the
friend's name, the place). Deep recall therefore searches more than once and fuses the lists:

1. **hop 1** is the default recall (hybrid search, late interaction) of the question;
2. **hop 2** searches again with the question's keyword vector plus the terms that characterise
   the first hop's best hits (:func:`second_hop_query`: names and other words that stand out
   among them, weighed against all the first hop's candidates), the question's dense vector
   unchanged; its candidates are scored by late interaction with the question's own tokens;
3. **sub-questions**: a question that joins two things
   (:func:`services.memory.domain.question_split.split_question`) is also searched part by part;
4. the lists are fused by weighted reciprocal rank (:func:`fuse_rankings`); the first hop keeps
   the largest weight, so a question the first hop answers keeps its answer on top.

Pure functions; the searches themselves are run by :class:`services.memory.search.recall.RecallPipeline`.
The weights were fitted on LoCoMo conversations 0–4 and are reported on 5–9
(docs/recall-quality.md, "Deep recall").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TypeVar
from uuid import UUID

from contracts.memory import MAX_RECALL_LIMIT, Recall, RecallHit, RecallMode, RecallResult
from services.memory.domain.entities import entity_ranking
from services.memory.domain.keywords import expand_query
from services.memory.domain.question_split import split_question
from services.memory.search.ports import SparseVector

__all__ = [
    "ENTITY_WEIGHT",
    "HOP_FUSION_K",
    "SECOND_HOP_DOCS",
    "SECOND_HOP_TERMS",
    "SECOND_HOP_WEIGHT",
    "SECOND_HOP_TERM_WEIGHT",
    "SUBQUESTION_WEIGHT",
    "deep_hops",
    "fuse_rankings",
    "second_hop_query",
]

#: How many of the first hop's best hits the second hop's terms come from.
SECOND_HOP_DOCS = 5
#: How many terms they add to the question's keyword vector at most.
SECOND_HOP_TERMS = 10
#: The added terms' total weight, relative to the question's own keyword weight.
SECOND_HOP_TERM_WEIGHT = 0.5
#: The second hop's list in the fusion (the first hop's counts 1.0).
SECOND_HOP_WEIGHT = 1.0
#: Each sub-question's list in the fusion.
SUBQUESTION_WEIGHT = 0.5
#: The list of first-hop hits that name what the question names, in the fusion.
ENTITY_WEIGHT = 0.5
#: The rank offset of the fusion: ``weight / (HOP_FUSION_K + rank)``, ranks from 1.
HOP_FUSION_K = 10

_K = TypeVar("_K", bound=Hashable)


def second_hop_query(
    query: SparseVector, ranked: Sequence[SparseVector], *, docs: int = SECOND_HOP_DOCS,
    terms: int = SECOND_HOP_TERMS, weight: float = SECOND_HOP_TERM_WEIGHT,
) -> SparseVector:
    """The keyword vector of the second hop: ``query`` plus the terms that characterise the best
    ``docs`` of ``ranked`` (the first hop's stored keyword vectors, in the first hop's final order)
    against all of them — the names, titles and places the first hits mention that the question
    does not. Returns ``query`` itself when nothing stands out (or too few hits to tell: see
    :func:`~services.memory.domain.keywords.expand_query`)."""
    return expand_query(query, ranked, docs=docs, terms=terms, weight=weight)


def fuse_rankings(
    rankings: Sequence[Sequence[_K]], weights: Sequence[float], *, k: float = HOP_FUSION_K,
) -> list[tuple[_K, float]]:
    """Weighted reciprocal-rank fusion: each item scores ``sum(weight / (k + rank))`` over the
    lists it is in (ranks from 1), scaled so that an item first in every list scores 1.0.
    Best first; ties keep the order of first appearance (list by list), so the result does not
    depend on anything but the lists."""
    if len(rankings) != len(weights):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    if any(w < 0 for w in weights):
        raise ValueError("weights must be >= 0")
    score: dict[_K, float] = {}
    first_seen: dict[_K, int] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, item in enumerate(dict.fromkeys(ranking), start=1):  # an item named twice: its best rank
            first_seen.setdefault(item, len(first_seen))
            score[item] = score.get(item, 0.0) + weight / (k + rank)
    best = sum(weights) / (k + 1) or 1.0
    order = sorted(score, key=lambda item: (-score[item], first_seen[item]))
    return [(item, score[item] / best) for item in order]


async def deep_hops(
    query: Recall, found: Sequence[RecallHit], recall: Callable[[Recall], Awaitable[RecallResult]],
) -> list[RecallHit]:
    """Deep recall's fusion over the first hop's ``found`` (the default recall's candidates, best
    first): the entity list (those of them that name what the question names,
    :func:`~services.memory.domain.entities.entity_ranking`) and, for a question that joins two
    things, each sub-question's own default recall (``recall``, run side by side). The fused score
    becomes each hit's score."""
    lists: list[list[UUID]] = [[h.memory.id for h in found]]
    weights = [1.0]
    by_id = {h.memory.id: h for h in found}
    if ENTITY_WEIGHT > 0:
        entity = entity_ranking(query.query, ((h.memory.id, h.memory.content) for h in found))
        if entity:
            lists.append(entity)
            weights.append(ENTITY_WEIGHT)
    subquestions = split_question(query.query) if SUBQUESTION_WEIGHT > 0 else []
    if subquestions:
        limit = max(query.limit, len(found))
        results = await asyncio.gather(*(
            recall(query.model_copy(update={"query": sub, "mode": RecallMode.HYBRID, "rerank": False,
                                            "include_profile": False, "limit": min(limit, MAX_RECALL_LIMIT)}))
            for sub in subquestions
        ))
        for result in results:
            for hit in result.hits:
                by_id.setdefault(hit.memory.id, hit)
            lists.append([hit.memory.id for hit in result.hits])
            weights.append(SUBQUESTION_WEIGHT)
    if len(lists) == 1:
        return list(found)
    return [RecallHit(memory=by_id[i].memory, score=round(score, 6)) for i, score in fuse_rankings(lists, weights)]
