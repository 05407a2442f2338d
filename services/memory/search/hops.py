"""Deep recall (``Recall.mode == "deep"``): the first hits' subjects, and questions taken apart.

A question that needs several memories put together ("What books has John read?", "What subject
have Caroline and Melanie both painted?") is answered by memories that share few words with it,
and one ranked list tends to fill its first places with whatever matches the question's topic best,
whoever it is about. Deep recall fuses more than one list:

1. **the first hop**: the default recall (hybrid search, late interaction) of the question;
2. **the same entity**: of the first hop's candidates, those about what the question names
   (:func:`services.memory.domain.entities.entity_ranking`: the speaker a turn is labelled with, or
   the names a memory mentions), in the first hop's order;
3. **sub-questions**: a question that joins two things
   (:func:`services.memory.domain.question_split.split_question`) is also recalled part by part;
4. the lists are fused by weighted reciprocal rank (:func:`fuse_rankings`); the first hop keeps
   the largest weight, so a question the first hop answers keeps its answer on top.

A keyword second hop (the question's terms plus those that stand out among the first hits, searched
again) was measured and left out: it moved nothing on LoCoMo beyond the noise (docs/recall-quality.md,
"Deep recall"), for one more search. The weights were fitted on LoCoMo conversations 0–4 and are
reported on 5–9 beside them.

**Aliases** (every recall, default and deep): a question that names someone by their relation to
the user ("What does my sister like to eat?") is also recalled with the name the user's memories
give that relation ("My sister Ana is visiting…" → "What does Ana like to eat?",
:mod:`services.memory.domain.aliases`), and the lists are fused (:func:`alias_recalls`, run beside the question's own recall, then :func:`alias_fusion`). Nothing runs
for a question without such words (a regular expression), nor when no memory names the relation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TypeVar
from uuid import UUID

from contracts.memory import MAX_RECALL_LIMIT, Recall, RecallHit, RecallMode, RecallResult
from services.memory.domain.aliases import alias_key, aliases_in, asked_relations, with_name
from services.memory.domain.entities import entity_ranking
from services.memory.domain.question_split import split_question

__all__ = [
    "ALIAS_WEIGHT",
    "ASKED_WEIGHT",
    "ENTITY_WEIGHT",
    "HOP_FUSION_K",
    "SUBQUESTION_WEIGHT",
    "alias_fusion",
    "alias_recalls",
    "deep_fusion",
    "deep_hops",
    "fuse_rankings",
]

#: Each sub-question's list in the fusion. Fitted on LoCoMo conversations 0–4 over the learned
#: first hop (services/memory/domain/candidate_order.py), with ENTITY_WEIGHT 0.35: R@5 / R@10
#: 0.780 / 0.839 without, 0.782 / 0.840 at 0.25, 0.779 / 0.838 at 0.5.
SUBQUESTION_WEIGHT = 0.25
#: The list of first-hop hits about what the question names, in the fusion. Fitted on LoCoMo
#: conversations 0–4 over the learned first hop (sub-questions at 0.25), by R@5 over categories
#: 1–4: 0.776 / 0.781 / 0.781 / 0.782 at 0 / 0.1 / 0.2 / 0.35 (multi-hop 0.480 / 0.493 / 0.497 /
#: 0.505), while category 5 (adversarial: questions naming the wrong person) falls 0.854 / 0.838 /
#: 0.804 / 0.732 — the price of asking for deep recall, which is for questions about whom they name.
ENTITY_WEIGHT = 0.35
#: The question as asked, beside the same question asked with a relation's name (weight 1 each),
#: in the fusion. "What does Ana like to eat?" is the question itself with its reference resolved,
#: so its order leads; the question as asked adds what only it finds and breaks ties. Not fitted:
#: LoCoMo's questions name people, never "my sister" (docs/recall-quality.md). With equal weights
#: a memory both lists rank second ("I like to eat oatmeal") stayed above the one only the named
#: question ranks first ("Ana loves sushi and ramen", fifth as asked): reciprocal ranks are flat.
ASKED_WEIGHT = 0.25
ALIAS_WEIGHT = 1.0
#: Names tried per relation (two sisters: both), and relations per question, at most.
MAX_ALIAS_NAMES = 2
MAX_ASKED_RELATIONS = 2
#: Memories read for the names of a question's relations, at most (the most recently changed).
ALIAS_SOURCES = 20

#: The rank offset of the fusion: ``weight / (HOP_FUSION_K + rank)``, ranks from 1.
HOP_FUSION_K = 10

_K = TypeVar("_K", bound=Hashable)


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


def deep_fusion(
    question: str, first: Sequence[tuple[_K, str]], parts: Sequence[Sequence[_K]] = (),
) -> list[tuple[_K, float]]:
    """Deep recall's order, from the first hop's ``first`` (``(key, content)``, best first) and the
    rankings of the question's ``parts`` (:func:`split_question`, each searched alone): the first
    hop (weight 1), the first hop's hits about what the question names (:data:`ENTITY_WEIGHT`,
    :func:`~services.memory.domain.entities.entity_ranking`) and each part
    (:data:`SUBQUESTION_WEIGHT`), fused by :func:`fuse_rankings`. With nothing to add, the first
    hop's order, scored as a fusion of itself."""
    lists: list[Sequence[_K]] = [[key for key, _ in first]]
    weights = [1.0]
    entity = entity_ranking(question, first) if ENTITY_WEIGHT > 0 else []
    if entity:
        lists.append(entity)
        weights.append(ENTITY_WEIGHT)
    if SUBQUESTION_WEIGHT > 0:
        lists.extend(parts)
        weights.extend(SUBQUESTION_WEIGHT for _ in parts)
    return fuse_rankings(lists, weights)


