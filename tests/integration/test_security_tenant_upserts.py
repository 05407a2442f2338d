"""Security review, issue 29, M3: ids are global keys of the memory read model (and of the vector
index), so no write of one user may ever land on another user's row. Two layers, each tested here
on real NATS, Postgres and models (the memory service's own adapters):

* a restore refuses a record whose id is another user's (a crafted import file), naming the record
  and saying why, and writes nothing of it;
* every read-model upsert (memories, shared memories, daily logs, extraction tasks and results) is
  checked by tenant: an upsert of one tenant under another tenant's id never changes that row and
  is refused (``ForeignRow``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import date
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from contracts.daily_logs import DailyLogState, ExtractionResultState, ExtractionTaskState
from contracts.envelope import CommandEnvelope, utcnow
from contracts.memory import MemoryState, Recall, SharedMemoryState
from services.memory.adapters.pg_store import ForeignRow
from services.memory.config import MemorySettings
from services.memory.domain import model
from services.memory.main import MemoryApp, memory_app

pytestmark = pytest.mark.integration

SECRET = "Bob's safe combination is 31-17-42"
PWNED = "PWNED: this row now says what the attacker wrote"


@pytest.fixture
async def app(infra, tmp_path: Path) -> AsyncIterator[MemoryApp]:  # type: ignore[no-untyped-def]
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="sec_" + uuid.uuid4().hex[:8])
    async with memory_app(settings) as a:
        try:
            yield a
        finally:
            await a.bus.delete_streams()
            await a.store.pool.execute(f"DROP SCHEMA IF EXISTS {settings.memory_schema} CASCADE")


def command(type_: str, payload: dict[str, Any], tenant: str) -> CommandEnvelope:
    return CommandEnvelope(command_id=uuid.uuid4().hex, type=type_, tenant=tenant, payload=payload)


async def send(app: MemoryApp, type_: str, payload: dict[str, Any], tenant: str) -> dict[str, Any]:
    reply = await app.service.handle_command(command(type_, payload, tenant))
    assert reply.ok, reply.error
    result: dict[str, Any] = reply.result
    return result


async def row(app: MemoryApp, table: str, row_id: UUID) -> dict[str, Any]:
    found = await app.store.pool.fetchrow(f"SELECT * FROM {app.store.s}.{table} WHERE id = $1", row_id)
    assert found is not None
    return dict(found)


async def event_count(app: MemoryApp, tenant: str) -> int:
    names = app.bus.names
    info = await app.bus.js.stream_info(names.events_stream, subjects_filter=f"{names.namespace}.evt.{tenant}.>")
    return sum((info.state.subjects or {}).values())


async def recall_ids(app: MemoryApp, tenant: str, query: str) -> dict[str, str]:
    result = await app.service.recall(tenant, Recall(query=query))
    return {str(h.memory.id): h.memory.content for h in result.hits}


async def test_a_restore_never_lands_on_another_users_memory(app: MemoryApp) -> None:
    """Bob saves a memory; Alice's import (a file naming Alice as its user, so ids are kept)
    carries Bob's memory id with other content. The record is refused, named, and nothing of it is
    written: Bob's row, point, recall and events are as they were; Alice has nothing under that id."""
    saved = await send(app, "save_memory", {"content": SECRET}, "bob")
    bob_id = UUID(saved["memory_id"])
    before = await row(app, "memories", bob_id)
    bob_events = await event_count(app, "bob")
    assert app.service.portability is not None
    exported = await app.service.portability._record("memory", "bob", bob_id)
    assert exported is not None
    crafted = exported.model_dump(mode="json")
    for version in crafted["versions"]:
        version["state"]["content"] = PWNED
    ok = {"content": "Alice waters the plants on Sundays"}
    own = await send(app, "save_memory", ok, "alice")

    restored = await send(app, "restore_records", {"records": [crafted], "source_user": "alice"}, "alice")
    (item,) = restored["items"]
    assert item["status"] == "error", item
    assert item["error"]["field"] == "records[0].id" and item["error"]["code"] == "conflict"
    assert str(bob_id) in item["error"]["message"] and "another user's" in item["error"]["message"]

    assert await row(app, "memories", bob_id) == before  # Bob's row untouched
    assert (await app.store.get("bob", bob_id)).content == SECRET  # type: ignore[union-attr]
    assert await app.store.get("alice", bob_id) is None
    assert await event_count(app, "bob") == bob_events
    assert await app.bus.last_event(app.bus.names.event("alice", model.AGGREGATE, str(bob_id))) is None
    assert (await recall_ids(app, "bob", "safe combination")).get(str(bob_id)) == SECRET
    alice_hits = await recall_ids(app, "alice", "safe combination PWNED attacker")
    assert str(bob_id) not in alice_hits and PWNED not in alice_hits.values()
    assert own["memory_id"] in await recall_ids(app, "alice", "when are the plants watered?")


