"""A recall hit's relations and source documents (issue 18 item 1). Pure rules, no I/O.

The Supermemory design's formatter marks each hit's relations with arrows (``←`` parent, ``→``
child, ``~`` related) and lists its source documents, at most 4 relations and 3 documents per hit.
In Engram a memory's versions share its id (an update writes version N+1 of the same memory), so:

- ``←`` **previous version**: the version the recalled one replaced (from the memory's history);
- ``→`` **newer version**: a version written after the one recalled — rare (the index answered
  before a newer version was projected), shown so the model does not trust a stale fact;
- ``~`` **similar**: the memory's nearest neighbours in the vector index, by rank when the neighbour
  is a hit of the same recall: the ``similar`` edges the graph's read model holds (found once, when
  the memory was saved: the graph's ``RelatedMemories``, one call for all the best hits), or, for a
  hit the graph has not caught up with, the memory service's ``SimilarMemories`` (a vector search);
- **documents**: the daily logs the memory (any of its versions, newest first) was extracted from.

The gateway fetches history and neighbours for the best :data:`RELATED_HITS` hits only, under a
time box; every other hit gets the documents its own provenance names.
"""

from __future__ import annotations

from uuid import UUID

from contracts.graph import RelatedMemoryList, SimilarMemoryList
from contracts.memory import (
    EXCERPT_CHARS,
    MAX_HIT_DOCUMENTS,
    MAX_HIT_RELATIONS,
    MemoryHistory,
    MemoryRelation,
    MemoryStatus,
    MemoryVersion,
    MemoryView,
    Provenance,
    RecallHit,
    RelationKind,
    SourceDocument,
    excerpt,
)

__all__ = ["EXCERPT_CHARS", "excerpt", "relations_of", "with_relations", "documents_of", "wanted",
           "similar_from_graph"]

#: the best hits whose history and neighbours are fetched
RELATED_HITS = 3
#: neighbours asked for per hit (the hits themselves come back too and are dropped)
SIMILAR_PER_HIT = 3
#: neighbours below this cosine similarity are not "similar"
SIMILAR_MIN_SCORE = 0.6


def _document(p: Provenance) -> SourceDocument:
    return SourceDocument(log_id=p.log_id, log_date=p.log_date, task_id=p.task_id, turns=list(p.turns))


def documents_of(memory: MemoryView, history: MemoryHistory | None = None) -> list[SourceDocument]:
    """The daily logs a memory was extracted from: its current provenance, then its earlier versions'
    (newest first), each log once, at most :data:`MAX_HIT_DOCUMENTS`."""
    provenances = [memory.provenance] if memory.provenance is not None else []
    if history is not None:
        provenances += [v.provenance for v in sorted(history.versions, key=lambda v: -v.version)
                        if v.provenance is not None]
    seen: set[UUID] = set()
    documents = []
    for p in provenances:
        if p.log_id not in seen:
            seen.add(p.log_id)
            documents.append(_document(p))
    return documents[:MAX_HIT_DOCUMENTS]


def _same_words(a: MemoryView | MemoryVersion, b: MemoryView | MemoryVersion) -> bool:
    """Whether two versions' words are the same, either of which may carry only its start (a hit,
    or an earlier version in a long history): by their whole lengths and their starts."""
    if (a.content_chars or len(a.content)) != (b.content_chars or len(b.content)):
        return False
    return a.content.startswith(b.content) if len(a.content) >= len(b.content) else b.content.startswith(a.content)


