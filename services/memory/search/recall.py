"""Recall: the whole ranking pipeline, once.

1. **Hybrid search** (dense + keyword, RRF) in the vector index, within the tenant and
   optionally one project (``dense`` and ``keyword`` modes query one vector);
2. **keyword feedback** (``keyword_feedback``, off by default): a hybrid search first runs with
   ``max(limit, FEEDBACK_POOL)`` hits, reading their stored keyword vectors;
   :func:`~services.memory.domain.keywords.expand_query` adds the terms that characterise its best
   hits to the keyword query, and the search runs again with it (the dense query unchanged). When
   nothing can be added, the first round's top ``limit`` is the answer. On LoCoMo hybrid R@10 rose
   from 0.711 to 0.725 (docs/recall-quality.md); keyword searches stay literal;
3. **late interaction** (hybrid mode, when an encoder is configured): the best
   ``max(limit, late_candidates)`` scored by MaxSim over their stored token vectors, then put in
   the learned order (:func:`~services.memory.search.late.late_order`);
4. **aliases**: a question naming someone by their relation to the user ("my sister") is asked
   again with the name the user's memories give them, fused with the above; **deep**
   (``mode="deep"``): the candidates about whom the question names, and each part of a question
   joining two things recalled alone, fused with the above (:mod:`services.memory.search.hops`);
5. **rerank** (on request): the best ``max(limit, rerank_candidates)`` re-ordered by the
   cross-encoder.

The vector index only runs queries (:class:`~services.memory.search.ports.VectorIndex`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from contracts.envelope import utcnow
from contracts.memory import (
    MAX_HIT_RELATIONS,
    MAX_RECALL_LIMIT,
    GetProfile,
    MemoryRelation,
    MemoryState,
    Profile,
    Recall,
    RecallHit,
    RecallMode,
    RecallResult,
    RelationKind,
    abridged,
    excerpt,
)
from kit.service import Call
from services.memory.domain import decay, paging, truth
from services.memory.domain.aliases import asked_relations
from services.memory.domain.errors import InvalidArgument
from services.memory.domain.keywords import expand_query, query_vector
from services.memory.search.as_of import as_they_stood, mark_superseded, nameable, superseded_since
from services.memory.search.encoders import Encoders
from services.memory.search.hops import ALIAS_SOURCES, alias_fusion, alias_recalls, deep_hops
from services.memory.search.indexing import SEARCH_MODES, active_filter, rerank_text, reranked, view_of
from services.memory.search.late import (
    LATE_CANDIDATES,
    document_matrix,
    late_document,
    late_order,
    late_prefetch_limit,
    maxsim,
    maxsim_packed,
)
from services.memory.search.ports import (
    RecallReads,
    SearchFilter,
    SearchHit,
    SearchMode,
    SparseVector,
    VectorIndex,
    default_prefetch_limit,
)

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("engram.memory")

#: Hits of a keyword-feedback search's first round: the best ``FEEDBACK_DOCS`` of them are read
#: as relevant, all of them are the background a feedback term must stand out from.
FEEDBACK_POOL = 50
_NO_KEYWORDS = SparseVector((), ())
#: A recall ``as_of`` a moment searches this many times the candidates (current and superseded
#: memories alike, then keeps those that stood at that moment): memories said since crowd the top.
AS_OF_OVERFETCH = 3


def feedback_pool_limit(limit: int) -> int:
    """Hits of the first round of a keyword-feedback search: ``max(limit, FEEDBACK_POOL)``."""
    return max(limit, FEEDBACK_POOL)


async def search(
    index: VectorIndex, *, dense: Sequence[float] | None, sparse: SparseVector | None, filter: SearchFilter,
    limit: int, mode: SearchMode = "hybrid", prefetch_limit: int | None = None, keyword_feedback: bool = False,
) -> list[SearchHit]:
    """Stages 1–2: the index's search, with a keyword-feedback round for a hybrid search when
    ``keyword_feedback`` (both rounds take each leg's best ``prefetch_limit``, default
    ``max(4 * limit, 50)``)."""
    if not (keyword_feedback and mode == "hybrid" and sparse is not None and not sparse.is_empty):
        return await index.search(dense=dense, sparse=sparse, filter=filter, limit=limit, mode=mode,
                                  prefetch_limit=prefetch_limit)
    pl = prefetch_limit if prefetch_limit is not None else default_prefetch_limit(limit)
    first = await index.search(dense=dense, sparse=sparse, filter=filter, limit=feedback_pool_limit(limit),
                               mode=mode, prefetch_limit=pl, with_keywords=True)
    expanded = expand_query(sparse, [h.keywords or _NO_KEYWORDS for h in first])
    if expanded == sparse:
        return first[:limit]
    return await index.search(dense=dense, sparse=expanded, filter=filter, limit=limit, mode=mode, prefetch_limit=pl)


class RecallPipeline:
    """Answers recall: search, keyword feedback, late interaction, rerank."""

    def __init__(
        self,
        store: RecallReads,
        index: VectorIndex,
        models: Encoders,
        profile: Callable[[str, GetProfile], Awaitable[Profile]],
        *,
        rerank_candidates: int = 30,
        late_candidates: int = LATE_CANDIDATES,
        keyword_feedback: bool = False,
        decay_policy: decay.DecayPolicy | None = None,
        clock: Callable[[], datetime] = utcnow,
        versions: Callable[[str, UUID], Awaitable[list[MemoryState]]] | None = None,
    ) -> None:
        for name, value in (("rerank_candidates", rerank_candidates), ("late_candidates", late_candidates)):
            if not 1 <= value <= MAX_RECALL_LIMIT:
                raise ValueError(f"{name} must be within 1-{MAX_RECALL_LIMIT}, got {value}")
        self.store = store
        self.index = index
        self.models = models
        self.profile = profile
        self.rerank_candidates = rerank_candidates
        self.late_candidates = late_candidates
        self.keyword_feedback = keyword_feedback
        self.decay_policy = decay_policy or decay.DecayPolicy()
        self.clock = clock
        self.versions = versions
        self._late_missing_warned = False

    async def recall_query(self, call: Call, rq: Recall) -> RecallResult:
        """Recall within the caller's reach, with the profile of the same scope when asked."""
        project = call.search_project(rq.project)
        if project != rq.project:
            rq = rq.model_copy(update={"project": project})
        if not rq.include_profile:
            found, profile = await self.recall(call.tenant, rq), None
        else:
            found, profile = await asyncio.gather(
                self.recall(call.tenant, rq), self.profile(call.tenant, GetProfile(project=project, as_of=rq.as_of))
            )
        facts = [*profile.static, *profile.dynamic] if profile is not None else []

        def cut(chars: int) -> RecallResult:  # long memories cut to ``chars`` (hits and profile alike)
            return found.model_copy(update={
                "hits": [h.model_copy(update={"memory": abridged(h.memory, chars)}) for h in found.hits],
                "profile": None if profile is None else Profile(
                    static=[abridged(v, chars) for v in profile.static],
                    dynamic=[abridged(v, chars) for v in profile.dynamic])})

        whole = found if profile is None else found.model_copy(update={"profile": profile})
        return paging.shortened(whole, [v.content for v in (*(h.memory for h in found.hits), *facts)], cut)

    async def recall(self, tenant: str, query: Recall) -> RecallResult:
        """Hybrid (dense + keyword, RRF) search within the tenant, optionally one project; in
        hybrid mode the best ``max(limit, late_candidates)`` are re-ordered by late interaction
        (when an encoder is configured); with ``rerank``, the best ``max(limit,
        rerank_candidates)`` are then re-ordered by the cross-encoder. A question naming a relation
        ("my sister") is asked again with the names the user's memories give it, beside the
        question's own recall, and the lists are fused (:func:`alias_recalls`)."""
        if not asked_relations(query.query):  # (most questions: no task, no read)
            return await self._recall(tenant, query)
        named = asyncio.ensure_future(alias_recalls(
            query, lambda keys: self.store.alias_sources(tenant, query.project, keys, ALIAS_SOURCES, query.as_of),
            lambda sub: self._recall(tenant, sub),
            min(max(query.limit, self.late_candidates), MAX_RECALL_LIMIT)))
        try:
            found = await self._recall(tenant, query, named)
        finally:
            if not named.done():
                named.cancel()
        return found

    async def _recall(self, tenant: str, query: Recall,
                      named: asyncio.Future[list[RecallResult]] | None = None) -> RecallResult:
        """:meth:`recall`, with ``named``: the alias recalls to fuse with the question's own hits."""
        reranker = self.models.reranker
        if query.rerank and reranker is None:
            raise InvalidArgument(
                "rerank is not available: this server runs without a reranker (ENGRAM_RERANKER=none); "
                "recall without rerank, or ask the operator to enable it", "rerank",
            )
        mode = SEARCH_MODES[query.mode]
        late = self.models.late_encoder if mode == "hybrid" else None
        loop = asyncio.get_running_loop()
        # the embeddings start on worker threads now; the keyword vector is computed meanwhile
        embedding = self._start_embedding(query.query) if mode != "sparse" else None
        query_tokens = loop.run_in_executor(None, late.encode_query, query.query) if late is not None else None
        sparse = query_vector(query.query) if mode != "dense" else None
        dense = [float(x) for x in await embedding] if embedding is not None else None
        candidates = max(
            query.limit,
            self.late_candidates if late is not None else 0,
            self.rerank_candidates if query.rerank else 0,
        )
        as_of = query.as_of
        scope = active_filter(tenant, query.project)
        if as_of is not None:  # current and superseded memories (forgotten ones have no point)
            scope = SearchFilter(tenant=tenant, project=query.project, status=None)
            candidates = min(MAX_RECALL_LIMIT * AS_OF_OVERFETCH, candidates * AS_OF_OVERFETCH)
        hits = await search(
            self.index, dense=dense, sparse=sparse, mode=mode, limit=candidates,  # type: ignore[arg-type]
            filter=scope, keyword_feedback=self.keyword_feedback,
            # each leg's best 2 × candidates are enough for a second stage to choose from; the default
            # (4 × limit) would read 200 per leg for 50 candidates (2.2 vs 1.1 ms at 100k, same LoCoMo recall)
            prefetch_limit=late_prefetch_limit(candidates) if late is not None else None,
        )
        now = as_of or self.clock()
        found = [h for h in await self._hits(tenant, hits) if decay.in_recall(now, h.memory.forget_after)]
        if as_of is not None:
            found = (await self._as_of(tenant, found, as_of))[: candidates // AS_OF_OVERFETCH]
        if query_tokens is not None:
            if len(found) > 1:  # the candidates' stored tokens are read while the query's are computed
                tokens, stored = await asyncio.gather(
                    query_tokens, self.store.late_tokens(tenant, [h.memory.id for h in found])
                )
                late_scores = await self._late_scores(tokens, found, stored)
                order = late_order(query.query, [h.memory for h in found], [h.score for h in found], late_scores)
                found = [RecallHit(memory=found[i].memory, score=round(score, 6)) for i, score in order]
            else:
                await query_tokens
        if named is not None:  # "my sister" asked with the name the user's memories give her
            found = alias_fusion(found, await named)
        if query.mode is RecallMode.DEEP and len(found) > 1:
            found = await deep_hops(query, found, lambda sub: self.recall(tenant, sub))
        if query.rerank and found:
            assert reranker is not None
            found = found[: max(query.limit, self.rerank_candidates)]
            texts = [rerank_text(h.memory) for h in found]
            relevance = await asyncio.to_thread(reranker.score, query.query, texts)
            found = reranked(found, relevance.tolist())
        found = self._weighed(found, now)
        hits = await self._truth_relations(tenant, found[: query.limit], as_of)
        return RecallResult(hits=[h.model_copy(update={"memory": abridged(h.memory)}) for h in hits])

    async def _as_of(self, tenant: str, found: list[RecallHit], as_of: datetime) -> list[RecallHit]:
        """The hits as they stood at ``as_of`` (:func:`as_they_stood`): a memory said later is left
        out; one whose content changed since is the version that stood then."""
        then = await as_they_stood(tenant, [h.memory for h in found], as_of, self.versions)
        return [h if v is h.memory else h.model_copy(update={"memory": v})
                for h, v in zip(found, then, strict=True) if v is not None]

    def _weighed(self, found: list[RecallHit], now: datetime) -> list[RecallHit]:
        """The hits re-ordered by relevance blended with :func:`decay.weight` (importance, recency
        by category, pinned, repeats: :func:`decay.blended`); scores stay the relevance."""
        if len(found) < 2:
            return found
        weights = [decay.weight(importance=h.memory.importance, category=h.memory.category,
                                written_at=truth.valid_from(h.memory), now=now, content=h.memory.content,
                                pinned=h.memory.pinned, forget_after=h.memory.forget_after,
                                repeats=h.memory.repeats, policy=self.decay_policy) for h in found]
        order = sorted(range(len(found)), key=lambda i: -decay.blended(found[i].score, weights[i]))
        return [found[i] for i in order]

    async def _truth_relations(self, tenant: str, hits: list[RecallHit], as_of: datetime | None) -> list[RecallHit]:
        """Each hit with what changed around it: the memories it superseded (``supersedes``: left out
        of recall, named here so an assistant knows the old value and that it is old); in a recall
        as_of a moment, the memory that superseded it since (``superseded_by``)."""
        wanted = {w.memory_id for h in hits for w in h.memory.supersedes[:MAX_HIT_RELATIONS]}
        if as_of is not None:
            wanted |= superseded_since([h.memory for h in hits], as_of)
        if not wanted:
            return hits
        others = nameable(await self.store.views(tenant, list(wanted)))
        if as_of is not None:
            marked = mark_superseded([h.memory for h in hits], as_of, others)
            hits = [h.model_copy(update={"memory": m}) for h, m in zip(hits, marked, strict=True)]
        out = []
        for h in hits:
            relations = [MemoryRelation(kind=RelationKind.SUPERSEDES, memory_id=w.memory_id,
                                        excerpt=excerpt(others[w.memory_id].content))
                         for w in h.memory.supersedes if w.memory_id in others]
            newer = h.memory.superseded_by
            if as_of is not None and newer is not None and newer.memory_id in others \
                    and h.memory.changed_since is not None:
                relations.insert(0, MemoryRelation(kind=RelationKind.SUPERSEDED_BY, memory_id=newer.memory_id,
                                                   excerpt=excerpt(others[newer.memory_id].content)))
            out.append(h.model_copy(update={"relations": relations[:MAX_HIT_RELATIONS]}) if relations else h)
        return out

    async def _hits(self, tenant: str, hits: list[SearchHit]) -> list[RecallHit]:
        """The hits with their memories' views: from the points' payloads, or from Postgres for
        points indexed before payloads carried the view."""
        ids = [UUID(h.id) for h in hits]
        views = {i: view for i, h in zip(ids, hits, strict=True) if (view := view_of(h.id, h.payload)) is not None}
        if len(views) < len(hits):
            views.update(await self.store.active_views(tenant, [i for i in ids if i not in views]))
        return [RecallHit(memory=views[i], score=h.score) for i, h in zip(ids, hits, strict=True) if i in views]

    async def _late_scores(
        self, query_tokens: np.ndarray, found: list[RecallHit], stored: dict[UUID, bytes | None]
    ) -> list[float]:
        """MaxSim of the query's token vectors against each hit's ``stored`` ones. A memory stored
        without them (written before late interaction was on, or by another encoder) is encoded
        now, and a warning says how to store them for good."""
        encoder = self.models.late_encoder
        assert encoder is not None
        scores = maxsim_packed(query_tokens, [stored.get(h.memory.id) for h in found], encoder.dim)
        missing = [i for i, score in enumerate(scores) if score != score]  # NaN: nothing usable stored
        if missing:
            if not self._late_missing_warned:
                self._late_missing_warned = True
                log.warning(
                    "%d of %d recall candidates have no stored late-interaction tokens; they are encoded "
                    "per recall (slower) until `engram replay memory` stores them", len(missing), len(found),
                )
            encoded = await asyncio.to_thread(
                encoder.encode_documents, [late_document(found[i].memory) for i in missing]
            )
            scores[missing] = maxsim(query_tokens, [document_matrix(tokens) for tokens in encoded])
        return scores.tolist()

    def _start_embedding(self, text: str) -> asyncio.Future[np.ndarray]:
        """The query vector of ``text`` (``embed_query``), already submitted to a worker thread (asyncio.to_thread would
        start only when awaited)."""
        return asyncio.get_running_loop().run_in_executor(None, self.models.embedder.embed_query, text)
