"""Restores beside a memory saved since a purge (keyed memories excepted; a save racing the
restore), what a purge drops from the embedder's own caches, and the lock order of a graph
similar-edge round that re-queues a stale source. Real NATS, Postgres and models."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from services.memory.config import MemorySettings
from services.memory.main import memory_app
from tests.integration.test_content_identity_and_purge import _cleanup, command
from tests.integration.test_content_identity_and_purge import settings as settings  # noqa: F401,F811 (the fixture)
from tests.integration.test_purge_embedding_cache import purge

pytestmark = pytest.mark.integration




async def _keyed_rows(app: Any, tenant: str, key: str) -> list[tuple[Any, str]]:
    rows = await app.store.pool.fetch(
        f"SELECT id, status FROM {app.store.s}.memories WHERE tenant = $1 AND memory_key = $2 ORDER BY id", tenant, key)
    return [(r["id"], r["status"]) for r in rows]


async def test_restoring_a_keyed_memory_after_its_key_was_saved_again_makes_no_second_memory_of_the_key(
        settings: MemorySettings) -> None:
    """A keyed memory's id is its key's: every save of one key lands on one aggregate. After a
    purge the user saves the key again (another creation time), then restores the backup: the
    record is not restored beside it (that is for free-form content ids) — one memory of the key."""
    key = "preference.drink"
    try:
        async with memory_app(settings) as app:
            first = await app.service.handle_command(command("save_memory", {
                "content": "I drink green tea", "category": "preference", "memory_key": key}))
            assert first.ok, first.error
            assert app.service.portability is not None
            exported = await app.service.portability._record("memory", "alice", uuid.UUID(first.result["memory_id"]))
            assert exported is not None
            assert (await purge(app, "alice")).ok
            await asyncio.sleep(0.01)  # another creation time
            again = await app.service.handle_command(command("save_memory", {
                "content": "I drink black coffee", "category": "preference", "memory_key": key}))
            assert again.ok and again.result["memory_id"] == first.result["memory_id"], again
            restored = await app.service.handle_command(command("restore_records", {
                "records": [exported.model_dump(mode="json")], "source_user": "alice"}))
            assert restored.ok, restored.error
            rows = await _keyed_rows(app, "alice", key)
            assert len([r for r in rows if r[1] == "active"]) == 1, rows  # one memory per key: restored onto it
    finally:
        await _cleanup(settings)


async def test_a_purge_drops_the_texts_held_by_the_embedders_own_single_text_cache(settings: MemorySettings) -> None:
    """Under the primed vectors, the embedder itself (MiniLMEmbedder) keeps an LRU of single-text
    embeddings keyed by the plaintext (a one-sentence save that missed the embedding cache, every
    recall query): a purge clears it too."""
    text = "I live at 12 Elm Street, Leeds"
    query = "where does alice live these days"

    def single_text_caches(models: Any) -> list[dict[str, Any]]:
        out, seen, todo = [], set(), [models.embedder]
        while todo:
            obj = todo.pop()
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            cache = vars(obj).get("_cache") if hasattr(obj, "__dict__") else None
            if cache is not None:
                out.append(cache)
            todo += [vars(obj).get("inner"), vars(obj).get("_inner")] if hasattr(obj, "__dict__") else []
        return out

    try:
        async with memory_app(settings) as app:
            saved = await app.service.handle_command(command("save_memory", {"content": text}))
            assert saved.ok, saved.error
            from contracts.memory import Recall
            await app.service.recall("alice", Recall(query=query, limit=5))
            caches = single_text_caches(app.service.encoders)
            assert caches, "no single-text cache under the embedder (test set-up)"
            held_before = {t for c in caches for t in c if "Elm Street" in t or "alice live" in t}
            assert held_before, held_before
            assert (await purge(app, "alice")).ok
            held = {t for c in caches for t in c if "Elm Street" in t or "alice live" in t}
            assert not held, held
    finally:
        await _cleanup(settings)


async def test_a_round_requeueing_a_stale_source_waits_for_that_sources_round_without_a_deadlock(
        infra: Any) -> None:
    """X's round deletes the stale edge S->X and re-queues S; S's own round (here with no
    neighbours, as the give-up ``set_similar(task, None)`` runs) deletes S's edges. Both lock S's
    node before S's queue row or any edge row, so one waits for the other — no lock cycle (which
    Postgres would break with 'deadlock detected'). S's round is run statement by statement as
    set_similar runs it, on its own connection, holding its locks while X's round starts."""
    from datetime import UTC, datetime

    from contracts.envelope import EventEnvelope
    from contracts.graph import MEMORY_AGGREGATE, SimilarMemory, SimilarMemoryList
    from contracts.memory import MemoryState, MemoryStatus
    from kit.pg import create_pool
    from services.graph.adapters.pg_store import PgGraphStore
    from services.graph.application.ports import SimilarTask
    from services.graph.application.projection import GraphProjection
    from services.graph.domain.model import memory_node_id

    pool = await create_pool(infra.database_url, max_size=4)
    s = "grv_" + uuid.uuid4().hex[:8]
    try:
        store = PgGraphStore(pool, s)
        await store.migrate(owner="test")
        projection = GraphProjection(store)
        at = datetime(2026, 11, 1, tzinfo=UTC)
        x = MemoryState(id=uuid.uuid4(), tenant="t", project="p", content="green tea", version=1,
                        status=MemoryStatus.ACTIVE, created_at=at, updated_at=at)
        other = MemoryState(id=uuid.uuid4(), tenant="t", project="p", content="black coffee", version=1,
                            status=MemoryStatus.ACTIVE, created_at=at, updated_at=at)
        seq = 0

        async def project(state: MemoryState) -> None:
            nonlocal seq
            seq += 1
            await projection.project(EventEnvelope(
                event_id=uuid.uuid4(), type="x", occurred_at=at, tenant="t", aggregate=MEMORY_AGGREGATE,
                aggregate_id=str(state.id), correlation_id="t", causation_id="t", data=state.model_dump(mode="json")),
                seq, "graph-test")

        src = MemoryState(id=uuid.uuid4(), tenant="t", project="p", content="tea every morning", version=1,
                          status=MemoryStatus.ACTIVE, created_at=at, updated_at=at)
        for st in (x, other, src):
            await project(st)
        X, S = memory_node_id(x.id), memory_node_id(src.id)
        # S's list holds X weighed against X's version 1; then X changes (version 2, queued)
        await pool.execute(f"INSERT INTO {s}.edges (tenant, source, target, type, weight, target_version)"
                           f" VALUES ('t', $1, $2, 'similar', 0.9, 1)", S, X)
        await pool.execute(f"DELETE FROM {s}.similar_queue")
        await project(x.model_copy(update={"version": 2, "content": "tax return"}))
        await pool.execute(f"INSERT INTO {s}.similar_queue (tenant, memory_id, project, version)"
                           f" VALUES ('t', $1, 'p', 1) ON CONFLICT DO NOTHING", S)

        s_conn = await pool.acquire()
        s_tx = s_conn.transaction()
        await s_tx.start()
        try:
            # X's round (its new neighbour is O; S's edge into it is stale: deleted, then S requeued)
            found = SimilarMemoryList(found=True, similar=[SimilarMemory(memory_id=other.id, score=0.8)], version=2)

            # S's round, as set_similar(S_task, None) runs: its own node first (even with no
            # neighbours), then its queue row ...
            await s_conn.fetch(f"SELECT id FROM {s}.nodes WHERE tenant = 't' AND id = ANY($1::text[])"
                               f' ORDER BY id COLLATE "C" FOR UPDATE', [S])
            await s_conn.fetchval(f"SELECT version FROM {s}.similar_queue WHERE tenant = 't' AND memory_id = $1"
                                  f" FOR UPDATE", S)
            # ... X's round runs meanwhile: it locks S's node (a stale source) before any edge row, so it waits
            x_round = asyncio.ensure_future(store.set_similar(SimilarTask("t", X, "p", 2, 0), found, offer_limit=10))
            await asyncio.sleep(1.0)
            assert not x_round.done(), "X's round did not wait for S's node (set-up)"
            # ... then S's round deletes its own edges (X's round has not touched them) and commits
            await asyncio.wait_for(s_conn.execute(
                f"DELETE FROM {s}.edges WHERE tenant = 't' AND source = $1 AND type = 'similar'", S), 10)
            await s_tx.commit()
            assert await asyncio.wait_for(x_round, 10) is True  # then X's round, no deadlock either way
        finally:
            try:
                await s_tx.rollback()
            except Exception:  # noqa: BLE001
                pass
            await pool.release(s_conn)
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        await pool.close()


