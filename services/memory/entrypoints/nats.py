"""NATS entrypoints of the memory service: its command consumer and query answers (kit's
skeleton, over the service's handler tables) and its projectors (kit's checkpointed projector)."""

from __future__ import annotations

import asyncio

from contracts.daily_logs import DAILY_LOG_AGGREGATE, EXTRACTION_RESULT_AGGREGATE, EXTRACTION_TASK_AGGREGATE
from contracts.subjects import MEMORY
from kit.bus import Bus
from services.memory.application.service import PROJECTOR, MemoryService

SHARED_PROJECTOR_NAME = "shared-projector"
#: aggregate -> the name of its projector consumer (daily logs, extraction tasks and results)
RECORD_PROJECTORS = {DAILY_LOG_AGGREGATE: "dailylog-projector", EXTRACTION_TASK_AGGREGATE: "extractiontask-projector",
                     EXTRACTION_RESULT_AGGREGATE: "extractionresult-projector"}
# Commands on different memories are independent, and writes to one memory race safely
# (optimistic concurrency on its subject), so a batch is handled this many at a time.
COMMAND_CONCURRENCY = 8


def start(bus: Bus, service: MemoryService, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    """Start the consumers as tasks; query subscriptions are set up by ``serve_queries``."""
    names = bus.names
    projector = service.projection.projector
    return [
        service.runtime.start_commands(bus, stop, prepare=service.memories.prime_saves,
                                       concurrency=COMMAND_CONCURRENCY),
        projector.start(bus, names.projector(MEMORY, "memory"), PROJECTOR, stop),
        projector.start(bus, names.projector(MEMORY, "shared", name=SHARED_PROJECTOR_NAME),
                        f"{MEMORY}-{SHARED_PROJECTOR_NAME}", stop, batched=False),
        *(projector.start(bus, names.projector(MEMORY, aggregate, name=name), f"{MEMORY}-{name}", stop, batched=False)
          for aggregate, name in RECORD_PROJECTORS.items()),
    ]


async def serve_queries(bus: Bus, service: MemoryService) -> list[object]:
    return await service.runtime.serve_queries(bus)
