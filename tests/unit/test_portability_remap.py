"""Restoring an extraction result into another user: its memory ids and shared memory ids name the
records as they are restored there (a keyed memory by its key's id, a shared memory by its title's,
a free-form memory by ``uuid5``), whether those records come in the same restore or an earlier one."""

from __future__ import annotations

from datetime import date
from typing import Any
from uuid import UUID, uuid4

import pytest

from contracts.daily_logs import daily_log_id, extraction_result_id
from contracts.portability import ExtractionResultRecord, MemoryRecord, SharedMemoryRecord
from services.memory.domain.model import keyed_memory_id
from services.memory.domain.remap import Remap
from services.memory.domain.shared import shared_id

pytestmark = pytest.mark.unit

NOW = "2025-01-01T00:00:00Z"
DAY = date(2024, 12, 31)


def memory(source: str, key: str | None, content: str = "Likes tea") -> MemoryRecord:
    """A memory as ``source`` exported it (a keyed one's id derived from its key, as a save does)."""
    memory_id = keyed_memory_id(source, "p", key) if key else uuid4()
    versions = [{"event": "MemorySaved", "occurred_at": NOW, "state": {
        "id": str(memory_id), "project": "p", "content": content, "category": "preference" if key else None,
        "memory_key": key, "version": v, "created_at": NOW, "updated_at": NOW}} for v in (1, 2)]
    return MemoryRecord.model_validate({"id": str(memory_id), "versions": versions})


def shared(source: str, title: str) -> SharedMemoryRecord:
    return SharedMemoryRecord.model_validate({"event": "SharedMemorySaved", "occurred_at": NOW, "state": {
        "id": str(shared_id(source, title)), "title": title, "event": "We went", "importance": 3, "version": 1,
        "created_at": NOW, "updated_at": NOW}})


def result(source: str, memory_ids: list[UUID], shared_ids: list[UUID]) -> ExtractionResultRecord:
    log_id = daily_log_id(source, "p", DAY)
    state: dict[str, Any] = {
        "id": str(extraction_result_id(source, log_id, "t1")), "project": "p", "log_id": str(log_id),
        "task_id": "t1", "memory_ids": [str(i) for i in memory_ids], "shared_memory_ids": [str(i) for i in shared_ids],
        "version": 1, "created_at": NOW, "updated_at": NOW}
    return ExtractionResultRecord.model_validate({"event": "ExtractionResultRecorded", "occurred_at": NOW,
                                                  "state": state, "log_date": DAY.isoformat()})


def restored_id(remap: Remap, record: MemoryRecord) -> UUID:
    return remap.memory_states(record)[-1][2].id


def test_a_result_restored_with_its_records_names_them_as_restored() -> None:
    keyed, free, trip = memory("u1", "preference.tea"), memory("u1", None, "Runs"), shared("u1", "Trip to Kyoto")
    found = result("u1", [keyed.id, free.id], [trip.state.id])
    remap = Remap("u1", "u2")
    memory_ids = [restored_id(remap, keyed), restored_id(remap, free)]
    trip_id = remap.shared_state(trip).id
    state = remap.result_state(found)
    assert state.memory_ids == memory_ids
    assert memory_ids[0] == keyed_memory_id("u2", "p", "preference.tea")  # a later save by key lands on it
    assert memory_ids[1] not in (free.id, memory_ids[0])
    assert state.shared_memory_ids == [trip_id] == [shared_id("u2", "Trip to Kyoto")]
    assert state.tenant == "u2" and state.log_id == daily_log_id("u2", "p", DAY)
    assert set(state.memory_ids).isdisjoint(found.state.memory_ids)  # nothing of the source user is named


