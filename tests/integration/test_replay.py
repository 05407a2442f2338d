"""Replay rebuilds read models equal to the originals: memories, versions, projects, recall."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from contracts.envelope import CommandEnvelope, QueryEnvelope
from contracts.memory import Recall
from services.memory.config import MemorySettings
from services.memory.main import memory_app
from services.memory.replay import ServiceRunning, ensure_service_stopped, rebuild

pytestmark = pytest.mark.integration


def cmd(type_: str, payload: dict) -> CommandEnvelope:  # type: ignore[type-arg]
    return CommandEnvelope(command_id=uuid.uuid4().hex, type=type_, tenant="alice", payload=payload)


async def snapshot(app) -> dict:  # type: ignore[no-untyped-def,type-arg]
    rows = await app.store.pool.fetch(
        f"SELECT id, project, content, context, category, memory_key, version, status, forget_reason, importance, "
        f"late_tokens, alias_keys FROM {app.store.s}.memories ORDER BY id"
    )
    shared = await app.store.pool.fetch(f"SELECT id, title, event, version FROM {app.store.s}.shared_memories ORDER BY id")
    projects = await app.service.handle_query(QueryEnvelope(type="list_projects", tenant="alice", payload={}))
    recalls = {}
    for q in ("tea", "marathon training", "猫", "where does my sister live", "trip to Japan", "what does my dog eat"):
        result = await app.service.recall("alice", Recall(query=q, limit=5))
        recalls[q] = [(str(h.memory.id), h.memory.version) for h in result.hits]
    return {"rows": [dict(r) for r in rows], "shared": [dict(r) for r in shared],
            "projects": [(p["project"], p["memories"]) for p in projects.result["projects"]], "recalls": recalls}


async def test_replay_rebuilds_identical_read_models(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="rp_" + uuid.uuid4().hex[:8])
    async with memory_app(settings) as app:
        try:
            s = app.service
            await s.handle_command(cmd("save_memory", {"content": "I like jasmine tea"}))
            await s.handle_command(cmd("save_memory", {"content": "我家的猫叫小白", "project": "home"}))
            await s.handle_command(cmd("save_memory", {"content": "My sister lives in Osaka", "project": "family",
                                                       "context": "Planning the trip to Japan"}))
            await s.handle_command(cmd("save_memory", {"category": "goal", "memory_key": "goal.run", "content": "Run 10k"}))
            await s.handle_command(cmd("save_memory", {"category": "goal", "memory_key": "goal.run", "content": "Marathon training for Berlin"}))
            await s.handle_command(cmd("save_memory", {"content": "Temporary note to delete"}))
            await s.handle_command(cmd("forget_memory", {"content": "Temporary note to delete"}))
            await s.handle_command(cmd("save_memory", {"content": "My dog Biscuit eats salmon kibble"}))
            await s.handle_command(cmd("save_shared_memory", {"title": "Beach day", "event": "Sunset at Nazaré"}))
            await s.handle_command(cmd("save_shared_memory", {"title": "Beach day", "event": "Sunset and sardines at Nazaré"}))
            before = await snapshot(app)
            await ensure_service_stopped(app.bus)
            seen: list[tuple[int, int]] = []
            report = await rebuild(app, lambda done, total: seen.append((done, total)))
            after = await snapshot(app)
            assert report.events == 10 and seen[-1] == (10, 10)
            assert [r["alias_keys"] for r in after["rows"] if r["alias_keys"]] == [["|dog"]]  # who "my dog" is
            assert after == before
            assert after["recalls"]["marathon training"][0][1] == 2
            assert [r["context"] for r in after["rows"] if r["context"]] == ["Planning the trip to Japan"]
            # every active memory has its late-interaction tokens, rebuilt bit for bit (compared above);
            # a forgotten one keeps none
            assert all((r["late_tokens"] is not None) == (r["status"] == "active") for r in after["rows"])
        finally:
            await app.bus.delete_streams()


async def test_replay_refuses_while_the_service_runs(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from services.memory.entrypoints import nats as nats_entry

    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="rp_" + uuid.uuid4().hex[:8])
    async with memory_app(settings) as app:
        stop = asyncio.Event()
        tasks = nats_entry.start(app.bus, app.service, stop)
        try:
            await asyncio.sleep(1.5)
            with pytest.raises(ServiceRunning):
                await ensure_service_stopped(app.bus)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await app.bus.delete_streams()
