"""The transitions of memories that stay true (services.memory.domain.truth): the plan a save
makes of the rules' decisions, and the states of the events that carry it out."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from uuid import uuid4

import pytest

from contracts.memory import MemorySource, MemoryState, MemoryStatus, Provenance, SaveMemory, Supersession
from services.memory.domain import truth
from services.memory.domain.errors import Conflict
from services.memory.domain.supersession import Candidate, decide_all

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def state(content: str, when: datetime = T0, **kw: object) -> MemoryState:
    return MemoryState(id=uuid4(), tenant="alice", project="default", content=content, created_at=when,
                       updated_at=when, **kw)  # type: ignore[arg-type]


def candidate_of(s: MemoryState, similarity: float) -> Candidate:
    return Candidate(content=s.content, created_at=truth.valid_from(s), project=s.project, similarity=similarity,
                     ref=s.id)


def test_a_changed_place_supersedes_and_the_plan_names_the_old_memory() -> None:
    lisbon = state("I live in Lisbon")
    later = T0 + timedelta(days=60)
    decisions = decide_all(truth.statement(SaveMemory(content="I moved to Berlin last month"), later),
                           [candidate_of(lisbon, 0.7)])
    p = truth.plan(decisions)
    assert [d.candidate.ref for d in p.supersede] == [lisbon.id] and p.merge_into is None
    new = truth.with_plan(state("I moved to Berlin last month", later), p, later)
    assert [w.memory_id for w in new.supersedes] == [lisbon.id] and new.status is MemoryStatus.ACTIVE
    why = new.supersedes[0]
    old = truth.superseded(lisbon, new.id, truth.valid_from(new), why, later)
    assert old is not None and old.status is MemoryStatus.SUPERSEDED and old.valid_until == later
    assert old.superseded_by is not None and old.superseded_by.memory_id == new.id and old.version == 2
    assert "lisbon" in old.superseded_by.reason.casefold()
    # a retry finds it superseded already: nothing more to append
    assert truth.superseded(old, new.id, later, why, later) is None
    assert truth.valid_at(old, T0 + timedelta(days=1)) and not truth.valid_at(old, later + timedelta(seconds=1))


def test_forgetting_what_superseded_a_fact_makes_it_current_again_unless_that_was_superseded_too() -> None:
    """A fact is hidden only by the statement that changed it: withdrawn, the fact stands again, from
    when it was said. But when that statement had been superseded itself, the later one is current
    and says the newer thing: the fact stays superseded."""
    lisbon = state("I live in Lisbon")
    porto = truth.with_plan(state("I moved to Porto last month", T0 + timedelta(days=60)),
                            truth.plan(decide_all(truth.statement(SaveMemory(content="I moved to Porto last month"),
                                                                  T0 + timedelta(days=60)), [candidate_of(lisbon, 0.7)])),
                            T0 + timedelta(days=60))
    old = truth.superseded(lisbon, porto.id, truth.valid_from(porto), porto.supersedes[0], T0 + timedelta(days=60))
    assert old is not None
    gone = porto.model_copy(update={"status": MemoryStatus.FORGOTTEN, "version": 2})
    later = T0 + timedelta(days=61)
    back = truth.reinstated(old, gone, later)
    assert back is not None and back.status is MemoryStatus.ACTIVE and back.version == old.version + 1
    assert back.superseded_by is None and back.valid_until is None and back.updated_at == later
    assert truth.valid_from(back) == T0 and truth.valid_at(back, later)
    assert truth.reinstated(back, gone, later) is None  # a retry: current already
    assert truth.reinstated(old, state("I moved to Faro"), later) is None  # superseded by another memory
    why = Supersession(memory_id=uuid4(), reason="moved again", confidence=0.9)
    gone_after_berlin = gone.model_copy(update={"superseded_by": why})  # Porto had been superseded by Berlin
    assert truth.reinstated(old, gone_after_berlin, later) is None


def test_a_fact_said_before_the_one_held_is_written_superseded_by_it() -> None:
    """A late extraction of an old log: the memory said after it stays current."""
    berlin = state("I moved to Berlin", T0 + timedelta(days=30))
    decisions = decide_all(truth.statement(SaveMemory(content="I live in Lisbon"), T0), [candidate_of(berlin, 0.7)])
    p = truth.plan(decisions)
    assert p.superseded_by is not None and not p.supersede
    old = truth.with_plan(state("I live in Lisbon", T0 + timedelta(days=40)), p, T0)
    assert old.status is MemoryStatus.SUPERSEDED and old.valid_from == T0
    assert old.superseded_by is not None and old.superseded_by.memory_id == berlin.id
    assert old.valid_until == truth.valid_from(berlin)


def test_a_duplicate_is_merged_and_nothing_else_happens() -> None:
    held = state("My favourite colour is green")
    decisions = decide_all(truth.statement(SaveMemory(content="my favourite colour is green"), T0),
                           [candidate_of(held, 0.99)])
    p = truth.plan(decisions)
    assert p.merge_into is not None and p.merge_into.candidate.ref == held.id and not p.supersede


def test_merging_counts_sayings_keeps_the_longer_words_and_raises_importance_on_doubling() -> None:
    held = state("I like green tea")
    log = Provenance(log_id=uuid4(), task_id="t1", turns=[3], log_date=date(2026, 3, 2))
    cmd = SaveMemory(content="I like green tea a lot, especially sencha", provenance=log)
    once = truth.merged(held, cmd, T0, T0)
    assert once.repeats == 2 and once.importance == 4 and once.version == 2
    assert once.content == "I like green tea a lot, especially sencha"
    assert once.sources[0].content == "I like green tea" and once.sources[0].provenance == log  # nothing lost
    assert truth.already_merged(once, cmd)
    twice = truth.merged(once, SaveMemory(content="I like green tea"), T0, T0)
    assert twice.repeats == 3 and twice.importance == 4  # 3 is no doubling
    assert twice.content == once.content and twice.sources[-1].content == "I like green tea"
    many = twice
    for _ in range(30):
        many = truth.merged(many, SaveMemory(content="I like green tea"), T0, T0)
    assert many.importance == truth.MAX_MERGED_IMPORTANCE and many.repeats == 33


def test_uncertain_cases_are_flagged_never_resolved() -> None:
    rex = state("My dog is called Rex")
    decisions = decide_all(truth.statement(SaveMemory(content="My dog is called Bruno"), T0 + timedelta(days=1)),
                           [candidate_of(rex, 0.8)])
    p = truth.plan(decisions)
    assert p.flags and not p.supersede and p.merge_into is None
    new = truth.with_plan(state("My dog is called Bruno", T0 + timedelta(days=1)), p, T0 + timedelta(days=1))
    assert [c.memory_id for c in new.conflicts] == [rex.id] and new.status is MemoryStatus.ACTIVE
    done = truth.settled(new, rex.id, T0 + timedelta(days=2))
    assert done.conflicts == [] and done.version == new.version + 1
    with pytest.raises(Conflict):
        truth.settled(done, rex.id, T0)


def test_another_subject_is_left_alone() -> None:
    mine = state("I live in Lisbon")
    decisions = decide_all(truth.statement(SaveMemory(content="My sister lives in Berlin"), T0 + timedelta(days=3)),
                           [candidate_of(mine, 0.7)])
    assert truth.plan(decisions).quiet


def test_said_at_is_the_logs_day_never_the_future() -> None:
    now = datetime(2026, 3, 10, 8, tzinfo=UTC)
    old_log = Provenance(log_id=uuid4(), task_id="t", log_date=date(2026, 3, 1))
    assert truth.said_at(old_log, now) == datetime(2026, 3, 1, 12, tzinfo=UTC)
    today = Provenance(log_id=uuid4(), task_id="t", log_date=date(2026, 3, 10))
    assert truth.said_at(today, now) == now and truth.said_at(None, now) == now


def test_pin_and_expiry() -> None:
    held = state("Parking spot B12 this week")
    until = T0 + timedelta(days=7)
    pinned = truth.pinned(held, True, until, False, T0)
    assert pinned is not None and pinned.pinned and pinned.forget_after == until
    assert truth.pinned(pinned, True, until, False, T0) is None  # nothing changes: no new version
    cleared = truth.pinned(pinned, False, None, True, T0)
    assert cleared is not None and not cleared.pinned and cleared.forget_after is None


def test_the_new_fields_stay_out_of_events_that_do_not_need_them() -> None:
    """Older events and plain memories keep their shape (the event log's schema stays compatible)."""
    plain = state("nothing changed here").model_dump(mode="json")
    assert not {"valid_from", "valid_until", "superseded_by", "supersedes", "conflicts", "repeats", "sources",
                "pinned", "forget_after"} & plain.keys()
    why = Supersession(memory_id=uuid4(), reason="r", confidence=0.9)
    marked = state("x", superseded_by=why, status=MemoryStatus.SUPERSEDED).model_dump(mode="json")
    assert marked["superseded_by"]["decided_by"] == "rules"


def test_extracted_memories_in_the_third_person_are_read_as_the_user_says_them() -> None:
    assert truth.first_person("The user lives in Oslo with their partner.") == "I live in Oslo with my partner."
    assert truth.first_person("The user's sister is called Ana.") == "my sister is called Ana."
    assert truth.first_person("The user no longer eats meat.") == "I no longer eat meat."
    assert truth.first_person("The user usually goes to yoga on Mondays.") == "I usually go to yoga on Mondays."
    assert truth.first_person("Caroline lives in Oslo.") == "Caroline lives in Oslo."  # nobody else is rewritten
    oslo = state("The user lives in Oslo with their partner.")
    later = T0 + timedelta(days=30)
    decisions = decide_all(truth.statement(SaveMemory(content="The user has moved to Austin for good."), later),
                           [truth.candidate(_view(oslo), 0.4)])
    assert truth.plan(decisions).supersede, decisions


def _view(s: MemoryState):  # type: ignore[no-untyped-def]
    from contracts.memory import MemoryView
    return MemoryView.model_validate(s.model_dump())


def test_a_merge_undone_gives_the_saying_back_in_its_own_words() -> None:
    dublin = state("I live in Dublin", importance=3)
    said = T0 + timedelta(days=5)
    once = truth.merged(dublin.model_copy(update={"repeats": 1}), SaveMemory(content="I'm living in Dublin"), said,
                        said)
    twice = truth.merged(once, SaveMemory(content="I still live in Dublin these days"), said + timedelta(days=5),
                         said + timedelta(days=5))
    assert twice.repeats == 3 and twice.content == "I still live in Dublin these days"  # the longer words won
    split_id = uuid4()
    now = T0 + timedelta(days=20)
    # undo the second merge (it took the words and raised nothing: 3 is not a power of two)
    holder, split = truth.unmerged(once, twice, twice, split_id, now)  # type: ignore[misc]
    assert split.id == split_id and split.content == "I still live in Dublin these days"
    assert split.valid_from == said + timedelta(days=5) and split.repeats == 1 and not split.sources
    assert holder.content == once.content == "I'm living in Dublin"  # the words before that merge
    assert holder.repeats == 2 and holder.version == twice.version + 1
    assert [s.said_at for s in holder.sources] == [said]
    # undo the first (it raised the importance when the sayings doubled): it goes back
    assert once.importance == 4
    holder2, split2 = truth.unmerged(dublin, once, holder, uuid4(), now)  # type: ignore[misc]
    assert split2.content == "I'm living in Dublin" and holder2.repeats == 1 and holder2.importance == 3
    assert not holder2.sources and holder2.content == "I live in Dublin"
    # undone already: nothing more
    assert truth.unmerged(dublin, once, holder2, uuid4(), now) is None


def test_an_llm_judge_settles_a_flagged_pair_only_when_sure() -> None:
    from services.memory.domain.supersession import Opinion, Verdict, second_opinion

    rex = state("My dog is called Rex")
    later = T0 + timedelta(days=3)
    new = truth.statement(SaveMemory(content="My dog is called Bruno"), later)
    flagged = decide_all(new, [candidate_of(rex, 0.8)])[0]
    assert flagged.verdict is Verdict.UNCERTAIN
    sure = second_opinion(flagged, Opinion(Verdict.SUPERSEDES, 0.9, "renamed"), new)
    assert sure.new_supersedes and sure.decided_by == "llm" and sure.reason == "renamed"
    assert truth.note(sure, rex.id).decided_by == "llm"
    # said before the memory it changes (a late extraction): the new one is the stale one
    earlier = truth.statement(SaveMemory(content="My dog is called Bruno"), T0 - timedelta(days=3))
    assert second_opinion(flagged, Opinion(Verdict.SUPERSEDES, 0.9, "renamed"), earlier).stale == "new"
    for unsure in (Opinion(Verdict.SUPERSEDES, 0.6, "maybe"), Opinion(Verdict.UNCERTAIN, 0.99, "can't tell")):
        assert second_opinion(flagged, unsure, new) is flagged
    # only a flagged pair is put to it: the rules' own verdicts stand
    dup = decide_all(new, [candidate_of(state("My dog is called Bruno"), 0.99)])[0]
    assert second_opinion(dup, Opinion(Verdict.UNRELATED, 0.99, "no"), new) is dup


def test_a_merged_memory_hands_what_it_superseded_and_was_flagged_against_to_the_memory_it_joins() -> None:
    """The duplicate's statement lives on in ``into``: so do the memories it superseded (each then
    superseded by ``into``, same reason) and its flags; nothing named twice, never ``into`` itself,
    and a flag between the two merged memories goes (they are one fact)."""
    lisbon, faro = state("I live in Lisbon"), state("My dog is called Rex")
    into = state("Porto is my home now")
    why = Supersession(memory_id=lisbon.id, reason="location changed", confidence=0.9)
    dup = state("I moved to Porto last month").model_copy(update={
        "supersedes": [why], "conflicts": [Supersession(memory_id=faro.id, reason="?", confidence=0.5),
                                           Supersession(memory_id=into.id, reason="same?", confidence=0.5)]})
    into = into.model_copy(update={"conflicts": [Supersession(memory_id=dup.id, reason="same?", confidence=0.5)]})
    merged = truth.absorbed(into, dup, T0 + timedelta(days=1))
    assert merged is not None
    assert [w.memory_id for w in merged.supersedes] == [lisbon.id]
    assert [c.memory_id for c in merged.conflicts] == [faro.id]
    again = truth.absorbed(merged.model_copy(update={"sources": []}), dup, T0)  # (named already: not twice)
    assert again is not None and [w.memory_id for w in again.supersedes] == [lisbon.id]
    old = truth.superseded(lisbon, dup.id, T0, why, T0)
    assert old is not None
    moved = truth.repointed(old, dup.id, into.id, T0 + timedelta(days=1))
    assert moved is not None and moved.status is MemoryStatus.SUPERSEDED and moved.version == old.version + 1
    assert moved.superseded_by is not None and moved.superseded_by.memory_id == into.id
    assert moved.superseded_by.reason == old.superseded_by.reason and moved.valid_until == old.valid_until  # type: ignore[union-attr]
    assert truth.repointed(moved, dup.id, into.id, T0) is None  # (a retry)


def test_a_memory_merged_into_another_is_one_more_saying_of_it() -> None:
    into = state("I go bouldering at Klimmhalle", importance=2)
    other = state("Klimmhalle is my bouldering gym", importance=4).model_copy(update={"repeats": 2, "sources": [
        MemorySource(said_at=T0, source="mcp", content="Klimmhalle is where I boulder")]})
    merged = truth.absorbed(into, other, T0 + timedelta(days=1))
    assert merged is not None
    assert (merged.content, merged.repeats, merged.importance, merged.version) == (into.content, 3, 4, into.version + 1)
    assert [s.content for s in merged.sources] == ["Klimmhalle is where I boulder", "Klimmhalle is my bouldering gym"]
    assert truth.absorbed(merged, other, T0) is None  # (a retry)
    # undone, the duplicate's own saying is a memory again, in its words
    done = truth.unmerged(into, merged, merged, uuid4(), T0)
    assert done is not None
    holder, split = done
    assert split.content == "Klimmhalle is my bouldering gym" and holder.repeats == 2