def test_a_result_restored_after_its_records_learns_their_names_from_the_target() -> None:
    keyed, free, trip = memory("u1", "goal.run"), memory("u1", None, "Runs"), shared("u1", "Trip to Kyoto")
    earlier = Remap("u1", "u2")  # the batch that restored the records
    expected = [restored_id(earlier, keyed), restored_id(earlier, free)]
    expected_shared = [earlier.shared_state(trip).id]

    later = Remap("u1", "u2")  # the batch with the result: knows what the target holds
    later.know_keyed("p", "goal.run")
    later.know_shared("Trip  to Kyoto ")  # titles are matched as shared ids are derived: normalised
    state = later.result_state(result("u1", [keyed.id, free.id], [trip.state.id]))
    assert state.memory_ids == expected and state.shared_memory_ids == expected_shared

    unaware = Remap("u1", "u2")  # a key known to no one: the id maps as a free-form memory's would
    assert unaware.result_state(result("u1", [keyed.id], [])).memory_ids != [expected[0]]


def test_a_key_of_another_user_or_project_is_not_mistaken_for_the_sources() -> None:
    keyed = memory("u1", "goal.run")
    remap = Remap("u1", "u2")
    remap.know_keyed("other", "goal.run")
    assert remap.memory_id(keyed.id) != keyed_memory_id("u2", "other", "goal.run")
    assert remap.memory_id(keyed.id) == remap.other(keyed.id)


def test_into_the_same_user_every_id_is_kept() -> None:
    keyed, trip = memory("u1", "preference.tea"), shared("u1", "Trip")
    found = result("u1", [keyed.id, uuid4()], [trip.state.id])
    for remap in (Remap("u1", "u1"), Remap(None, "u1")):
        remap.memory_states(keyed)
        state = remap.result_state(found)
        assert (state.id, state.memory_ids, state.shared_memory_ids) == (
            found.state.id, found.state.memory_ids, found.state.shared_memory_ids)


def test_a_memory_restored_beside_another_keeps_an_id_of_its_own_that_later_records_name() -> None:
    """Into the same user (ids kept), a memory whose id another memory holds since (same content
    saved after a purge) is restored under an id of its own: the same one on every retry, and the
    one the records restored after it name."""
    record = memory("alice", None)
    remap = Remap("alice", "alice")
    versions = remap.memory_states(record)
    assert remap.memory_id(record.id) == record.id  # kept, as long as nothing holds it
    moved = remap.beside(record.id, versions)
    new = moved[-1][2].id
    assert new != record.id and {st.id for _, _, st in moved} == {new}
    assert [st.version for _, _, st in moved] == [1, 2] and moved[-1][2].content == "Likes tea"
    assert remap.memory_id(record.id) == new
    again = Remap("alice", "alice")
    assert again.beside(record.id, again.memory_states(record))[-1][2].id == new  # a retried import


def test_a_result_restored_into_the_same_user_names_the_memory_restored_beside() -> None:
    """A result restored after a memory it names was restored beside another names the restored
    one (into the same user too; across requests the application learns it from the log)."""
    record = memory("alice", None)
    remap = Remap("alice", "alice")
    moved = remap.beside(record.id, remap.memory_states(record))
    state = remap.result_state(result("alice", [record.id], []))
    assert state.memory_ids == [moved[-1][2].id], state.memory_ids


def linked(source: str, content: str, *, supersedes: list[UUID] = (), conflicts: list[UUID] = (),  # type: ignore[assignment]
           superseded_by: UUID | None = None) -> MemoryRecord:
    """A free-form memory naming others: what it superseded, what it is flagged against, what superseded it."""
    def why(i: UUID) -> dict[str, Any]:
        return {"memory_id": str(i), "reason": "rules", "confidence": 0.5}
    state = {"id": str(uuid4()), "project": "p", "content": content, "version": 1, "created_at": NOW,
             "updated_at": NOW, "supersedes": [why(i) for i in supersedes], "conflicts": [why(i) for i in conflicts],
             **({"superseded_by": why(superseded_by)} if superseded_by else {})}
    return MemoryRecord.model_validate({"id": state["id"], "versions": [
        {"event": "MemorySaved", "occurred_at": NOW, "state": state}]})


