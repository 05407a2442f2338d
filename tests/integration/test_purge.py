"""`engram purge --user U --yes` leaves nothing of U in any store, touches no one else, and a
replay does not bring anything back: every table of every Postgres schema, every message of the
install's streams and the vector index are searched for U's id and for a marker from their content.

Runs its own stack (in its own database) so that it can stop it to read the embedded vector shard
and replay offline."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from contracts.envelope import CommandEnvelope
from contracts.subjects import Names
from deploy.stack import Stack, StackOptions
from kit.bus import Bus

pytestmark = pytest.mark.integration


async def _sql(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def purge_stack(infra, tmp_path_factory) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    database = "engram_purge_" + uuid.uuid4().hex[:8]
    asyncio.run(_sql(infra.admin_database_url, f'CREATE DATABASE "{database}"'))
    base, _, _ = infra.admin_database_url.rpartition("/")
    options = StackOptions(
        home=tmp_path_factory.mktemp("purge-home"), nats_url=infra.nats_url, database_url=f"{base}/{database}",
        namespace=infra.fresh_namespace(), gateway_port=0, auth_port=0,
        extra_env={"ENGRAM_RATE_LIMIT_PER_MINUTE": "100000", "ENGRAM_RATE_LIMIT_BURST": "10000"},
    )
    stack = Stack(options, say=lambda _: None)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()
        asyncio.run(_drop(infra.nats_url, options.namespace))
        asyncio.run(_sql(infra.admin_database_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


async def _drop(nats_url: str, namespace: str) -> None:
    bus = await Bus.connect(nats_url, Names(namespace), name="engram-test-cleanup")
    try:
        await bus.delete_streams()
    finally:
        await bus.close()


def engram(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENGRAM_NATS_URL": stack.nats_url, "ENGRAM_NAMESPACE": stack.o.namespace,
           "ENGRAM_DATABASE_URL": stack.database_url, "ENGRAM_HOME": str(stack.o.home)}
    done = subprocess.run([sys.executable, "-m", "deploy", *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"engram {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


async def postgres_hits(database_url: str, needles: list[str]) -> dict[str, int]:
    """For each needle: the rows of every table of every (non-system) schema whose text holds it."""
    hits = dict.fromkeys(needles, 0)
    for (_, needle), n in (await postgres_rows(database_url, needles)).items():
        hits[needle] += n
    return hits


async def postgres_rows(database_url: str, needles: list[str]) -> dict[tuple[str, str], int]:
    """(schema.table, needle) → the rows of that table whose text holds the needle (non-zero only)."""
    conn = await asyncpg.connect(database_url)
    try:
        tables = await conn.fetch(
            """SELECT table_schema, table_name FROM information_schema.tables
               WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')""")
        assert {t["table_schema"] for t in tables} >= {"memory", "auth", "extractor"}
        rows: dict[tuple[str, str], int] = {}
        for t in tables:
            for needle in needles:
                n = await conn.fetchval(
                    f'SELECT count(*) FROM "{t["table_schema"]}"."{t["table_name"]}" AS r '
                    "WHERE position($1 in r::text) > 0", needle)
                if n:
                    rows[(f'{t["table_schema"]}.{t["table_name"]}', needle)] = int(n)
        return rows
    finally:
        await conn.close()


async def settled(stack: Stack, timeout: float = 120.0) -> None:
    """Wait until the install is quiet: every consumer of the event and command streams has
    nothing pending or unacknowledged, and the graph's similar-edge queue is empty. The rows the
    asynchronous projections and the graph's similar rounds write (graph nodes, edges, the queue
    itself) move on their own after a write has been answered; a count taken before they settle
    is not a count of what the user has."""
    names = Names(stack.o.namespace)
    bus = await Bus.connect(stack.nats_url, names, name="engram-test-settle")
    conn = await asyncpg.connect(stack.database_url)
    deadline, quiet = time.monotonic() + timeout, 0
    try:
        while quiet < 2:  # quiet on two looks in a row, 0.3 s apart: a round may queue another
            busy = [f"{c.stream_name}/{c.name}" for stream in (names.events_stream, names.commands_stream)
                    for c in await bus.js.consumers_info(stream) if c.num_pending or c.num_ack_pending]
            queued = await conn.fetchval("SELECT count(*) FROM graph.similar_queue")
            quiet = quiet + 1 if not busy and not queued else 0
            assert time.monotonic() < deadline, f"not settled in {timeout}s: {busy}, {queued} similar rounds queued"
            await asyncio.sleep(0.3)
    finally:
        await conn.close()
        await bus.close()


