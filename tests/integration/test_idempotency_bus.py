"""Idempotency through the command stream (any client of the bus, not only the gateway): keys are
scoped per tenant and operation, fingerprinted, and a retry after the memory service restarted
still gets the original outcome."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from contracts.envelope import CommandEnvelope
from contracts.memory import SaveMemory, SaveMemoryResult, SaveSharedMemory, UpdateMemory
from kit.client import Client, ServiceFailure
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as nats_entry
from services.memory.main import memory_app

pytestmark = pytest.mark.integration


def settings_for(infra, home: Path, namespace: str, schema: str) -> MemorySettings:  # type: ignore[no-untyped-def]
    return MemorySettings(home=home, nats_url=infra.nats_url, database_url=infra.database_url,
                          namespace=namespace, memory_schema=schema)


async def test_keys_scoped_fingerprinted_and_kept_across_a_restart(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = settings_for(infra, tmp_path, infra.fresh_namespace(), "idem_" + uuid.uuid4().hex[:8])
    k = "bus-key-" + uuid.uuid4().hex
    async with memory_app(settings) as app:
        stop = asyncio.Event()
        tasks = nats_entry.start(app.bus, app.service, stop)
        await nats_entry.serve_queries(app.bus, app.service)
        client = Client(app.bus, command_timeout_s=10)
        first: SaveMemoryResult = await client.send("alice", SaveMemory(content="first body"), key=k)
        again = await client.send("alice", SaveMemory(content="first body"), key=k)
        assert again == first and first.created
        # another body under the same key: refused, through the bus as through REST
        with pytest.raises(ServiceFailure) as refused:
            await client.send("alice", SaveMemory(content="a different body"), key=k)
        assert refused.value.error.code == "idempotency_key_reused"
        # the same raw envelope sent by a client that builds its own (no fingerprint given): refused too
        raw = await app.bus.send_command("memory", "save_memory", CommandEnvelope(
            command_id=k, type="save_memory", tenant="alice", payload={"content": "yet another body"}), timeout=10)
        assert not raw.ok and raw.error.code == "idempotency_key_reused"
        # another tenant, another operation: their own requests
        bob = await client.send("bob", SaveMemory(content="first body"), key=k)
        assert bob.created and bob.memory_id != first.memory_id
        shared = await client.send("alice", SaveSharedMemory(title="Trip", event="Nazaré"), key=k)
        assert shared.created
        updated = await client.send("alice", UpdateMemory(id=first.memory_id, content="first body, revised"), key=k)
        assert updated.version == 2
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    # the service restarts (a crash between the outcome and the caller's reply looks the same)
    async with memory_app(settings) as app:
        stop = asyncio.Event()
        tasks = nats_entry.start(app.bus, app.service, stop)
        await nats_entry.serve_queries(app.bus, app.service)
        client = Client(app.bus, command_timeout_s=10)
        retried = await client.send("alice", SaveMemory(content="first body"), key=k)
        assert retried == first
        retried_update = await client.send("alice", UpdateMemory(id=first.memory_id, content="first body, revised"), key=k)
        assert retried_update == updated
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await app.bus.delete_streams()