def relations_of(
    memory: MemoryView, history: MemoryHistory | None, similar: SimilarMemoryList | None,
    ranks: dict[UUID, int], contents: dict[UUID, str],
) -> list[MemoryRelation]:
    """A hit's relations, at most :data:`MAX_HIT_RELATIONS`: its previous version first, then a newer
    one, then similar memories by similarity. ``ranks`` and ``contents`` are the recall's hits (a
    neighbour that is a hit is named by its rank, with its content's start)."""
    relations: list[MemoryRelation] = []
    if history is not None:
        versions = {v.version: v for v in history.versions}
        # the version whose words this one replaced: versions that changed no words (a merge, a pin,
        # a supersession) are passed over
        earlier = [v for n, v in sorted(versions.items(), reverse=True) if n < memory.version]
        # the recalled version's words: the hit or its version in the history, whichever holds more of them
        own: MemoryView | MemoryVersion = max((x for x in (versions.get(memory.version), memory) if x is not None),
                                              key=lambda x: len(x.content))

        def same_words(v: MemoryVersion) -> bool:
            return _same_words(v, own)

        previous = next((v for v in earlier if not same_words(v)), None)
        if previous is not None:
            relations.append(MemoryRelation(kind=RelationKind.PREVIOUS_VERSION, memory_id=memory.id,
                                            version=previous.version, excerpt=excerpt(previous.content)))
        newer = [v for v in history.versions if v.version > memory.version and v.status is MemoryStatus.ACTIVE
                 and not same_words(v)]
        if newer:
            latest = max(newer, key=lambda v: v.version)
            relations.append(MemoryRelation(kind=RelationKind.NEWER_VERSION, memory_id=memory.id,
                                            version=latest.version, excerpt=excerpt(latest.content)))
    if similar is not None and similar.found:
        for s in sorted(similar.similar, key=lambda s: -s.score):
            if s.memory_id == memory.id or s.score < SIMILAR_MIN_SCORE:
                continue
            text = contents.get(s.memory_id)
            relations.append(MemoryRelation(kind=RelationKind.SIMILAR, memory_id=s.memory_id, score=round(s.score, 3),
                                            rank=ranks.get(s.memory_id),
                                            excerpt=excerpt(text) if text is not None else None))
    return relations[:MAX_HIT_RELATIONS]


def with_relations(
    hits: list[RecallHit], histories: dict[UUID, MemoryHistory], similar: dict[UUID, SimilarMemoryList],
) -> list[RecallHit]:
    """Every hit with its documents, and the relations found for it (``histories`` and ``similar`` are
    keyed by memory id and hold what was fetched in time)."""
    ranks = {h.memory.id: rank for rank, h in enumerate(hits, 1)}
    contents = {h.memory.id: h.memory.content for h in hits}
    out = []
    for h in hits:
        history = histories.get(h.memory.id)
        found = relations_of(h.memory, history, similar.get(h.memory.id), ranks, contents)
        versions = [r for r in found if r.kind is not RelationKind.SIMILAR]
        # the hit's own versions, then the memory service's (what it supersedes, or was superseded by
        # since), then similar memories: the same order whichever arrived first
        relations = [*versions, *h.relations, *(r for r in found if r.kind is RelationKind.SIMILAR)]
        relations = relations[:MAX_HIT_RELATIONS]
        documents = documents_of(h.memory, history)
        out.append(h.model_copy(update={"relations": relations, "documents": documents})
                   if relations or documents else h)
    return out


def wanted(hits: list[RecallHit]) -> tuple[list[UUID], list[UUID]]:
    """Which of the best hits need their history read (revised ones) and their neighbours asked for."""
    best = hits[:RELATED_HITS]
    return [h.memory.id for h in best if h.memory.version > 1], [h.memory.id for h in best]


def similar_from_graph(related: RelatedMemoryList, versions: dict[UUID, int]) -> dict[UUID, SimilarMemoryList]:
    """The neighbours the graph holds for the hits whose recalled version they were found for
    (``versions``: each hit's); a hit the graph does not hold, or holds at another version or with
    a round of its neighbours still queued, is left out (asked of the vector index instead)."""
    return {r.memory_id: SimilarMemoryList(found=True, similar=r.similar, version=r.version)
            for r in related.memories
            if r.found and r.version is not None and r.version == versions.get(r.memory_id)}
