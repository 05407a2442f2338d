"""A purge leaves nothing derived from the user's texts in the embedding cache (its keys are hashes
of texts, its values vectors: a hash confirms what a user wrote, a vector can be partly inverted)
nor in the process's primed vectors; another user who wrote one of the same texts keeps recalling
it (a cache: what the purge took is recomputed when needed), and a replay still rebuilds the same
read models. Real Postgres, NATS and models (the memory service's own adapters)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from contracts.envelope import CommandEnvelope
from contracts.memory import MemoryState, Recall
from kit.purge import purge_subject
from services.memory.adapters.pg_portability import PgPortability
from services.memory.config import MemorySettings
from services.memory.main import memory_app
from services.memory.replay import rebuild
from services.memory.search.indexing import embedding_texts
from services.memory.search.late import late_document
from services.memory.search.vector_cache import memory_digests

pytestmark = pytest.mark.integration

SHARED = {"content": "I like jasmine tea. I drink it every morning."}
PRIVATE = {
    "alice": {"content": "My sister lives in Osaka", "context": "Planning the trip to Japan"},
    "bob": {"content": "Marathon training for Berlin! Long run on Sunday.", "memory_key": "goal.run",
            "category": "goal"},
    "carol": {"content": "我家的猫叫小白", "project": "home"},
}


def save(tenant: str, payload: dict[str, Any]) -> CommandEnvelope:
    return CommandEnvelope(command_id=uuid.uuid4().hex, type="save_memory", tenant=tenant, payload=payload)


async def purge(app: Any, user: str) -> Any:
    """What `engram purge` does in the memory service: the user's events first (kit/purge.py),
    then the service's purge command, sent as the operator."""
    names = app.bus.names
    await purge_subject(app.bus, names.events_stream, f"{names.namespace}.evt.{user}.>")
    return await app.service.handle_command(
        CommandEnvelope(command_id=uuid.uuid4().hex, type="purge_user", tenant="admin", payload={"user_id": user}))


async def states(app: Any, tenant: str) -> list[MemoryState]:
    found: list[MemoryState] = await PgPortability(app.store.pool, app.store.s).memory_states(tenant, None, 100)
    return found


async def cached(app: Any, memories: Iterable[MemoryState]) -> int:
    """Entries of the cache, under any model, derived from the texts of ``memories``."""
    digests = sorted({d for m in memories for d in memory_digests(m)})
    return int(await app.store.pool.fetchval(
        f"SELECT count(*) FROM {app.store.s}.embedding_cache WHERE digest = ANY($1::bytea[])", digests))


def primed(app: Any, memory: MemoryState) -> bool:
    """Whether this process still holds a vector of the memory's texts."""
    models = app.service.encoders
    document = late_document(memory)
    return (any(models.embedder.cached([t]) is not None for t in embedding_texts(memory))
            or models.late_encoder.cached([document]) is not None or models.cache.packed(document) is not None)


async def digest(app: Any) -> tuple[list[Any], list[list[str]]]:
    rows = await app.store.pool.fetch(
        f"SELECT id, tenant, version, status, content_hash, late_tokens FROM {app.store.s}.memories ORDER BY id")
    recalls = []
    for q in ("jasmine tea", "marathon in Berlin", "Osaka", "猫"):
        for tenant in PRIVATE:
            result = await app.service.recall(tenant, Recall(query=q, limit=5))
            recalls.append([str(h.memory.id) for h in result.hits])
    return [tuple(r) for r in rows], recalls