def test_the_memories_a_memory_names_are_named_by_their_ids_in_the_new_user() -> None:
    """Found from outside (2026-12-05): an export imported into another user kept, in each memory,
    the source user's ids of what it superseded, what superseded it and what it is flagged against,
    so the flags vanished from the new user's conflicts and the supersessions pointed nowhere."""
    keyed, free = memory("u1", "preference.tea"), memory("u1", None, "Drinks coffee")
    later = linked("u1", "Drinks tea now", supersedes=[keyed.id], conflicts=[free.id])
    old = linked("u1", "Drank water", superseded_by=later.id)
    remap = Remap("u1", "u2")
    ids = {r.id: restored_id(remap, r) for r in (keyed, free, later, old)}  # (the batch's records first)
    new = remap.memory_states(later)[-1][2]
    assert [s.memory_id for s in new.supersedes] == [ids[keyed.id]] == [keyed_memory_id("u2", "p", "preference.tea")]
    assert [s.memory_id for s in new.conflicts] == [ids[free.id]]
    gone = remap.memory_states(old)[-1][2]
    assert gone.superseded_by is not None and gone.superseded_by.memory_id == ids[later.id] == new.id
    # a memory of an earlier batch, known from the new user's keys, or a free-form one not seen yet
    fresh = Remap("u1", "u2")
    fresh.know_keyed("p", "preference.tea")
    alone = fresh.memory_states(later)[-1][2]
    assert [s.memory_id for s in alone.supersedes] == [keyed_memory_id("u2", "p", "preference.tea")]
    assert [s.memory_id for s in alone.conflicts] == [ids[free.id]]  # (uuid5 of the new user and the old id)
    # into the same user the ids stay, or follow a memory restored beside another
    same = Remap("u1", "u1")
    assert same.memory_states(later)[-1][2].conflicts[0].memory_id == free.id
    same.memories[free.id] = same.beside_id(free.id)
    assert same.memory_states(later)[-1][2].conflicts[0].memory_id == same.beside_id(free.id)


def test_the_importer_names_the_keys_of_keyed_memories_a_batch_names_but_does_not_carry(tmp_path: Any) -> None:
    """``engram import`` reads the file once first: into another user it keeps each keyed memory's
    project and key, and a batch whose memories name one it does not carry sends that key along
    (``RestoreRecords.named_keys``); the memory service's ``Remap.know_keyed`` then maps the link
    to the new user's id of that key, as the keyed memory's own record will be."""
    import json

    from deploy.export_import import _named_keys, _survey

    lisbon = memory("giver", "profile.city", "I live in Lisbon")
    porto = memory("giver", None, "I moved to Porto")
    link = {"memory_id": str(lisbon.id), "reason": "a change", "confidence": 0.9, "decided_by": "rules"}
    porto_line = json.loads(porto.model_dump_json())
    porto_line["type"] = "memory"
    porto_line["versions"][-1]["state"]["supersedes"] = [link]
    lisbon_line = json.loads(lisbon.model_dump_json()) | {"type": "memory"}
    export = tmp_path / "giver.jsonl"
    header = {"type": "header", "format": "engram-export", "format_version": 1, "user": "giver"}
    export.write_text("\n".join([json.dumps(header), json.dumps(porto_line), '{"memory_key": "broken',
                                 json.dumps(lisbon_line)]) + "\n", encoding="utf-8")  # (a broken line: skipped here)

    total, keyed = _survey(export, "taker")
    assert total == 3 and {i: (k.project, k.memory_key) for i, k in keyed.items()} == {
        str(lisbon.id): ("p", "profile.city")}
    assert _survey(export, "giver") == (3, {}) and _survey(export, None) == (3, {})  # same user: ids kept
    named = _named_keys([(2, porto_line)], keyed)
    assert [(k.project, k.memory_key) for k in named] == [("p", "profile.city")]
    assert _named_keys([(2, porto_line), (4, lisbon_line)], keyed) == []  # carried by the batch itself

    remap = Remap("giver", "taker")
    for k in named:
        remap.know_keyed(k.project, k.memory_key)
    moved = remap.memory_states(MemoryRecord.model_validate({k: v for k, v in porto_line.items() if k != "type"}))
    assert [s.memory_id for s in moved[-1][2].supersedes] == [keyed_memory_id("taker", "p", "profile.city")]
