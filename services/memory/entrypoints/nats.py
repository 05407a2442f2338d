"""NATS entrypoints of the memory service: its command consumer and query answers (kit's
skeleton, over the service's handler tables) and its projectors (kit's checkpointed projector)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from contracts.daily_logs import DAILY_LOG_AGGREGATE, EXTRACTION_RESULT_AGGREGATE, EXTRACTION_TASK_AGGREGATE
from contracts.events import Event
from contracts.memory import MEMORY_AGGREGATE, SHARED_MEMORY_AGGREGATE
from contracts.subjects import MEMORY, ConsumerSpec, Names
from kit.bus import Bus
from kit.events import parse_known
from services.memory.application.index_follow import IndexFollower
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
        projector.start(bus, names.projector(MEMORY, MEMORY_AGGREGATE), PROJECTOR, stop),
        projector.start(bus, names.projector(MEMORY, SHARED_MEMORY_AGGREGATE, name=SHARED_PROJECTOR_NAME),
                        f"{MEMORY}-{SHARED_PROJECTOR_NAME}", stop, batched=False),
        *(projector.start(bus, names.projector(MEMORY, aggregate, name=name), f"{MEMORY}-{name}", stop, batched=False)
          for aggregate, name in RECORD_PROJECTORS.items()),
    ]


#: the durable consumers of replicas following the log into their own vector index: ``memory-index-<replica>``
INDEX_FOLLOWER_PREFIX = "index-"
#: a follower nobody pulled from for this long is deleted by the server (a replica scaled away for
#: good); its replica, if it comes back, follows the log from the first event again
FOLLOWER_INACTIVE_S = 24 * 3600.0


def index_follower_spec(names: Names, replica: str) -> ConsumerSpec:
    """The durable consumer with which replica ``replica`` follows memory events into its own index."""
    spec = names.projector(MEMORY, MEMORY_AGGREGATE, name=f"{INDEX_FOLLOWER_PREFIX}{replica}")
    return dataclasses.replace(spec, inactive_threshold_s=FOLLOWER_INACTIVE_S,
                               description=f"memory replica {replica}: follows memory events into its own vector index")


async def start_index_follower(
    bus: Bus, service: MemoryService, follower: IndexFollower, replica: str, stop: asyncio.Event, *, from_start: bool,
) -> list[asyncio.Task[None]]:
    """Follow memory events into this replica's own vector index (``from_start``: a new shard, so
    from the log's first event), and hear purges run by other replicas (services.memory.application.
    index_follow)."""
    spec = index_follower_spec(bus.names, replica)
    if from_start:
        with contextlib.suppress(NotFoundError):
            await bus.js.delete_consumer(spec.stream, spec.durable)

    def events(msgs: list[Msg]) -> list[tuple[Event[Any], int]]:
        return [(event, m.metadata.sequence.stream) for m in msgs if (event := parse_known(m.data)) is not None]

    async def on_event(msg: Msg) -> None:
        await follower.follow(events([msg]))

    async def handle_batch(msgs: list[Msg]) -> None:
        await follower.follow(events(msgs))

    subject = bus.names.broadcast(MEMORY, "purged")

    async def on_purged(msg: Msg) -> None:
        tenant = msg.data.decode()
        await follower.index.delete_tenant(tenant)
        service.forget_caches(tenant)

    async def announce(user: str) -> None:
        await bus.nc.publish(subject, user.encode())
        await bus.settle()

    subscription = await bus.nc.subscribe(subject, cb=on_purged)
    await bus.settle()
    if service.portability is not None:
        service.portability.after_purge = announce

    async def hear_purges() -> None:
        await stop.wait()
        await subscription.unsubscribe()

    return [asyncio.create_task(bus.consume(spec, on_event, stop, batch=256, handle_batch=handle_batch)),
            asyncio.create_task(hear_purges())]


async def serve_queries(bus: Bus, service: MemoryService) -> list[object]:
    return await service.runtime.serve_queries(bus)
