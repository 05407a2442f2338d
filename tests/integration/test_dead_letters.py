"""Dead letters: a deterministic Postgres error dead-letters a message at once (no retries holding
up the rest); `engram dlq` lists, shows and re-drives dead commands once their cause is fixed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from contracts.envelope import CommandEnvelope
from contracts.subjects import MEMORY, Names
from deploy.dlq import DlqError, dead_letters, get, redrive
from kit.bus import Bus
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as nats_entry
from services.memory.main import memory_app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def wait_for(check: Any, timeout: float = 60.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_a_deterministic_postgres_error_is_dead_lettered_at_once(infra) -> None:  # type: ignore[no-untyped-def]
    names = Names(infra.fresh_namespace())
    bus = await Bus.connect(infra.nats_url, names, name="dlq-test")
    conn = await asyncpg.connect(infra.database_url)
    # the handler writes on a connection of its own: one asyncpg connection runs one statement at a
    # time, and the test polls on ``conn`` while the consumer handles (a shared one failed the
    # handler with "another operation is in progress", a retried error that is not the poison's)
    writer = await asyncpg.connect(infra.database_url)
    table = "dlq_" + uuid.uuid4().hex[:8]
    await conn.execute(f"CREATE TABLE {table} (text text NOT NULL)")
    calls: dict[str, int] = {}
    stop = asyncio.Event()
    try:
        await bus.ensure_streams()
        spec = names.command_consumer("probe")

        async def handler(msg: Any) -> None:
            text = json.loads(msg.data)["text"]
            calls[text] = calls.get(text, 0) + 1
            await writer.execute(f"INSERT INTO {table} VALUES ($1)", text)  # Postgres text cannot hold NUL

        for text in ("first", "bad\x00text", "last"):
            await bus.js.publish(f"{names.namespace}.cmd.probe.write", json.dumps({"text": text}).encode())
        task = asyncio.create_task(bus.consume(spec, handler, stop))
        await wait_for(lambda: conn.fetchval(f"SELECT count(*) = 2 FROM {table}"))
        (dead,) = await wait_for(lambda: dead_letters(bus))
        assert calls == {"first": 1, "bad\x00text": 1, "last": 1}  # handled once: not retried
        assert "CharacterNotInRepertoire" in dead.error and "poison" in dead.error
        assert dead.consumer == "probe-commands" and dead.original_subject.endswith(".cmd.probe.write")
        assert await conn.fetch(f"SELECT text FROM {table} ORDER BY text") == [("first",), ("last",)]
        stop.set()
        await task
    finally:
        stop.set()
        await writer.close()
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.close()
        await bus.delete_streams()
        await bus.close()


def engram(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy", *args], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60, check=False)


async def test_engram_dlq_lists_shows_and_redrives_dead_commands(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="dl_" + uuid.uuid4().hex[:8])
    cli_env = {"ENGRAM_NATS_URL": infra.nats_url, "ENGRAM_NAMESPACE": settings.namespace,
               "ENGRAM_HOME": str(tmp_path / "cli-home")}
    async with memory_app(settings) as app:
        stop = asyncio.Event()
        tasks = nats_entry.start(app.bus, app.service, stop)
        bus, pool, s = app.bus, app.store.pool, app.store.s
        subject = bus.names.command(MEMORY, "save_memory")
        try:
            # 1. not a command at all: dead-lettered at once
            await bus.js.publish(subject, b"{not json")
            # 2. a save while its table is missing (an operator's mistake): retried with backoff,
            #    then dead-lettered after max_deliver attempts
            await pool.execute(f"ALTER TABLE {s}.memories RENAME TO memories_away")
            env = CommandEnvelope(command_id="dlq-" + uuid.uuid4().hex, type="save_memory", tenant="dave",
                                  payload={"content": "The spare key is under the blue flowerpot"})
            await bus.js.publish(subject, env.model_dump_json().encode())
            found = await wait_for(lambda: _two(bus), timeout=90)
            await pool.execute(f"ALTER TABLE {s}.memories_away RENAME TO memories")
            garbage, save = sorted(found, key=lambda d: d.envelope() is not None)
            assert "after 5 attempts" in save.error and "memories" in save.error
            assert save.summary()["command_id"] == env.command_id

            listed = engram(["dlq", "list", "--json"], cli_env)
            assert listed.returncode == 0, listed.stderr
            rows = [json.loads(line) for line in listed.stdout.splitlines()]
            assert {r["id"] for r in rows} == {garbage.id, save.id}
            assert {r["type"] for r in rows} == {None, "save_memory"}
            shown = engram(["dlq", "show", str(save.id)], cli_env)
            assert shown.returncode == 0, shown.stderr
            doc = json.loads(shown.stdout)
            assert doc["message"]["payload"]["content"].startswith("The spare key") and doc["error"] == save.error
            missing = engram(["dlq", "show", "999999"], cli_env)
            assert missing.returncode == 1 and "no dead letter 999999" in missing.stdout

            redriven = engram(["dlq", "redrive", "--all"], cli_env)
            assert redriven.returncode == 0, redriven.stderr
            # the save is handled now, once
            rows = await wait_for(lambda: pool.fetch(f"SELECT id FROM {s}.memories WHERE tenant = 'dave'"))
            assert len(rows) == 1
            # the garbage is dead again (under a new id); the save's dead letter is gone
            again = await wait_for(lambda: dead_letters(bus))
            assert [d.data for d in again] == [b"{not json"] and again[0].id not in (garbage.id, save.id)
            with pytest.raises(DlqError):
                await get(bus, save.id)
            # re-driving the same id twice publishes once (it is gone, and the publish is deduplicated)
            with pytest.raises(DlqError):
                await redrive(bus, save.id)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await bus.delete_streams()


async def _two(bus: Bus) -> list[Any] | None:
    found = await dead_letters(bus)
    return found if len(found) >= 2 else None
