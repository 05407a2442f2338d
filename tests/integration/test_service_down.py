"""While the memory service is down, a caller gets an honest answer at once: a write accepted into
the durable command stream is reported as queued (and applied exactly once when the service is
back), and a read is refused as unavailable — nobody waits out a 15-second timeout."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from contracts.memory import Recall, SaveMemory
from contracts.subjects import MEMORY
from kit.bus import Bus
from kit.client import Client, ServiceFailure
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as nats_entry
from services.memory.main import memory_app

pytestmark = pytest.mark.integration


async def test_queued_while_down_applied_once_when_back(infra, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = MemorySettings(home=tmp_path, nats_url=infra.nats_url, database_url=infra.database_url,
                              namespace=infra.fresh_namespace(), memory_schema="down_" + uuid.uuid4().hex[:8])
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-test-down")
    try:
        await bus.ensure_streams()
        client = Client(bus, command_timeout_s=15)
        assert not await bus.service_alive(MEMORY)
        key = "queued-" + uuid.uuid4().hex
        started = time.monotonic()
        with pytest.raises(ServiceFailure) as queued:
            await client.send("alice", SaveMemory(content="saved while the memory service was down"), key=key)
        waited = time.monotonic() - started
        assert queued.value.error.code == "accepted" and key in queued.value.error.message
        print(f"queued answer after {waited:.2f}s")
        with pytest.raises(ServiceFailure) as unavailable:
            await client.ask("alice", Recall(query="memory service down"))
        assert unavailable.value.error.code == "unavailable"

        async with memory_app(settings) as app:
            stop = asyncio.Event()
            tasks = nats_entry.start(app.bus, app.service, stop)
            await nats_entry.serve_queries(app.bus, app.service)
            assert await bus.service_alive(MEMORY)
            outcome = await client.send("alice", SaveMemory(content="saved while the memory service was down"), key=key)
            assert outcome.memory_id  # the queued command's own outcome
            found = await client.ask("alice", Recall(query="saved while the memory service was down", limit=10))
            assert [h.memory.content for h in found.hits].count("saved while the memory service was down") == 1
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await app.bus.delete_streams()
    finally:
        await bus.close()
