"""Rebuild the memory service's read models (Postgres tables, vector index) from the event log.

Run with the memory service stopped (`engram replay memory`, through
:func:`services.memory.main.replay`): kit's replay runner (:mod:`kit.replay`) drops the read
models, applies every event again from sequence 1, in order, with the service's own projection —
idempotent by sequence, so an interrupted replay can simply be run again — and hands over to the
live projector.

The Postgres tables are emptied and written again. The vector index is kept and brought to what
the log says point by point (:mod:`services.memory.search.index_sync`): a point whose
fingerprint is already the one the replay computes is left as it is (vectors, HNSW links), the
others are written, and points of no memory are swept at the end; ``rebuild_index=True``
(`engram replay memory --rebuild-index`) drops the index and writes every point instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from contracts.memory import MEMORY_AGGREGATE
from contracts.subjects import MEMORY
from kit import replay as runner
from kit.replay import ReplayReport, ServiceRunning
from services.memory.application.projection import PROJECTOR
from services.memory.application.service import MemoryService
from services.memory.entrypoints.nats import INDEX_FOLLOWER_PREFIX, RECORD_PROJECTORS, index_follower_spec

if TYPE_CHECKING:
    from kit.bus import Bus
    from services.memory.config import MemorySettings
    from services.memory.main import MemoryApp

__all__ = ["REPLAY_CHECKPOINT", "ReplayReport", "ServiceRunning", "ensure_service_stopped", "rebuild", "replay"]

REPLAY_CHECKPOINT = "memory-replay"


class _ReadModels:
    """The memory read models a replay drops and completes: Postgres tables and the vector index."""

    def __init__(self, app: MemoryApp, *, keep_index: bool) -> None:
        self.app = app
        self.keep_index = keep_index

    async def drop(self) -> None:
        await self.app.store.drop_read_model()
        if not self.keep_index:
            await self.app.index.drop()
            await self.app.index.ensure()

    async def finish(self) -> None:
        index, sync = self.app.index, self.app.service.projection.replay_sync
        if sync.keep and await index.size() != len(sync.live):  # points of no memory: swept
            await index.delete(sync.stale(await index.point_ids()))
        if not sync.keep or index.needs_optimize():
            await index.optimize()  # build the vector index now, while nothing is waiting on it


async def index_followers(bus: Bus) -> list[str]:
    """The durable consumers of replicas that follow the log into their own vector index."""
    prefix = f"{MEMORY}-{INDEX_FOLLOWER_PREFIX}"
    try:
        infos = await bus.js.consumers_info(bus.names.events_stream)
    except Exception:  # no stream yet: nothing follows it
        return []
    return [i.name for i in infos if i.name.startswith(prefix)]


async def ensure_service_stopped(bus: Bus) -> None:
    """Refuse (:class:`ServiceRunning`) while any memory service consumes from ``bus``."""
    names = bus.names
    consumers = [names.command_consumer(MEMORY), names.projector(MEMORY, MEMORY_AGGREGATE)]
    consumers += [names.projector(MEMORY, aggregate, name=name) for aggregate, name in RECORD_PROJECTORS.items()]
    consumers += [index_follower_spec(names, durable.removeprefix(f"{MEMORY}-{INDEX_FOLLOWER_PREFIX}"))
                  for durable in await index_followers(bus)]
    await runner.ensure_stopped(bus, "memory", consumers)


async def rebuild(
    app: MemoryApp, on_progress: Callable[[int, int], None] = lambda done, total: None, batch: int = 256,
    *, rebuild_index: bool = False,
) -> ReplayReport:
    """Rebuild every read model of the memory service from the event log: the Postgres tables
    emptied and written again, the vector index kept and reconciled point by point (or, with
    ``rebuild_index``, dropped and written again). The report's ``details`` count the points."""
    service: MemoryService = app.service
    sync = service.projection.begin_replay(keep_index=not rebuild_index)
    report = await runner.rebuild(
        app.bus, service.projection.projector, _ReadModels(app, keep_index=not rebuild_index),
        replay_checkpoint=REPLAY_CHECKPOINT, live_checkpoint=PROJECTOR, on_progress=on_progress, batch=batch,
        apply_batch=service.projection.replay_batch, flush=service.projection.replay_flush,
    )
    report.details.update(points_kept=sync.kept, points_written=sync.written, points_swept=sync.swept)
    # replicas with their own vector index check it against the rebuilt read model from the log's
    # first event when they start again (services/memory/application/index_follow.py)
    for durable in await index_followers(app.bus):
        await app.bus.js.delete_consumer(app.bus.names.events_stream, durable)
    return report


async def replay(
    settings: MemorySettings, on_progress: Callable[[int, int], None], *, rebuild_index: bool = False,
) -> ReplayReport:
    """Kept for callers of the old location: use :func:`services.memory.main.replay`."""
    from services.memory.main import replay as run

    return await run(settings, on_progress, rebuild_index=rebuild_index)
