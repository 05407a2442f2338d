"""The parsers of `engram import` (mem0, Supermemory, chat histories, Engram's own export) and the
rules of restoring exported records into a user (ids kept, or re-derived for another user)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from uuid import uuid4

import pytest

from contracts.daily_logs import SaveDailyLog, daily_log_id
from contracts.memory import SaveMemory
from contracts.portability import DailyLogRecord, MemoryRecord, RestoreRecords
from deploy.import_formats import (
    ImportFormatError,
    chat_days,
    chat_items,
    detect,
    engram_lines,
    mem0_items,
    supermemory_items,
)
from services.gateway.portability import item_key
from services.memory.domain.model import keyed_memory_id
from services.memory.domain.remap import Remap

pytestmark = pytest.mark.unit
FIXTURES = Path(__file__).parent.parent / "fixtures" / "portability"
TODAY = date(2025, 1, 1)


def load(name: str) -> object:
    return json.loads((FIXTURES / name).read_text())


def head(name: str) -> str:
    return (FIXTURES / name).read_text()[:16_384]


def test_each_fixture_is_recognised() -> None:
    assert detect(head("mem0_get_all.json")) == "mem0"
    assert detect(head("supermemory_documents.json")) == "supermemory"
    assert detect(head("chat_turns.json")) == "chat"
    assert detect(head("locomo_sample.json")) == "chat"
    header = json.dumps({"type": "header", "format": "engram-export", "format_version": 1, "user": "u1",
                         "exported_at": "2025-01-01T00:00:00Z"})
    assert detect(header + "\n{}") == "engram"
    with pytest.raises(ImportFormatError, match="--format"):
        detect("hello")


def test_mem0_memories_become_memories_with_keys_from_their_ids() -> None:
    items = list(mem0_items(load("mem0_get_all.json"), "travel"))
    assert [i.command.content for i in items] == [  # type: ignore[attr-defined]
        "Is travelling to Paris in June", "Prefers window seats on long flights", "Allergic to peanuts MARKER-MEM0"]
    assert all(isinstance(i.command, SaveMemory) and i.command.project == "travel" and i.command.source == "mem0"
               for i in items)
    again = list(mem0_items(load("mem0_get_all.json"), "travel"))
    assert [i.key for i in items] == [i.key for i in again] and len({i.key for i in items}) == 3
    bare = list(mem0_items(load("mem0_get_all.json")["results"], "travel"))  # type: ignore[index]
    assert [i.key for i in bare] == [i.key for i in items]  # the v1 API's bare list is the same
    with pytest.raises(ImportFormatError, match="item 0 has no 'memory'"):
        list(mem0_items([{"id": "x"}], "default"))


def test_supermemory_keeps_latest_unforgotten_entries_with_the_title_as_context() -> None:
    items = list(supermemory_items(load("supermemory_documents.json"), None))
    contents = [i.command.content for i in items]  # type: ignore[attr-defined]
    assert contents == ["Dana is moving to Lisbon in September", "Dana wants a flat near the river MARKER-SM",
                        "Reminder: renew the passport before March."]
    first = items[0].command
    assert isinstance(first, SaveMemory) and first.context == "Call with Dana about the move"
    assert first.project == "personal"  # the document's container tag
    assert items[2].command.project == "sm_project_default"  # type: ignore[attr-defined]
    assert [i.command.project for i in supermemory_items(load("supermemory_documents.json"), "moved")] == ["moved"] * 3  # type: ignore[attr-defined]


def test_a_chat_history_becomes_one_daily_log_per_day() -> None:
    days = chat_days(load("chat_turns.json"), TODAY)
    assert [d for d, _ in days] == [date(2024, 7, 1), date(2024, 7, 3)]
    assert [t.text for t in days[0][1]][-1] == "She hides under the sofa all day."  # no `at`: the day before's
    items = list(chat_items(load("chat_turns.json"), "pets", TODAY))
    assert all(isinstance(i.command, SaveDailyLog) for i in items)
    assert [i.command.log_date for i in items] == [date(2024, 7, 1), date(2024, 7, 3)]  # type: ignore[attr-defined]
    memories = list(chat_items(load("chat_turns.json"), "pets", TODAY, as_memories=True))
    assert len(memories) == 5 and memories[1].command.context.startswith("user: I adopted a cat")  # type: ignore[attr-defined]


def test_locomo_sessions_are_logs_on_their_dates() -> None:
    items = list(chat_items(load("locomo_sample.json"), "default", TODAY))
    assert [i.command.log_date for i in items] == [date(2023, 5, 8), date(2023, 5, 25)]  # type: ignore[attr-defined]
    assert items[0].command.turns[0].speaker == "Caroline"  # type: ignore[attr-defined]


def test_bad_chat_turns_name_where() -> None:
    with pytest.raises(ImportFormatError, match=r"chat turn \[1\] needs a speaker and a text"):
        list(chat_items([{"speaker": "a", "text": "b"}, {"speaker": "c"}], "default", TODAY))
    with pytest.raises(ImportFormatError, match=r"\[0\]: 'at' must be an ISO 8601 time"):
        list(chat_items([{"speaker": "a", "text": "b", "at": "yesterday"}], "default", TODAY))
    with pytest.raises(ImportFormatError, match="limited to 3,000"):
        list(chat_items([{"speaker": "a", "text": "x" * 3001}], "default", TODAY))


def test_an_engram_export_starts_with_its_header() -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    header = {"type": "header", "format": "engram-export", "format_version": 1, "user": "u1", "exported_at": now.isoformat()}
    lines = [json.dumps(header), json.dumps({"type": "memory", "id": str(uuid4()), "versions": []})]
    parsed = list(engram_lines(lines))
    assert parsed[0][1].user == "u1" and parsed[1][1]["type"] == "memory"  # type: ignore[union-attr,index]
    with pytest.raises(ImportFormatError, match="line 1: an Engram export starts with its header"):
        list(engram_lines(lines[1:]))
    with pytest.raises(ImportFormatError, match="line 2 is not JSON"):
        list(engram_lines([lines[0], "{nope"]))


def test_bulk_item_keys() -> None:
    assert item_key("req-key-1", 3, None) == "req-key-1:3"
    assert item_key("req-key-1", 3, "own-key-99") == "own-key-99"
    long = item_key("k" * 128, 499, None)
    assert len(long) <= 128 and long.endswith(":499") and long == item_key("k" * 128, 499, None)
    assert item_key(None, 0, None) != item_key(None, 0, None)  # no key: each call is new


def _memory_record(project: str, key: str | None, log_id: str | None = None) -> MemoryRecord:
    now = "2025-01-01T00:00:00Z"
    state = {"id": str(uuid4()), "project": project, "content": "Likes tea", "category": "preference" if key else None,
             "memory_key": key, "version": 1, "created_at": now, "updated_at": now}
    if log_id:
        state["provenance"] = {"log_id": log_id, "task_id": "t1", "turns": [0], "log_date": "2024-12-31"}
    return MemoryRecord.model_validate({"id": state["id"], "versions": [{"event": "MemorySaved", "occurred_at": now,
                                                                          "state": state}]})


def test_restoring_into_the_same_user_keeps_every_id() -> None:
    record = _memory_record("p", "preference.tea")
    (_, _, state), = Remap("u1", "u1").memory_states(record)
    assert state.id == record.id and state.tenant == "u1"


def test_restoring_into_another_user_derives_their_ids_again() -> None:
    log_id = str(daily_log_id("u1", "p", date(2024, 12, 31)))
    keyed, free = _memory_record("p", "preference.tea", log_id), _memory_record("p", None)
    remap = Remap("u1", "u2")
    (_, _, k), = remap.memory_states(keyed)
    (_, _, f), = remap.memory_states(free)
    assert k.id == keyed_memory_id("u2", "p", "preference.tea")  # a later save by key lands on it
    assert k.provenance is not None and k.provenance.log_id == daily_log_id("u2", "p", date(2024, 12, 31))
    assert f.id not in (free.id, k.id) and f.tenant == "u2"
    assert remap.memory_states(free)[0][2].id == f.id  # deterministic: importing twice finds it
    log = DailyLogRecord.model_validate({"event": "DailyLogSaved", "occurred_at": "2025-01-01T00:00:00Z", "state": {
        "id": log_id, "project": "p", "log_date": "2024-12-31", "created_at": "2025-01-01T00:00:00Z",
        "updated_at": "2025-01-01T00:00:00Z"}})
    assert remap.log_state(log).id == daily_log_id("u2", "p", date(2024, 12, 31))


def test_a_restore_batch_is_bounded() -> None:
    record = _memory_record("p", None).model_dump(mode="json")
    with pytest.raises(ValueError, match="at most 64"):
        RestoreRecords.model_validate({"records": [record] * 65})
