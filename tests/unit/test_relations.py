"""A recall hit's relations and documents (issue 18 item 1): the rules, the caps, the compact form."""

from __future__ import annotations

from datetime import UTC, date, datetime
from uuid import UUID, uuid4

import pytest

from contracts.graph import SimilarMemory, SimilarMemoryList
from contracts.memory import (
    LISTED_CONTENT_CHARS,
    MAX_HIT_DOCUMENTS,
    MAX_HIT_RELATIONS,
    MemoryHistory,
    MemoryStatus,
    MemoryVersion,
    MemoryView,
    Provenance,
    RecallHit,
    RelationKind,
    abridged,
)
from services.gateway import relations
from services.gateway.presentation import LEGEND, format_recall

pytestmark = pytest.mark.unit
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def view(content: str, version: int = 1, provenance: Provenance | None = None, id: UUID | None = None) -> MemoryView:
    return MemoryView(id=id or uuid4(), project="p", content=content, importance=3, confidence=0.8, source="mcp",
                      version=version, status=MemoryStatus.ACTIVE, created_at=NOW, updated_at=NOW,
                      provenance=provenance)


def version(n: int, content: str, provenance: Provenance | None = None,
            status: MemoryStatus = MemoryStatus.ACTIVE) -> MemoryVersion:
    return MemoryVersion(version=n, event="MemoryUpdated", sequence=n, occurred_at=NOW, content=content,
                         status=status, importance=3, confidence=0.8, provenance=provenance)


def prov(day: int, turns: list[int] | None = None) -> Provenance:
    return Provenance(log_id=UUID(int=day), task_id="t1", turns=turns or [], log_date=date(2026, 11, day))


def test_previous_version_then_similar_capped_at_four_with_ranks_for_hits() -> None:
    hit = view("Drinks green tea now", version=3)
    others = [view(f"other memory {i}") for i in range(5)]
    history = MemoryHistory(memory_id=hit.id, versions=[version(1, "Drinks coffee"), version(2, "Drinks black tea"),
                                                        version(3, hit.content)])
    similar = SimilarMemoryList(found=True, similar=[SimilarMemory(memory_id=hit.id, score=1.0)]
                                + [SimilarMemory(memory_id=o.id, score=0.9 - i / 20) for i, o in enumerate(others)])
    got = relations.relations_of(hit, history, similar, ranks={others[1].id: 2}, contents={others[1].id: "other 1"})
    assert len(got) == MAX_HIT_RELATIONS
    assert got[0].kind is RelationKind.PREVIOUS_VERSION and got[0].version == 2 and got[0].excerpt == "Drinks black tea"
    assert [r.kind for r in got[1:]] == [RelationKind.SIMILAR] * 3
    assert hit.id not in {r.memory_id for r in got[1:]}  # the memory itself is never its own neighbour
    assert [r.score for r in got[1:]] == sorted((r.score for r in got[1:]), reverse=True)
    assert got[2].rank == 2 and got[2].excerpt == "other 1"


def test_a_newer_active_version_is_pointed_at_and_low_similarity_is_not_similar() -> None:
    hit = view("Lives in Porto", version=1)
    history = MemoryHistory(memory_id=hit.id, versions=[version(1, hit.content), version(2, "Lives in Lisbon"),
                                                        version(3, "Lives in Lisbon", status=MemoryStatus.FORGOTTEN)])
    weak = SimilarMemoryList(found=True, similar=[SimilarMemory(memory_id=uuid4(), score=relations.SIMILAR_MIN_SCORE - 0.01)])
    got = relations.relations_of(hit, history, weak, {}, {})
    assert [(r.kind, r.version, r.excerpt) for r in got] == [(RelationKind.NEWER_VERSION, 2, "Lives in Lisbon")]


def test_documents_newest_version_first_each_log_once_at_most_three() -> None:
    hit = view("Has two cats", version=5, provenance=prov(5, [3, 4]))
    history = MemoryHistory(memory_id=hit.id, versions=[version(i, "x", prov(i)) for i in range(1, 6)])
    docs = relations.documents_of(hit, history)
    assert len(docs) == MAX_HIT_DOCUMENTS
    assert [d.log_date.day for d in docs] == [5, 4, 3]  # type: ignore[union-attr]
    assert docs[0].turns == [3, 4]
    assert relations.documents_of(view("no log")) == []