async def stream_hits(nats_url: str, namespace: str, needles: list[str]) -> dict[str, int]:
    """For each needle: the messages of the install's streams (events, commands, dead letters)
    whose subject or data holds it."""
    from nats.js.errors import NotFoundError

    names = Names(namespace)
    bus = await Bus.connect(nats_url, names, name="engram-test-scan")
    hits = dict.fromkeys(needles, 0)
    try:
        for stream in (names.events_stream, names.commands_stream, names.dead_letter_stream):
            seq = 1
            while True:
                try:
                    raw = await bus.js.get_msg(stream, seq=seq, subject=f"{namespace}.>", next=True)
                except NotFoundError:
                    break
                text = (raw.subject or "") + (raw.data or b"").decode("utf-8", "replace")
                for needle in needles:
                    hits[needle] += needle in text
                seq = int(raw.seq or seq) + 1
    finally:
        await bus.close()
    return hits


async def dead_letter(nats_url: str, namespace: str, tenant: str, marker: str) -> None:
    """A dead-lettered command of the user (as the memory service's consumer would leave one)."""
    names = Names(namespace)
    bus = await Bus.connect(nats_url, names, name="engram-test-dlq")
    try:
        env = CommandEnvelope(command_id=f"dead-{uuid.uuid4().hex}", type="save_memory", tenant=tenant,
                              payload={"content": f"never handled {marker}"})
        await bus.js.publish(names.dead_letter(names.commands_stream, "memory-commands"), env.model_dump_json().encode(),
                             stream=names.dead_letter_stream)
    finally:
        await bus.close()


