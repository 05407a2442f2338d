"""A replay keeps the vector index and brings it to what the log says, point by point.

Points whose fingerprint is already right are left alone (nothing embedded, nothing written); a
point missing, written without a fingerprint or of an older version is written again; a point no
memory owns is swept. Afterwards the index holds exactly what a replay that drops it
(``rebuild_index=True``) writes: the same ids, payloads and vectors.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe

from contracts.envelope import CommandEnvelope
from kit.events import typed
from services.memory.config import MemorySettings
from services.memory.domain import model
from services.memory.domain.keywords import SparseVector
from services.memory.main import memory_app
from services.memory.replay import rebuild
from services.memory.search.indexing import point_for
from services.memory.search.ports import FINGERPRINT_FIELD, VectorPoint
from tests.integration.test_embedding_cache import count_models

pytestmark = pytest.mark.integration


def cmd(type_: str, payload: dict[str, Any]) -> CommandEnvelope:
    return CommandEnvelope(command_id=uuid.uuid4().hex, type=type_, tenant="dora", payload=payload)


async def index_dump(app: Any) -> dict[str, tuple[dict[str, Any], list[float], dict[int, float]]]:
    """Every point of the embedded shard: payload, dense vector (rounded), keyword vector."""
    shard = app.index._require()
    out: dict[str, tuple[dict[str, Any], list[float], dict[int, float]]] = {}
    offset: Any = None
    while True:
        page, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=1000, with_payload=True, with_vector=True))
        for record in page:
            sparse = record.vector.get("keywords")
            out[str(record.id)] = (
                dict(record.payload),
                np.round(np.asarray(record.vector["dense"], np.float32), 5).tolist(),
                dict(zip(sparse.indices, np.round(sparse.values, 5).tolist(), strict=True)) if sparse else {},
            )
        if offset is None:
            return out


@pytest.fixture
async def settings(infra, tmp_path: Path) -> AsyncIterator[MemorySettings]:  # type: ignore[no-untyped-def]
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="rs_" + uuid.uuid4().hex[:8])
    try:
        yield settings
    finally:
        async with memory_app(settings) as app:
            await app.bus.delete_streams()
            await app.store.pool.execute(f"DROP SCHEMA IF EXISTS {settings.memory_schema} CASCADE")


async def test_a_replay_keeps_the_right_points_and_repairs_the_rest(settings: MemorySettings) -> None:
    async with memory_app(settings) as app:
        s = app.service
        ids = []
        for payload in ({"content": "I like jasmine tea"}, {"content": "My sister lives in Osaka", "project": "family"},
                        {"content": "我家的猫叫小白"}, {"content": "Bought a red bike", "context": "Talking about commuting"},
                        {"category": "goal", "memory_key": "goal.run", "content": "Run 10k"}):
            ids.append((await s.handle_command(cmd("save_memory", payload))).result["memory_id"])
        await s.handle_command(cmd("save_memory", {"category": "goal", "memory_key": "goal.run",
                                                   "content": "Marathon training for Berlin"}))
        temp = (await s.handle_command(cmd("save_memory", {"content": "Temporary note"}))).result["memory_id"]
        await s.handle_command(cmd("forget_memory", {"memory_id": temp}))
        live = await index_dump(app)
        assert len(live) == 5 and all(FINGERPRINT_FIELD in p for p, _, _ in live.values())

        # an unchanged log: every point is right; nothing is embedded or written
        embedder, late = count_models(app)
        report = await rebuild(app)
        assert report.details == {"points_kept": 5, "points_written": 0, "points_swept": 0}
        assert embedder.texts == 0
        assert await index_dump(app) == live

        # damage: a point deleted, one written before fingerprints (no fingerprint, a wrong vector),
        # one of an older state (its fingerprint differs), one of no memory at all
        states = {i: await app.store.get("dora", uuid.UUID(i)) for i in ids}
        await app.index.delete([ids[0]])
        old = states[ids[1]]
        await app.index.upsert([point_for(old, [1.0] + [0.0] * (app.index.dim - 1))])
        bike = states[ids[3]]
        older = bike.model_copy(update={"content": "Bought a blue bike", "version": bike.version - 1 or 1})
        await app.index.upsert([point_for(older, [0.0, 1.0] + [0.0] * (app.index.dim - 2),
                                          fingerprint=s.encoders.fingerprint(older))])
        stray = str(uuid.uuid4())
        await app.index.upsert([VectorPoint(stray, [1.0] * app.index.dim, SparseVector((), ()),
                                            {"tenant": "dora", "status": "active", FINGERPRINT_FIELD: "x"})])
        report = await rebuild(app)
        assert report.details == {"points_kept": 2, "points_written": 3, "points_swept": 1}
        assert await index_dump(app) == live

        # a replay that drops the index writes the same points
        report = await rebuild(app, rebuild_index=True)
        assert report.details == {"points_kept": 0, "points_written": 5, "points_swept": 0}
        assert await index_dump(app) == live


async def test_a_memory_updated_across_batches_ends_at_its_last_version(settings: MemorySettings) -> None:
    """With one event per batch, a memory's first version is written over the kept last one while
    the next batch reads the index: the last version must still win (the in-flight batch's
    fingerprints count before what the index says)."""
    async with memory_app(settings) as app:
        s = app.service
        for content in ("Run 5k", "Run 10k", "Half marathon in spring", "Marathon training for Berlin"):
            await s.handle_command(cmd("save_memory", {"category": "goal", "memory_key": "goal.run",
                                                       "content": content}))
        live = await index_dump(app)
        (payload, _, _), = live.values()
        assert payload["content"] == "Marathon training for Berlin" and payload["version"] == 4
        report = await rebuild(app, batch=1)
        # versions 1–3 replace the kept point one after the other, version 4 puts it back
        assert report.details == {"points_kept": 0, "points_written": 4, "points_swept": 0}
        assert await index_dump(app) == live


async def test_a_retried_save_projects_what_the_log_holds(settings: MemorySettings) -> None:
    """A save whose first attempt appended its event and died before projecting it, retried (same
    command, a new clock reading): the row and the point are the logged state, so a replay finds
    every point right (found by the fault suite: the retry used to project its own timestamps)."""
    async with memory_app(settings) as app:
        s = app.service
        save = cmd("save_memory", {"content": "Saved through a crash"})
        projection = s.projection
        apply = projection.apply

        async def crash(*args: Any, **kwargs: Any) -> bool:
            raise ConnectionError("killed after the append, before the projection")

        projection.apply = crash  # type: ignore[method-assign]
        with pytest.raises(ConnectionError):
            await s.handle_command(save)
        projection.apply = apply  # type: ignore[method-assign]
        reply = await s.handle_command(save)  # the client's retry, same key
        assert reply.ok
        state = await app.store.get("dora", uuid.UUID(reply.result["memory_id"]))
        logged = await app.bus.last_event(app.bus.names.event("dora", "memory", reply.result["memory_id"]))
        assert logged is not None and state is not None
        assert state == model.state_of(typed(logged[0]))  # the first attempt's timestamps, as the log has them
        report = await rebuild(app)
        assert report.details == {"points_kept": 1, "points_written": 0, "points_swept": 0}
