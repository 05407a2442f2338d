"""Two memory replicas on the embedded engine: each keeps its own vector index, following the log.

Replica 1 handles the commands (and projects them inline into Postgres and its own shard); replica 2
only follows the event log. Its shard ends equal to replica 1's — ids, payloads, vectors — its
recall finds what replica 1 saved, a forget removes the point there too, a purge run by replica 1
reaches replica 2's shard (broadcast), and a replica that starts after a purge it missed sweeps the
purged points before it serves anything.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contracts.envelope import CommandEnvelope
from contracts.memory import Recall
from kit.purge import purge_subject
from services.memory.application.index_follow import IndexFollower
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as nats_entry
from services.memory.main import memory_app
from services.memory.replay import ServiceRunning, ensure_service_stopped, rebuild
from tests.integration.test_replay_index_sync import index_dump

pytestmark = pytest.mark.integration


def cmd(type_: str, payload: dict[str, Any], tenant: str = "erin") -> CommandEnvelope:
    return CommandEnvelope(command_id=uuid.uuid4().hex, type=type_, tenant=tenant, payload=payload)


async def eventually(check: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "replica 2's index did not catch up"
        await asyncio.sleep(0.1)


@pytest.fixture
async def base(infra, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    settings = dict(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                    namespace=infra.fresh_namespace(), memory_schema="mr_" + uuid.uuid4().hex[:8])
    try:
        yield settings
    finally:
        async with memory_app(MemorySettings(**settings)) as app:
            await app.bus.delete_streams()
            await app.store.pool.execute(f"DROP SCHEMA IF EXISTS {settings['memory_schema']} CASCADE")


async def test_a_second_replica_keeps_its_own_index_equal_to_the_log(base: dict[str, Any]) -> None:
    one, two = MemorySettings(**base, memory_replica="1"), MemorySettings(**base, memory_replica="2")
    assert one.vector_path != two.vector_path
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    async with memory_app(one) as a, memory_app(two) as b:
        try:
            follow_a = IndexFollower(a.service.projection, a.store, a.index)
            follow_b = IndexFollower(b.service.projection, b.store, b.index)
            tasks += nats_entry.start(a.bus, a.service, stop)
            tasks += await nats_entry.start_index_follower(a.bus, a.service, follow_a, "1", stop, from_start=True)
            tasks += await nats_entry.start_index_follower(b.bus, b.service, follow_b, "2", stop, from_start=True)
            with pytest.raises(ServiceRunning):  # a replay refuses while a follower consumes
                await asyncio.sleep(1.5)
                await ensure_service_stopped(b.bus)

            s = a.service
            await s.handle_command(cmd("save_memory", {"content": "I like jasmine tea"}))
            await s.handle_command(cmd("save_memory", {"content": "My sister lives in Osaka", "project": "family"}))
            await s.handle_command(cmd("save_memory", {"category": "goal", "memory_key": "goal.run", "content": "Run 10k"}))
            await s.handle_command(cmd("save_memory", {"category": "goal", "memory_key": "goal.run",
                                                       "content": "Marathon training for Berlin"}))
            temp = (await s.handle_command(cmd("save_memory", {"content": "Temporary note"}))).result["memory_id"]
            await s.handle_command(cmd("forget_memory", {"memory_id": temp}))
            await s.handle_command(cmd("save_memory", {"content": "Frank collects vinyl records"}, tenant="frank"))

            async def equal() -> bool:
                return len(await index_dump(a)) == 4 and await index_dump(b) == await index_dump(a)

            await eventually(equal)
            # replica 1 projected its own commands inline, so its follower mostly finds them right (it may
            # briefly write an older state while a newer one is being committed, then the newer again)
            assert follow_a.kept >= 1 and follow_b.written >= 4
            hits = (await b.service.recall("erin", Recall(query="marathon", limit=3))).hits
            assert hits and hits[0].memory.content == "Marathon training for Berlin"

            # a purge run by replica 1 reaches replica 2's shard
            names = a.bus.names
            await purge_subject(a.bus, names.events_stream, f"{names.namespace}.evt.frank.>")
            done = await s.handle_command(CommandEnvelope(command_id=uuid.uuid4().hex, type="purge_user",
                                                          tenant="admin", payload={"user_id": "frank"}))
            assert done.ok

            async def purged() -> bool:
                return all(p["tenant"] != "frank" for p, _, _ in (await index_dump(b)).values())

            await eventually(purged)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_replica_that_missed_a_purge_sweeps_it_before_serving(base: dict[str, Any]) -> None:
    two = MemorySettings(**base, memory_replica="2")
    async with memory_app(MemorySettings(**base, memory_replica="1")) as a, memory_app(two) as b:
        await a.service.handle_command(cmd("save_memory", {"content": "Gone soon: a note of Gina's"}, tenant="gina"))
        await a.service.handle_command(cmd("save_memory", {"content": "Erin likes hiking"}))
        follow_b = IndexFollower(b.service.projection, b.store, b.index)
        for event_batch in await log_events(a):
            await follow_b.follow(event_batch)
        assert len(await index_dump(b)) == 2
        await a.store.pool.execute(f"DELETE FROM {a.store.s}.memories WHERE tenant = 'gina'")  # as a purge does
        assert await follow_b.sweep() == 1
        assert [p["tenant"] for p, _, _ in (await index_dump(b)).values()] == ["erin"]
        assert await follow_b.sweep() == 0
        # a replay resets the followers: each replica checks its shard from the log's first event
        await b.bus.ensure_consumer(nats_entry.index_follower_spec(b.bus.names, "2"))
        await rebuild(a)
        assert await b.bus.consumer_state(b.bus.names.events_stream, "memory-index-2") is None


async def log_events(app: Any) -> list[list[tuple[Any, int]]]:
    """Every event of the log, as one batch (what a follower's consumer would hand it)."""
    from nats.js import api

    from contracts.envelope import EventEnvelope

    names = app.bus.names
    sub = await app.bus.js.pull_subscribe(f"{names.namespace}.evt.>", stream=names.events_stream,
                                          config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE))
    total = (await sub.consumer_info()).num_pending
    msgs = await sub.fetch(total, timeout=5.0)
    await sub.unsubscribe()
    return [[(EventEnvelope.model_validate_json(m.data), m.metadata.sequence.stream) for m in msgs]]