def test_only_the_best_hits_are_looked_up_and_only_revised_ones_for_history() -> None:
    hits = [RecallHit(memory=view(f"m{i}", version=1 + i % 2), score=1.0 - i / 10) for i in range(6)]
    revised, best = relations.wanted(hits)
    assert best == [h.memory.id for h in hits[: relations.RELATED_HITS]]
    assert revised == [h.memory.id for h in hits[: relations.RELATED_HITS] if h.memory.version > 1]


def test_excerpt_is_one_line_and_cut_at_a_word() -> None:
    text = "word " * 40
    cut = relations.excerpt("  many\nlines\there ")
    assert cut == "many lines here"
    long = relations.excerpt(text)
    assert long.endswith("…") and len(long) <= relations.EXCERPT_CHARS and "  " not in long


def test_compact_form_has_arrows_ranks_logs_and_a_one_line_legend() -> None:
    first = view("Drinks green tea", version=2, provenance=prov(30, [1]))
    second = view("Likes Darjeeling")
    outsider = uuid4()
    hits = [RecallHit(memory=first, score=0.9), RecallHit(memory=second, score=0.5)]
    history = MemoryHistory(memory_id=first.id, versions=[version(1, "Drinks coffee", prov(29)),
                                                          version(2, first.content, prov(30, [1]))])
    similar = SimilarMemoryList(found=True, similar=[SimilarMemory(memory_id=second.id, score=0.81),
                                                     SimilarMemory(memory_id=outsider, score=0.7)])
    enriched = relations.with_relations(hits, {first.id: history}, {first.id: similar})
    text = format_recall("tea", enriched, None)
    lines = text.splitlines()
    assert lines[1] == LEGEND and "\n" not in LEGEND
    assert "↻v2 · from log 2026-11-30 (turns 1) · from log 2026-11-29" in lines[2]
    assert lines[3] == f"    ← v1 “Drinks coffee” · ~ [2] 0.81 · ~ ({outsider}) 0.70"
    assert lines[4].startswith("[2] (0.500) Likes Darjeeling") and len(lines) == 5  # no relations, no line
    assert enriched[1] == hits[1]  # a hit with nothing related is unchanged


def test_a_long_memory_is_recalled_by_its_start_with_its_length_and_how_to_read_all_of_it() -> None:
    """A pasted document (up to 200,000 characters) is cut in a recall hit, at a word: a reply holds
    many hits and the bus carries at most 1 MB a message. The hit says how much more there is and how
    to get it; its versions are compared with the whole text, not with the cut."""
    whole = " ".join(f"word{i}" for i in range(40_000))
    first = view(whole, version=2)
    cut = abridged(first)
    assert cut.content_chars == len(whole) and len(cut.content) <= LISTED_CONTENT_CHARS
    assert whole.startswith(cut.content) and whole[len(cut.content)] == " "  # cut at a word
    short = view("a short memory")
    assert abridged(short) is short and "content_chars" not in short.model_dump_json()
    # the version before changed only the document's end: still a previous version, shown
    history = MemoryHistory(memory_id=first.id, versions=[version(1, whole[:-1] + "X"), version(2, whole)])
    got = relations.relations_of(cut.model_copy(update={"id": first.id}), history, None, {}, {})
    assert [(r.kind, r.version) for r in got] == [(RelationKind.PREVIOUS_VERSION, 1)]
    # the same words as the recalled version: no relation (the cut is not taken for a change)
    same = MemoryHistory(memory_id=first.id, versions=[version(1, whole), version(2, whole)])
    assert relations.relations_of(cut, same, None, {}, {}) == []
    text = format_recall("word", [RecallHit(memory=cut, score=0.9)], None)
    more = len(whole) - len(cut.content)
    assert f" … [{more:,} more characters: get_memory {first.id} for all]" in text