async def test_a_purge_removes_the_users_cached_vectors_and_others_recompute_theirs(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="pc_" + uuid.uuid4().hex[:8])
    try:
        async with memory_app(settings) as app:
            for tenant, private in PRIVATE.items():
                for payload in (SHARED, private):
                    assert (await app.service.handle_command(save(tenant, payload))).ok
            await rebuild(app)  # a replay may cache each memory's dense and keyword vectors too
            alice, bob, carol = [await states(app, t) for t in PRIVATE]
            alice_own, bob_own = [m for m in alice if m.content != SHARED["content"]], \
                [m for m in bob if m.content != SHARED["content"]]
            bobs = await cached(app, bob_own)
            assert await cached(app, alice_own) >= 3 and bobs >= 2  # (at least sentences and late tokens)
            assert all(primed(app, m) for m in alice)

            done = await purge(app, "alice")
            assert done.ok, done.error
            assert done.result["removed"]["memories"] == 2 and done.result["removed"]["embedding_cache"] >= 5
            assert await cached(app, alice) == 0  # her private text's entries and the shared text's
            assert not any(primed(app, m) for m in alice)  # nor in this process's primed vectors
            assert await cached(app, bob_own) == bobs and await states(app, "bob") == bob  # bob untouched
            hits = (await app.service.recall("bob", Recall(query="jasmine tea", limit=5))).hits
            assert hits and hits[0].memory.content == SHARED["content"] and hits[0].memory.id in {m.id for m in bob}

            again = await purge(app, "alice")  # idempotent: nothing left to remove
            assert again.ok and sum(again.result["removed"].values()) == 0

            # interrupted after the cache and the vectors, before the rows: run again, it ends the same
            port = app.service.portability.port
            delete_tenant = port.delete_tenant

            async def crash(tenant: str) -> dict[str, int]:
                raise ConnectionError("the database went away")

            port.delete_tenant = crash
            try:
                with pytest.raises(ConnectionError):  # (the command is redelivered: no outcome is kept)
                    await purge(app, "carol")
            finally:
                port.delete_tenant = delete_tenant
            assert await states(app, "carol") == carol and await cached(app, carol) == 0
            retried = await purge(app, "carol")
            assert retried.ok and retried.result["removed"]["memories"] == 2
            assert await states(app, "carol") == [] and await cached(app, carol) == 0
            assert await cached(app, bob_own) == bobs
            before = await digest(app)

        async with memory_app(settings) as app:  # a replay afterwards: bob's shared text recomputed
            await rebuild(app)
            assert await digest(app) == before
            assert await cached(app, bob) > bobs  # what it recomputed is cached again, for bob
            assert await cached(app, alice_own) == 0 and await cached(app, [m for m in carol if m.project == "home"]) == 0
    finally:
        async with memory_app(settings) as app:
            await app.bus.delete_streams()


async def test_a_purge_reaches_the_cached_vectors_of_versions_since_replaced(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The purge removes the user's events before the memory service runs, so the texts of versions
    since updated or forgotten are in no row and no event: their cache entries are found from the
    digests noted for the user as each version was projected."""
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="pv_" + uuid.uuid4().hex[:8])

    def command(type_: str, payload: dict[str, Any], tenant: str = "alice") -> CommandEnvelope:
        return CommandEnvelope(command_id=uuid.uuid4().hex, type=type_, tenant=tenant, payload=payload)

    try:
        async with memory_app(settings) as app:
            moved = await app.service.handle_command(command("save_memory", {"content": "I live at 12 Elm Street, Leeds"}))
            temp = await app.service.handle_command(command("save_memory", {"content": "My locker code is 4417"}))
            assert moved.ok and temp.ok
            old_versions = await states(app, "alice")
            assert (await app.service.handle_command(command("update_memory", {
                "id": moved.result["memory_id"], "content": "I moved to 34 Oak Avenue, York"}))).ok
            assert (await app.service.handle_command(command("forget_memory", {"memory_id": temp.result["memory_id"]}))).ok
            assert (await app.service.handle_command(command("save_memory", {"content": "I live at 12 Elm Street, Leeds"},
                                                             tenant="dan"))).ok  # dan wrote one of the same texts
            current = await states(app, "alice")
            assert await cached(app, old_versions) >= 4 and await cached(app, current) >= 4  # sentences, late tokens

            done = await purge(app, "alice")
            assert done.ok, done.error
            assert await cached(app, old_versions) == 0 and await cached(app, current) == 0
            assert await app.store.pool.fetchval(
                f"SELECT count(*) FROM {app.store.s}.embedding_cache_owners WHERE tenant = 'alice'") == 0
            hits = (await app.service.recall("dan", Recall(query="Elm Street", limit=3))).hits
            assert hits and hits[0].memory.content == "I live at 12 Elm Street, Leeds"  # recomputed for dan
            again = await purge(app, "alice")
            assert again.ok and sum(again.result["removed"].values()) == 0
    finally:
        async with memory_app(settings) as app:
            await app.bus.delete_streams()
            await app.store.pool.execute(f"DROP SCHEMA IF EXISTS {settings.memory_schema} CASCADE")