async def test_two_replicas_saving_one_content_at_once_make_one_memory(base: dict[str, Any]) -> None:
    """Each replica's content lock is its own: the content's identity is what makes the two saves one
    memory (the first event of its aggregate wins; the other save answers with that memory). Saved
    again after a forget, the content is a new memory, again one for both."""
    async with memory_app(MemorySettings(**base, memory_replica="1")) as a, \
            memory_app(MemorySettings(**base, memory_replica="2")) as b:

        async def both(payload: dict[str, Any]) -> list[dict[str, Any]]:
            replies = await asyncio.gather(a.service.handle_command(cmd("save_memory", payload)),
                                           b.service.handle_command(cmd("save_memory", payload)))
            assert all(r.ok for r in replies), [r.error for r in replies]
            return [r.result for r in replies]

        async def active(content: str) -> list[uuid.UUID]:
            rows = await a.store.pool.fetch(f"SELECT id FROM {a.store.s}.memories WHERE tenant = 'erin' "
                                            "AND status = 'active' AND content = $1", content)
            return [r["id"] for r in rows]

        contents = [f"Erin's note number {i}: keep the spare key under the blue pot" for i in range(12)]
        rounds = await asyncio.gather(*(both({"content": c}) for c in contents))
        for content, replies in zip(contents, rounds, strict=True):
            assert len({r["memory_id"] for r in replies}) == 1, replies
            assert sorted(r["created"] for r in replies) == [False, True], replies  # one created it
            assert [str(i) for i in await active(content)] == [replies[0]["memory_id"]]

        first = rounds[0][0]["memory_id"]
        forgotten = await a.service.handle_command(cmd("forget_memory", {"memory_id": first}))
        assert forgotten.ok and forgotten.result["forgotten"]
        again = await both({"content": contents[0]})
        assert len({r["memory_id"] for r in again}) == 1 and again[0]["memory_id"] != first
        assert [str(i) for i in await active(contents[0])] == [again[0]["memory_id"]]
        # changed to another content, the memory leaves its first content's identity free for a new save
        changed = await b.service.handle_command(cmd("update_memory", {"id": again[0]["memory_id"],
                                                                       "content": "The spare key moved to the shed"}))
        assert changed.ok, changed.error
        third = await both({"content": contents[0]})
        assert len({r["memory_id"] for r in third}) == 1
        assert third[0]["memory_id"] not in (first, again[0]["memory_id"]), (third, again, changed.result)
        assert len(await active(contents[0])) == 1
