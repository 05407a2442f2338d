"""Memories as they stood at a past moment (services.memory.search.as_of): which stood as they are,
which in an earlier version read from the event log, which not at all, and the marks of what
replaced them since."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest

from contracts.memory import MemoryState, MemoryStatus, MemoryView, RecallMemory, RelationKind, Supersession
from services.memory.search.as_of import as_they_stood, mark_superseded, superseded_since

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def state(content: str, when: datetime = T0, **kw: object) -> MemoryState:
    return MemoryState(id=kw.pop("id", None) or uuid4(), tenant="alice", project="default",  # type: ignore[arg-type]
                       content=content, created_at=when, updated_at=when, **kw)  # type: ignore[arg-type]


def view(s: MemoryState) -> MemoryView:
    return MemoryView.model_validate(s.model_dump())


def test_each_memory_as_it_stood_then() -> None:
    keyed = uuid4()
    v1 = state("I live in Lisbon", T0, id=keyed, memory_key="profile.location")
    v2 = v1.model_copy(update={"content": "I live in Berlin", "version": 2, "valid_from": T0 + 10 * DAY,
                               "updated_at": T0 + 10 * DAY})
    later = state("I have a dog", T0 + 20 * DAY)
    newer = uuid4()
    gone = state("I work at Google", T0, status=MemoryStatus.SUPERSEDED, valid_until=T0 + 5 * DAY, version=2,
                 superseded_by=Supersession(memory_id=newer, reason="job changed", confidence=0.9))
    histories: dict[UUID, list[MemoryState]] = {keyed: [v1, v2]}
    read: list[UUID] = []

    async def versions(tenant: str, memory_id: UUID) -> list[MemoryState]:
        assert tenant == "alice"
        read.append(memory_id)
        return histories[memory_id]

    views = [view(v2), view(later), view(gone)]
    at = asyncio.run(as_they_stood("alice", views, T0 + 3 * DAY, versions))
    assert at[0] is not None and at[0].content == "I live in Lisbon" and at[0].version == 1
    assert at[0].changed_since is not None and at[0].changed_since.kind is RelationKind.NEWER_VERSION
    assert at[0].changed_since.excerpt == "I live in Berlin" and at[0].changed_since.version == 2
    assert at[1] is None  # said later
    assert at[2] is views[2]  # stood as it is (superseded since)
    assert read == [keyed]  # only the memory whose content changed since was read from the log

    # after the supersession: the job does not stand; the keyed fact stands in its current version
    at = asyncio.run(as_they_stood("alice", views, T0 + 12 * DAY, versions))
    assert at[0] is views[0] and at[0].changed_since is None
    assert at[2] is None


def test_what_superseded_a_memory_since_is_marked() -> None:
    newer = state("I work at Stripe", T0 + 5 * DAY)
    old = view(state("I work at Google", T0, status=MemoryStatus.SUPERSEDED, valid_until=T0 + 5 * DAY,
                     superseded_by=Supersession(memory_id=newer.id, reason="job changed", confidence=0.9)))
    assert superseded_since([old], T0 + DAY) == {newer.id}
    assert superseded_since([old], T0 + 6 * DAY) == set()  # not since: before (it did not stand then)
    marked = mark_superseded([old], T0 + DAY, {newer.id: view(newer)})
    assert marked[0].changed_since is not None and marked[0].changed_since.kind is RelationKind.SUPERSEDED_BY
    assert marked[0].changed_since.memory_id == newer.id and marked[0].changed_since.excerpt == "I work at Stripe"
    assert mark_superseded([old], T0 + DAY, {})[0].changed_since is None  # the newer one is not known here


@pytest.mark.parametrize(("moment", "held"), [("0001-01-01T00:00:11+11:33", datetime.min),
                                              ("9999-12-31T23:59:59-05:00", datetime.max)])
def test_a_moment_beyond_the_years_utc_holds_is_the_first_or_last_there_is(moment: str, held: datetime) -> None:
    """Found by the REST fuzzer (CI, 2026-12-06, seed 1870199107): as_of 0001-01-01T00:00:11+11:33 is
    in the year 0 in UTC; the memory service failed on it (500). The schema calls it a valid
    date-time, so it is answered: as the first moment there is (nothing said yet), or the last."""
    assert RecallMemory(as_of=moment).as_of == held.replace(tzinfo=UTC)
    inside = RecallMemory(as_of="0001-01-02T00:00:00+11:33").as_of
    assert inside is not None and inside.utcoffset() == timedelta(hours=11, minutes=33)  # (kept as given)
