"""NATS entrypoints of the memory service: its command consumer, projector and query answers."""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg

from contracts.envelope import CommandEnvelope, EventEnvelope, Reply
from contracts.errors import ErrorCode
from contracts.memory import QUERIES
from contracts.subjects import MEMORY
from kit.bus import Bus, reply_to
from services.memory.application.service import PROJECTOR, MemoryService

SHARED_PROJECTOR_NAME = "shared-projector"
# Commands on different memories are independent, and writes to one memory race safely
# (optimistic concurrency on its subject), so a batch is handled this many at a time.
COMMAND_CONCURRENCY = 8


def start(bus: Bus, service: MemoryService, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    """Start the consumers as tasks; query subscriptions are set up by ``serve_queries``."""

    async def on_command(msg: Msg) -> None:
        env = CommandEnvelope.model_validate_json(msg.data)
        reply = await service.handle_command(env)
        await reply_to(bus, msg, reply)

    async def on_dead_command(msg: Msg, reason: str) -> None:
        await reply_to(
            bus, msg,
            Reply.failure(ErrorCode.INTERNAL, f"the command could not be handled and was dead-lettered: {reason}"),
        )

    def projecting(checkpoint: str):  # type: ignore[no-untyped-def]
        async def on_event(msg: Msg) -> None:
            event = EventEnvelope.model_validate_json(msg.data)
            await service.project_event(event, msg.metadata.sequence.stream, checkpoint)

        return on_event

    async def prepare_commands(msgs: list[Msg]) -> None:
        await service.prime_commands([env for env in map(_command_or_none, msgs) if env is not None])

    async def prepare_events(msgs: list[Msg]) -> None:
        batch = []
        for msg in msgs:
            try:
                batch.append((EventEnvelope.model_validate_json(msg.data), msg.metadata.sequence.stream))
            except ValueError:
                continue
        await service.prime_events(batch)

    names = bus.names
    return [
        asyncio.create_task(
            bus.consume(names.command_consumer(MEMORY), on_command, stop, on_dead=on_dead_command,
                        prepare=prepare_commands, concurrency=COMMAND_CONCURRENCY)
        ),
        asyncio.create_task(
            bus.consume(names.projector(MEMORY, "memory"), projecting(PROJECTOR), stop, prepare=prepare_events,
                        after_batch=service.flush_checkpoints)
        ),
        asyncio.create_task(
            bus.consume(names.projector(MEMORY, "shared", name=SHARED_PROJECTOR_NAME),
                        projecting(f"{MEMORY}-{SHARED_PROJECTOR_NAME}"), stop)
        ),
    ]


def _command_or_none(msg: Msg) -> CommandEnvelope | None:
    try:
        return CommandEnvelope.model_validate_json(msg.data)
    except ValueError:
        return None


async def serve_queries(bus: Bus, service: MemoryService) -> list[object]:
    names = ["recall", "command_outcome", *QUERIES]
    return await bus.serve_queries(MEMORY, dict.fromkeys(names, service.handle_query))