def _wait_processed(http: httpx.Client, log_id: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = http.get(f"/daily-logs/{log_id}").json()
        if found.get("found") and found["log"]["processing_status"] == "processed":
            return
        time.sleep(0.5)
    raise AssertionError(f"log {log_id} was not processed in {timeout}s")


def test_a_purge_leaves_nothing_of_the_user_anywhere(purge_stack: Stack) -> None:
    stack = purge_stack
    marker, other_marker = "PURGEME" + uuid.uuid4().hex[:8], "KEEPME" + uuid.uuid4().hex[:8]
    victim = stack.create_key(None, "victim", ["memory:read", "memory:write", "memory:maintenance"])
    bystander = stack.create_key(None, "bystander")
    user, other = victim["view"]["user_id"], bystander["view"]["user_id"]
    stack.create_user("victim-" + uuid.uuid4().hex[:6], "correct horse battery staple", user_id=user)  # a login too

    def client(key: str) -> httpx.Client:
        return httpx.Client(base_url=stack.gateway_url + "/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60)

    with client(victim["key"]) as http:
        saved = http.post("/memories/bulk", json={"memories": [
            {"content": f"Grows tomatoes {marker}", "context": f"asked about {marker}"},
            {"content": f"Plays the cello {marker}", "category": "skill", "memory_key": "skill.cello"},
            {"content": f"Old fact {marker}", "project": "attic"}]}, headers={"Idempotency-Key": f"purge-{marker}"})
        assert saved.json()["saved"] == 3, saved.text
        http.post("/memories/update", json={"memory_key": "skill.cello", "content": f"Plays the cello well {marker}"})
        http.post("/memories/forget", json={"memory_id": saved.json()["results"][2]["memory_id"]})
        http.post("/shared-memories", json={"title": f"Picnic {marker}", "event": f"We had a picnic {marker}"})
        log = http.post("/daily-logs", json={"log_date": "2024-05-01", "turns": [
            {"speaker": "user", "text": f"I started learning Portuguese {marker} and I love it."}]}).json()
        _wait_processed(http, log["id"])
        assert http.post("/recall", json={"query": "tomatoes"}).json()["hits"]
    with client(bystander["key"]) as http:
        assert http.post("/memories", json={"content": f"Collects stamps {other_marker}"}).status_code == 201
    asyncio.run(dead_letter(stack.nats_url, stack.o.namespace, user, marker))

    needles = [user, marker, other, other_marker]
    asyncio.run(settled(stack))  # the bystander's graph node, edges and similar round written: none moves below
    assert asyncio.run(cached_entries(stack.database_url, user)) > 0
    bystanders = asyncio.run(cached_entries(stack.database_url, other))
    before_rows = asyncio.run(postgres_rows(stack.database_url, needles))
    before_pg = asyncio.run(postgres_hits(stack.database_url, needles))
    before_streams = asyncio.run(stream_hits(stack.nats_url, stack.o.namespace, needles))
    assert before_pg[user] and before_pg[marker] and before_streams[user] and before_streams[marker]

    victim_digests = asyncio.run(memory_digests_of(stack.database_url, user))
    purged = engram(stack, "purge", "--user", user, "--yes")
    assert "Purged" in purged.stderr
    asyncio.run(settled(stack))

    after_pg = asyncio.run(postgres_hits(stack.database_url, needles))
    # the embedding cache names no user: its entries of the victim's texts are found by their hashes
    assert asyncio.run(cached_entries(stack.database_url, user, digests=victim_digests)) == 0
    assert asyncio.run(cached_entries(stack.database_url, other)) == bystanders
    after_streams = asyncio.run(stream_hits(stack.nats_url, stack.o.namespace, needles))
    assert (after_pg[user], after_pg[marker]) == (0, 0), after_pg
    assert (after_streams[user], after_streams[marker]) == (0, 0), after_streams
    after_rows = asyncio.run(postgres_rows(stack.database_url, needles))
    moved = {k: (before_rows.get(k, 0), after_rows.get(k, 0)) for k in {*before_rows, *after_rows}
             if k[1] in (other, other_marker) and before_rows.get(k, 0) != after_rows.get(k, 0)}
    assert not moved, f"the bystander's rows changed across the purge (table, needle): (before, after): {moved}"
    assert after_pg[other] == before_pg[other] and after_pg[other_marker] == before_pg[other_marker]  # untouched
    assert after_streams[other] == before_streams[other] and after_streams[other_marker] == before_streams[other_marker]
    with client(victim["key"]) as http:
        assert http.get("/memories").status_code == 401
    with client(bystander["key"]) as http:
        assert [m["content"] for m in http.get("/memories").json()["memories"]] == [f"Collects stamps {other_marker}"]

    stack.stop()  # the embedded vector shard belongs to the memory process: read it with the stack down
    assert vector_points(stack.o.home, stack.o.namespace, user) == 0
    assert vector_points(stack.o.home, stack.o.namespace, other) == 1

    engram(stack, "replay", "memory", "--yes")  # a replay after the purge brings nothing back
    engram(stack, "replay", "extractor")
    engram(stack, "replay", "graph", "--yes")
    replayed = asyncio.run(postgres_hits(stack.database_url, needles))
    assert (replayed[user], replayed[marker]) == (0, 0), replayed
    assert replayed[other_marker] >= 1
    assert vector_points(stack.o.home, stack.o.namespace, user) == 0


async def memory_digests_of(database_url: str, tenant: str) -> list[bytes]:
    """The embedding cache's digests of the texts of the tenant's memories (their current versions)."""
    from services.memory.adapters.pg_portability import PgPortability
    from services.memory.search.vector_cache import memory_digests

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        states = await PgPortability(pool, "memory").memory_states(tenant, None, 1_000)
        return sorted({d for s in states for d in memory_digests(s)})
    finally:
        await pool.close()


async def cached_entries(database_url: str, tenant: str, digests: list[bytes] | None = None) -> int:
    """Entries of the memory service's embedding cache under ``digests`` (default: those of the
    tenant's memories now)."""
    digests = await memory_digests_of(database_url, tenant) if digests is None else digests
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM memory.embedding_cache WHERE digest = ANY($1::bytea[])",
                                       digests))
    finally:
        await conn.close()


def vector_points(home: Path, namespace: str, tenant: str) -> int:
    """The points of ``tenant`` in the embedded vector shard (active or not)."""
    from services.memory.adapters.vector_factory import build_vector_index
    from services.memory.search.ports import SearchFilter

    async def count() -> int:
        index: Any = build_vector_index(qdrant_url=None, path=home / "qdrant", dim=384, collection="memories",
                                        api_key=None, owner=namespace)
        try:
            await index.ensure()
            return int(await index.count(SearchFilter(tenant=tenant, status=None)))
        finally:
            await index.close()

    return asyncio.run(count())


def test_the_purge_report_is_json_free_of_content() -> None:
    from contracts.portability import PurgeReport, PurgeResult

    report = PurgeReport(user_id="u1", services=[PurgeResult(service="memory", removed={"memories": 2})], events=3)
    assert json.loads(report.model_dump_json())["services"][0]["removed"] == {"memories": 2}
