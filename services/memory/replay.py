"""Rebuild the memory service's read models (Postgres tables, vector index) from the event log.

Run with the memory service stopped (`engram replay memory`, through
:func:`services.memory.main.replay`): kit's replay runner (:mod:`kit.replay`) drops the read
models, applies every event again from sequence 1, in order, with the service's own projection —
idempotent by sequence, so an interrupted replay can simply be run again — and hands over to the
live projector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from contracts.subjects import MEMORY
from kit import replay as runner
from kit.replay import ReplayReport, ServiceRunning
from services.memory.application.projection import PROJECTOR
from services.memory.application.service import MemoryService
from services.memory.entrypoints.nats import RECORD_PROJECTORS

if TYPE_CHECKING:
    from services.memory.config import MemorySettings
    from services.memory.main import MemoryApp

__all__ = ["REPLAY_CHECKPOINT", "ReplayReport", "ServiceRunning", "ensure_service_stopped", "rebuild", "replay"]

REPLAY_CHECKPOINT = "memory-replay"


class _ReadModels:
    """The memory read models a replay drops and completes: Postgres tables and the vector index."""

    def __init__(self, app: MemoryApp) -> None:
        self.app = app

    async def drop(self) -> None:
        await self.app.store.drop_read_model()
        await self.app.index.drop()
        await self.app.index.ensure()

    async def finish(self) -> None:
        await self.app.index.optimize()  # build the vector index now, while nothing is waiting on it


async def ensure_service_stopped(app: MemoryApp) -> None:
    names = app.bus.names
    consumers = [names.command_consumer(MEMORY), names.projector(MEMORY, "memory")]
    consumers += [names.projector(MEMORY, aggregate, name=name) for aggregate, name in RECORD_PROJECTORS.items()]
    await runner.ensure_stopped(app.bus, "memory", consumers)


async def rebuild(
    app: MemoryApp, on_progress: Callable[[int, int], None] = lambda done, total: None, batch: int = 256,
) -> ReplayReport:
    """Drop and rebuild every read model of the memory service from the event log."""
    service: MemoryService = app.service
    return await runner.rebuild(
        app.bus, service.projection.projector, _ReadModels(app), replay_checkpoint=REPLAY_CHECKPOINT,
        live_checkpoint=PROJECTOR, on_progress=on_progress, batch=batch, apply_batch=service.projection.replay_batch,
        flush=service.projection.replay_flush,
    )


async def replay(settings: MemorySettings, on_progress: Callable[[int, int], None]) -> ReplayReport:
    """Kept for callers of the old location: use :func:`services.memory.main.replay`."""
    from services.memory.main import replay as run

    return await run(settings, on_progress)