async def test_a_restore_never_lands_on_another_users_shared_memory_or_log(app: MemoryApp) -> None:
    """The same for the other records an export carries: a shared memory and a daily log of Bob's
    under their ids in a file for Alice are refused; Bob's rows are untouched."""
    shared = await send(app, "save_shared_memory", {"title": "Bob's trip", "event": SECRET}, "bob")
    log = await send(app, "save_daily_log", {"log_date": "2024-06-01", "turns": [
        {"speaker": "user", "text": SECRET}]}, "bob")
    shared_id, log_id = UUID(shared["shared_memory_id"]), UUID(log["id"])
    before = (await row(app, "shared_memories", shared_id), await row(app, "daily_logs", log_id))
    assert app.service.portability is not None
    records = []
    for kind, record_id in (("shared_memory", shared_id), ("daily_log", log_id)):
        exported = await app.service.portability._record(kind, "bob", record_id)  # type: ignore[arg-type]
        assert exported is not None
        data = exported.model_dump(mode="json")
        data["state"]["version"] += 5
        data["state"]["event" if kind == "shared_memory" else "turns"] = (
            PWNED if kind == "shared_memory" else [{"speaker": "user", "text": PWNED}])
        records.append(data)

    restored = await send(app, "restore_records", {"records": records, "source_user": "alice"}, "alice")
    assert [i["status"] for i in restored["items"]] == ["error", "error"], restored
    assert [i["error"]["field"] for i in restored["items"]] == ["records[0].id", "records[1].id"]
    assert (await row(app, "shared_memories", shared_id), await row(app, "daily_logs", log_id)) == before


async def _bob_rows(app: MemoryApp) -> dict[str, Any]:
    """One row of Bob's in each table of the read model (written as the projection writes them)."""
    now = utcnow()
    ids = {name: uuid.uuid4() for name in ("memory", "shared", "log", "task", "result")}
    memory = MemoryState(id=ids["memory"], tenant="bob", project="default", content=SECRET, created_at=now,
                         updated_at=now)
    shared = SharedMemoryState(id=ids["shared"], tenant="bob", title="Bob's trip", event=SECRET, importance=3, version=1,
                               created_at=now,
                               updated_at=now)
    log = DailyLogState(id=ids["log"], tenant="bob", project="default", log_date=date(2024, 6, 1), turns=[],
                        created_at=now, updated_at=now)
    task = ExtractionTaskState(id=ids["task"], tenant="bob", task_id="bob-task", created_at=now, updated_at=now)
    result = ExtractionResultState(id=ids["result"], tenant="bob", project="default", log_id=ids["log"],
                                   task_id="bob-task", created_at=now, updated_at=now)
    async with app.store.transaction() as tx:
        await tx.upsert(memory, model.content_hash(SECRET), 1)
        await tx.upsert_shared(shared, 1)
        await tx.upsert_log(log, 1)
        await tx.upsert_task(task, 1)
        await tx.upsert_result(result, 1)
    return {"memory": memory, "shared": shared, "log": log, "task": task, "result": result}


TABLES = {"memory": "memories", "shared": "shared_memories", "log": "daily_logs", "task": "extraction_tasks",
          "result": "extraction_results"}


@pytest.mark.parametrize("kind", list(TABLES))
async def test_an_upsert_never_changes_another_tenants_row(app: MemoryApp, kind: str) -> None:
    """An upsert of Alice's state under the id of Bob's row, with a later sequence (what replaced
    Bob's row before): refused, and the row is Bob's as it was."""
    bob = await _bob_rows(app)
    before = await row(app, TABLES[kind], bob[kind].id)
    update: dict[str, Any] = {"tenant": "alice"}
    if kind == "memory":
        update["content"] = PWNED
    elif kind == "shared":
        update["event"] = PWNED
    else:
        update["project"] = "pwned"
    theirs = bob[kind].model_copy(update=update)
    with pytest.raises(ForeignRow) as refused:
        async with app.store.transaction() as tx:
            if kind == "memory":
                await tx.upsert(theirs, model.content_hash(PWNED), 99)
            else:
                write = {"shared": tx.upsert_shared, "log": tx.upsert_log, "task": tx.upsert_task,
                         "result": tx.upsert_result}[kind]
                await write(theirs, 99)
    assert str(bob[kind].id) in refused.value.message
    assert await row(app, TABLES[kind], bob[kind].id) == before
    # Bob's own later events still apply
    async with app.store.transaction() as tx:
        if kind == "memory":
            await tx.upsert(bob[kind].model_copy(update={"version": 2}), model.content_hash(SECRET), 100)
        else:
            write = {"shared": tx.upsert_shared, "log": tx.upsert_log, "task": tx.upsert_task,
                     "result": tx.upsert_result}[kind]
            await write(bob[kind], 100)
    assert (await row(app, TABLES[kind], bob[kind].id))["last_seq"] == 100


async def test_a_replay_skips_another_tenants_event_under_a_row_id(app: MemoryApp) -> None:
    """A replay (bulk upsert) meeting an event of Alice under the id of Bob's row (appended before
    the restore refused such records) goes on without it: Bob's row stays his."""
    bob = await _bob_rows(app)
    before = await row(app, "memories", bob["memory"].id)
    theirs = bob["memory"].model_copy(update={"tenant": "alice", "content": PWNED})
    async with app.store.transaction() as tx:
        await tx.replay_memories([(theirs, model.content_hash(PWNED), 99, None, None, False)], "")
    assert await row(app, "memories", bob["memory"].id) == before
