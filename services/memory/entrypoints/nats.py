"""NATS entrypoints of the memory service: its command consumer and query answers (kit's
skeleton, over the service's handler tables) and its projectors."""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg

from contracts.envelope import EventEnvelope
from contracts.subjects import MEMORY
from kit.bus import Bus
from kit.service import ServiceRuntime
from services.memory.application.service import PROJECTOR, MemoryService

SHARED_PROJECTOR_NAME = "shared-projector"
# Commands on different memories are independent, and writes to one memory race safely
# (optimistic concurrency on its subject), so a batch is handled this many at a time.
COMMAND_CONCURRENCY = 8


def start(bus: Bus, service: MemoryService, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    """Start the consumers as tasks; query subscriptions are set up by ``serve_queries``."""

    def projecting(checkpoint: str):  # type: ignore[no-untyped-def]
        async def on_event(msg: Msg) -> None:
            event = EventEnvelope.model_validate_json(msg.data)
            await service.project_event(event, msg.metadata.sequence.stream, checkpoint)

        return on_event

    async def prepare_events(msgs: list[Msg]) -> None:
        batch = []
        for msg in msgs:
            try:
                batch.append((EventEnvelope.model_validate_json(msg.data), msg.metadata.sequence.stream))
            except ValueError:
                continue
        await service.prime_events(batch)

    names = bus.names
    runtime: ServiceRuntime = service.runtime
    return [
        runtime.start_commands(bus, stop, prepare=service.prime_saves, concurrency=COMMAND_CONCURRENCY),
        asyncio.create_task(
            bus.consume(names.projector(MEMORY, "memory"), projecting(PROJECTOR), stop, prepare=prepare_events,
                        after_batch=service.flush_checkpoints)
        ),
        asyncio.create_task(
            bus.consume(names.projector(MEMORY, "shared", name=SHARED_PROJECTOR_NAME),
                        projecting(f"{MEMORY}-{SHARED_PROJECTOR_NAME}"), stop)
        ),
    ]


async def serve_queries(bus: Bus, service: MemoryService) -> list[object]:
    return await service.runtime.serve_queries(bus)