async def deep_hops(
    query: Recall, found: Sequence[RecallHit], recall: Callable[[Recall], Awaitable[RecallResult]],
) -> list[RecallHit]:
    """Deep recall over the first hop's ``found`` (the default recall's candidates, best first):
    each part of a question that joins two things is recalled on its own (``recall``, the default
    recall, side by side), then :func:`deep_fusion`. The fused score becomes each hit's score."""
    by_id = {h.memory.id: h for h in found}
    subquestions = split_question(query.query) if SUBQUESTION_WEIGHT > 0 else []
    parts: list[list[UUID]] = []
    if subquestions:
        limit = min(max(query.limit, len(found)), MAX_RECALL_LIMIT)
        results = await asyncio.gather(*(
            recall(query.model_copy(update={"query": sub, "mode": RecallMode.HYBRID, "rerank": False,
                                            "include_profile": False, "limit": limit}))
            for sub in subquestions
        ))
        for result in results:
            for hit in result.hits:
                by_id.setdefault(hit.memory.id, hit)
            parts.append([hit.memory.id for hit in result.hits])
    fused = deep_fusion(query.query, [(h.memory.id, h.memory.content) for h in found], parts)
    return [RecallHit(memory=by_id[i].memory, score=round(score, 6)) for i, score in fused]


async def alias_recalls(
    query: Recall, sources: Callable[[list[str]], Awaitable[list[str]]],
    recall: Callable[[Recall], Awaitable[RecallResult]], limit: int,
) -> list[RecallResult]:
    """The question asked again with each name the user's memories give a relation it names
    (``sources``: the words of the memories stating an alias under the given keys; ``recall``: the
    default recall, ``limit`` hits each, side by side). ``[]`` when the question names no relation or
    none has a name. Independent of the question's own recall, so it runs beside it."""
    asked = asked_relations(query.query)[:MAX_ASKED_RELATIONS]
    if not asked:
        return []
    texts = await sources([alias_key(a.whose, a.relation) for a in asked])
    named = [alias for text in texts for alias in aliases_in(text)]
    questions = []
    for a in asked:
        names = dict.fromkeys(n.name for n in named if (n.whose, n.relation) == (a.whose, a.relation))
        questions.extend(with_name(query.query, a, name) for name in list(names)[:MAX_ALIAS_NAMES])
    return list(await asyncio.gather(*(
        recall(query.model_copy(update={"query": q, "mode": RecallMode.HYBRID, "rerank": False,
                                        "include_profile": False, "limit": limit}))
        for q in questions
    )))


def alias_fusion(found: Sequence[RecallHit], named: Sequence[RecallResult]) -> list[RecallHit]:
    """``found`` (the question's own hits, best first) fused with the hits of the question asked with
    names (:func:`alias_recalls`) by :func:`fuse_rankings` (:data:`ASKED_WEIGHT`, :data:`ALIAS_WEIGHT`);
    ``found`` unchanged without them."""
    if not named:
        return list(found)
    by_id = {h.memory.id: h for h in found}
    for result in named:
        for hit in result.hits:
            by_id.setdefault(hit.memory.id, hit)
    fused = fuse_rankings([[h.memory.id for h in found], *([h.memory.id for h in r.hits] for r in named)],
                          [ASKED_WEIGHT, *(ALIAS_WEIGHT for _ in named)])
    return [RecallHit(memory=by_id[i].memory, score=round(score, 6)) for i, score in fused]