async def test_a_save_between_the_restores_identity_check_and_its_history_read_is_not_forgotten(
        settings: MemorySettings) -> None:
    """The restore decides 'beside' on the history it reads once and appends with that history's
    last sequence as the expected one: a save of the same content landing right after the read (the
    id is free after the purge) makes the append fail (conflict, retry the import), never puts the
    record's FORGOTTEN version onto the user's new memory; the retried import restores it beside."""
    A = "My locker code at the gym is 4417"
    try:
        async with memory_app(settings) as app:
            first = await app.service.handle_command(command("save_memory", {"content": A}))
            assert first.ok, first.error
            assert (await app.service.handle_command(command("forget_memory", {"memory_id": first.result["memory_id"]}))).ok
            portability = app.service.portability
            assert portability is not None
            exported = await portability._record("memory", "alice", uuid.UUID(first.result["memory_id"]))
            assert (await purge(app, "alice")).ok
            events = portability.events
            real_history = events.history
            saved: list[Any] = []

            async def history_then_a_save(subject: str) -> Any:
                found = await real_history(subject)
                if not saved:  # the user's save lands right after the restore read the (empty) history
                    saved.append(await app.service.handle_command(command("save_memory", {"content": A})))
                return found

            events.history = history_then_a_save  # type: ignore[method-assign]
            try:
                restored = await app.service.handle_command(command("restore_records", {
                    "records": [exported.model_dump(mode="json")], "source_user": "alice"}))
            finally:
                events.history = real_history  # type: ignore[method-assign]
            assert saved and saved[0].ok and saved[0].result["created"], saved
            rows = await app.store.pool.fetch(
                f"SELECT id, status FROM {app.store.s}.memories WHERE tenant = 'alice' AND content = $1", A)
            new = [r["status"] for r in rows if str(r["id"]) == saved[0].result["memory_id"]]
            assert new == ["active"], (rows, restored)
            (item,) = restored.result["items"]  # the restore's first append found the subject taken: retry it
            assert item["status"] == "error" and item["error"]["code"] == "conflict", item
            again = await app.service.handle_command(command("restore_records", {
                "records": [exported.model_dump(mode="json")], "source_user": "alice"}))
            assert again.result["items"][0]["status"] == "restored"  # beside the user's new memory
            statuses = sorted(r["status"] for r in await app.store.pool.fetch(
                f"SELECT status FROM {app.store.s}.memories WHERE tenant = 'alice' AND content = $1", A))
            assert statuses == ["active", "forgotten"]
    finally:
        await _cleanup(settings)
