"""The extractor's commands (composition): its purge of a user and the extraction modes, run by
kit's ServiceRuntime with its command log in the extractor's schema."""

from __future__ import annotations

import asyncio

import asyncpg

from contracts.envelope import EventEnvelope
from contracts.extraction_modes import GetExtractionModes, SetExtractionMode
from contracts.portability import EXTRACTOR, PurgeExtractorUser
from kit.bus import Bus
from kit.command_log import PgCommandLog
from kit.service import ServiceRuntime
from services.extractor.adapters.purge_store import PgExtractorPurge
from services.extractor.application.modes import ModeCommands, ModeGate
from services.extractor.application.purge import ExtractorPurge


async def start_commands(bus: Bus, pool: asyncpg.Pool, schema: str, owner: str,
                         stop: asyncio.Event, *, gate: ModeGate) -> asyncio.Task[None]:
    """Consume the extractor's commands (and answer their outcome and mode queries) until ``stop``."""
    command_log = PgCommandLog(pool, schema)
    await command_log.migrate(owner=owner)
    purge = ExtractorPurge(PgExtractorPurge(pool, schema))

    async def append(aggregate_id: str, event: EventEnvelope) -> None:
        await bus.append_event(bus.names.event(event.tenant, event.aggregate, aggregate_id), event,
                               expected_last_seq=None)

    modes = ModeCommands(gate, append)
    runtime = ServiceRuntime(EXTRACTOR, {PurgeExtractorUser: purge.purge, SetExtractionMode: modes.set},
                             {GetExtractionModes: modes.get}, command_log, tenant_required=False)
    task = runtime.start_commands(bus, stop)
    await runtime.serve_queries(bus, concurrency=4)
    return task
