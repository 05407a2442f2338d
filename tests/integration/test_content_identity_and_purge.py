"""Where a free-form memory's content identity (tenant, project, content hash, generation) meets
restores and retries, and where a purge meets what a replay or this process holds of replaced
versions' texts. Real NATS, Postgres, models (the memory service's own adapters)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from contracts.envelope import CommandEnvelope
from services.memory.config import MemorySettings
from services.memory.main import memory_app
from tests.integration.test_purge_embedding_cache import primed, purge, states

pytestmark = pytest.mark.integration

A = "My locker code at the gym is 4417"


def command(type_: str, payload: dict[str, Any], tenant: str = "alice", command_id: str | None = None) -> CommandEnvelope:
    return CommandEnvelope(command_id=command_id or uuid.uuid4().hex, type=type_, tenant=tenant, payload=payload)


@pytest.fixture
def settings(infra, tmp_path: Path) -> MemorySettings:  # type: ignore[no-untyped-def]
    return MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                          namespace=infra.fresh_namespace(), memory_schema="rf_" + uuid.uuid4().hex[:8])


async def _cleanup(settings: MemorySettings) -> None:
    async with memory_app(settings) as app:
        await app.bus.delete_streams()
        await app.store.pool.execute(f"DROP SCHEMA IF EXISTS {settings.memory_schema} CASCADE")


async def _rows(app: Any, content: str, tenant: str = "alice") -> list[tuple[Any, str]]:
    rows = await app.store.pool.fetch(
        f"SELECT id, status FROM {app.store.s}.memories WHERE tenant = $1 AND content = $2 ORDER BY id", tenant, content)
    return [(r["id"], r["status"]) for r in rows]


async def forgotten_then_purged(app: Any) -> tuple[Any, Any]:
    """Alice saves A and forgets it, exports that memory, is purged: (the save's reply, the export)."""
    first = await app.service.handle_command(command("save_memory", {"content": A}))
    assert first.ok, first.error
    assert (await app.service.handle_command(command("forget_memory", {"memory_id": first.result["memory_id"]}))).ok
    assert app.service.portability is not None
    exported = await app.service.portability._record("memory", "alice", uuid.UUID(first.result["memory_id"]))
    assert exported is not None and [v.event for v in exported.versions][-1] == "MemoryForgotten"
    assert (await purge(app, "alice")).ok
    return first, exported


async def test_restoring_a_backup_beside_a_memory_saved_since_the_purge_keeps_both(settings: MemorySettings) -> None:
    """After a purge the same content saved again gets the id an exported memory had (its
    generation starts again). Restoring the backup must not append the exported versions onto the
    new memory (its FORGOTTEN version would forget it): the record is restored beside it, under an
    id of its own."""
    try:
        async with memory_app(settings) as app:
            first, exported = await forgotten_then_purged(app)
            again = await app.service.handle_command(command("save_memory", {"content": A}))
            assert again.ok and again.result["created"], again.error
            new_id = again.result["memory_id"]

            restored = await app.service.handle_command(command("restore_records", {
                "records": [exported.model_dump(mode="json")], "source_user": "alice"}))
            assert restored.ok, restored.error
            # the memory saved after the purge must still be there, active, and the restored one beside it
            rows = await _rows(app, A)
            (item,) = restored.result["items"]
            assert item["status"] == "restored" and item["id"] != new_id
            assert sorted(rows, key=lambda r: r[1]) == [(uuid.UUID(new_id), "active"), (uuid.UUID(item["id"]), "forgotten")]
            again_restored = await app.service.handle_command(command("restore_records", {
                "records": [exported.model_dump(mode="json")], "source_user": "alice"}))
            assert again_restored.ok and again_restored.result["items"][0] == {**item, "status": "duplicate"}
            assert len(await _rows(app, A)) == 2  # a retried import lands on the same id: nothing more
    finally:
        await _cleanup(settings)


async def test_a_retried_save_after_its_memory_was_forgotten_makes_no_second_memory(settings: MemorySettings) -> None:
    """A save whose first attempt appended its event and died before projecting (no outcome
    kept); the projector projects the event, the user forgets the memory; the command is retried
    with the same command_id after the event stream's duplicate window. The retry finds that it
    created generation 0 itself (its first event's id) and answers that, instead of creating a
    second memory and bringing back what the user forgot."""
    try:
        async with memory_app(settings) as app:
            projection = app.service.projection
            real_apply = projection.apply

            async def crash(*args: Any, **kwargs: Any) -> bool:
                raise ConnectionError("the process died after the append")

            save = command("save_memory", {"content": A})
            projection.apply = crash  # type: ignore[method-assign]
            try:
                with pytest.raises(ConnectionError):
                    await app.service.handle_command(save)
            finally:
                projection.apply = real_apply  # type: ignore[method-assign]
            # the projector consumer projects the appended event (what it does for a crashed inline write)
            names = app.bus.names
            msg = await app.bus.js.get_last_msg(names.events_stream, f"{names.namespace}.evt.alice.>")
            from contracts.envelope import EventEnvelope
            event = EventEnvelope.model_validate_json(msg.data)
            await projection.apply(event, int(msg.seq))
            (memory_id, status), = await _rows(app, A)
            assert status == "active"
            assert (await app.service.handle_command(command("forget_memory", {"memory_id": str(memory_id)}))).ok

            # the retry comes after the event stream's duplicate window (120 s; shortened here)
            info = await app.bus.js.stream_info(names.events_stream)
            config = info.config
            config.duplicate_window = 0.5
            await app.bus.js.update_stream(config)
            await asyncio.sleep(3.0)
            try:
                await app.service.handle_command(save)
            except Exception:  # noqa: BLE001 - failing the retry is acceptable, a second memory is not
                pass
            rows = await _rows(app, A)
            assert len(rows) == 1 and rows[0][1] == "forgotten", rows
    finally:
        await _cleanup(settings)


async def moved_house(app: Any) -> tuple[uuid.UUID, Any]:
    """Alice saves where she lives, then updates it: (the memory's id, its first version's state)."""
    saved = await app.service.handle_command(command("save_memory", {"content": "I live at 12 Elm Street, Leeds"}))
    assert saved.ok
    (old,) = await states(app, "alice")
    assert (await app.service.handle_command(command("update_memory", {
        "id": saved.result["memory_id"], "content": "I moved to 34 Oak Avenue, York"}))).ok
    return uuid.UUID(saved.result["memory_id"]), old


async def test_a_purge_drops_this_process_primed_vectors_of_replaced_versions(settings: MemorySettings) -> None:
    """A purge deletes the Postgres cache entries of versions since replaced, and what this
    process holds of their texts too (primed vectors and packed rows, keyed by the plaintext: no row
    tells them apart any more, so all are dropped and refilled from the cache as needed), and the
    truth rules' caches of the texts they judged (keyed by text, not user: all of them)."""
    from services.memory.domain import supersession
    rule_caches = (supersession.template_of, supersession.content_words, supersession._readable,
                   supersession._numbers_in, supersession._facts_in)
    try:
        async with memory_app(settings) as app:
            memory_id, old = await moved_house(app)
            # a new address judged against the current one: the rules read both texts
            assert (await app.service.handle_command(command("save_memory", {"content": "I moved to 7 Mill Lane, York"}))).ok
            assert supersession.template_of.cache_info().currsize and supersession._facts_in.cache_info().currsize
            assert primed(app, old)
            assert (await purge(app, "alice")).ok
            assert not primed(app, old)
            assert [c.cache_info().currsize for c in rule_caches] == [0] * len(rule_caches)
    finally:
        await _cleanup(settings)


async def test_a_purge_after_a_replay_reaches_the_entries_the_replay_cached_for_replaced_versions(
        settings: MemorySettings) -> None:
    """A replay caches the vectors of each memory's last state in its batch — a replaced
    version when the memory's events straddle a batch boundary — and notes their owner as the live
    projection does; restore, replay (batches of one event), purge: nothing of the old text stays."""
    from services.memory.replay import rebuild
    from tests.integration.test_purge_embedding_cache import cached
    try:
        async with memory_app(settings) as app:
            memory_id, old = await moved_house(app)
            assert app.service.portability is not None
            exported = await app.service.portability._record("memory", "alice", memory_id)
            assert (await purge(app, "alice")).ok and await cached(app, [old]) == 0
            restored = await app.service.handle_command(command("restore_records", {
                "records": [exported.model_dump(mode="json")], "source_user": "alice"}))
            assert restored.ok and restored.result["items"][0]["status"] == "restored"
        async with memory_app(settings) as app:
            await rebuild(app, batch=1)
            assert await cached(app, [old]) > 0  # the replay cached the replaced version's text
            assert (await purge(app, "alice")).ok
            assert await cached(app, [old]) == 0
    finally:
        await _cleanup(settings)


async def test_a_result_restored_by_a_later_request_names_the_memory_restored_beside(settings: MemorySettings) -> None:
    """An import sends its records in several requests, results last: a result restored by a later
    request than the memory it names learns from the log that the memory was restored beside
    another (the id it names is held by a memory saved since the purge)."""
    from tests.unit.test_portability_remap import result

    try:
        async with memory_app(settings) as app:
            first, exported = await forgotten_then_purged(app)
            assert (await app.service.handle_command(command("save_memory", {"content": A}))).ok  # takes the id

            restored = await app.service.handle_command(command("restore_records", {
                "records": [exported.model_dump(mode="json")], "source_user": "alice"}))  # request 1: the memory
            beside = restored.result["items"][0]["id"]
            assert beside != first.result["memory_id"]
            found = result("alice", [exported.id], [])
            later = await app.service.handle_command(command("restore_records", {
                "records": [found.model_dump(mode="json")], "source_user": "alice"}))  # request 2: the result
            assert later.ok and later.result["items"][0]["status"] == "restored", later.result
            stored = await app.store.pool.fetchval(
                f"SELECT state->'memory_ids' FROM {app.store.s}.extraction_results WHERE tenant = 'alice'")
            assert json.loads(stored) == [beside]
    finally:
        await _cleanup(settings)


async def test_a_restored_memory_is_imported_through_replays_until_a_version_is_written_here(
        settings: MemorySettings) -> None:
    """The events an import appends carry ``origin: import``: the memory lists as imported, and a
    replay (event by event, or in one batch) reads it so again from the log. A version written here
    afterwards is saved."""
    from contracts.envelope import QueryEnvelope
    from services.memory.replay import rebuild

    async def ask(app: Any, type_: str, payload: dict[str, Any]) -> Any:
        reply = await app.service.handle_query(QueryEnvelope(type=type_, tenant="alice", payload=payload))
        assert reply.ok, reply.error
        return reply.result

    async def listed(app: Any, source: str) -> list[str]:
        found = await ask(app, "recall_memory", {"source": source})
        return sorted(m["content"] for m in found["memories"])

    async def recalled(app: Any) -> str:  # (the point's origin: recall answers from it)
        return (await ask(app, "recall", {"query": "where does she live now", "limit": 1}))["hits"][0]["memory"]["origin"]

    try:
        async with memory_app(settings) as app:
            memory_id, _ = await moved_house(app)
            assert (await app.service.handle_command(command("save_memory", {"content": A}))).ok
            assert app.service.portability is not None
            exported = await app.service.portability._record("memory", "alice", memory_id)
            assert (await purge(app, "alice")).ok
            restored = await app.service.handle_command(command("restore_records", {
                "records": [exported.model_dump(mode="json")], "source_user": "alice"}))
            assert restored.ok and restored.result["items"][0]["status"] == "restored"
            assert (await app.service.handle_command(command("save_memory", {"content": A}))).ok
            assert await listed(app, "imported") == ["I moved to 34 Oak Avenue, York"]
            assert await listed(app, "saved") == [A]
            assert await recalled(app) == "imported"
        for batch in (1, 500):
            async with memory_app(settings) as app:
                await rebuild(app, batch=batch)
                assert await listed(app, "imported") == ["I moved to 34 Oak Avenue, York"], batch
                assert await listed(app, "saved") == [A], batch
                assert await recalled(app) == "imported", batch
        async with memory_app(settings) as app:
            assert (await app.service.handle_command(command("update_memory", {
                "id": str(memory_id), "content": "I moved to 5 Mill Lane, Hull"}))).ok
            assert await listed(app, "imported") == []
            assert await listed(app, "saved") == sorted([A, "I moved to 5 Mill Lane, Hull"])
            assert await recalled(app) == "saved"
    finally:
        await _cleanup(settings)
