"""Composition root of the graph service: settings → Postgres read model, projection, similar-edge
worker, query runtime → the event consumer and the ``graph_page`` query on the bus."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from contracts.portability import PurgeGraphUser
from contracts.subjects import GRAPH
from kit import metrics, tracing
from kit import replay as runner
from kit.bus import Bus
from kit.client import Client
from kit.command_log import PgCommandLog
from kit.config import run_service, setup_logging
from kit.pg import create_pool
from kit.replay import ReplayReport
from kit.service import ServiceRuntime
from kit.stalls import freeze_startup_heap
from services.graph.adapters.memory_client import ClientNeighbours
from services.graph.adapters.pg_bulk import PgGraphBulkStore
from services.graph.adapters.pg_store import PgGraphStore
from services.graph.adapters.purge_store import PgGraphPurge
from services.graph.application.pages import GraphPages
from services.graph.application.projection import PROJECTOR, GraphProjection
from services.graph.application.purge import GraphPurge
from services.graph.application.similar import SimilarEdges
from services.graph.config import GraphSettings
from services.graph.entrypoints import nats as nats_entry

log = logging.getLogger("engram.graph")

REPLAY_CHECKPOINT = "graph-replay"


@dataclass
class GraphApp:
    settings: GraphSettings
    bus: Bus
    pool: asyncpg.Pool
    store: PgGraphBulkStore
    projection: GraphProjection
    similar: SimilarEdges
    runtime: ServiceRuntime


@asynccontextmanager
async def graph_app(settings: GraphSettings, *, name: str = "engram-graph") -> AsyncIterator[GraphApp]:
    """The service's parts, connected and migrated (closed on exit)."""
    bus = await Bus.connect(settings.nats_url, settings.names, name=name)
    pool = await create_pool(settings.database_url, max_size=8)
    try:
        await bus.ensure_streams(settings.stream_replicas)
        store = PgGraphBulkStore(pool, settings.graph_schema)
        await store.migrate(owner=settings.namespace)
        command_log = PgCommandLog(pool, settings.graph_schema)
        await command_log.migrate(owner=settings.namespace)
        similar = SimilarEdges(store, ClientNeighbours(Client(bus)), limit=settings.graph_similar_limit,
                               min_score=settings.graph_similar_min_score)
        projection = GraphProjection(store, retention_days=settings.log_retention_days,
                                     on_similar_queued=similar.queued)
        pages = GraphPages(store)
        purge = GraphPurge(PgGraphPurge(pool, settings.graph_schema))  # the purge of a user (contracts/portability.py)
        runtime = ServiceRuntime(GRAPH, {PurgeGraphUser: purge.purge}, pages.query_handlers(), command_log)
        yield GraphApp(settings, bus, pool, store, projection, similar, runtime)
    finally:
        await pool.close()
        await bus.close()


async def start(app: GraphApp, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    """Start the event consumer and the similar-edge worker (until ``stop``) and answer queries."""
    tasks = [nats_entry.start(app.bus, app.projection, stop), app.runtime.start_commands(app.bus, stop)]
    if app.settings.graph_metrics_port:  # /metrics and the projector's lag
        tasks += metrics.start("graph", app.bus, stop, port=app.settings.graph_metrics_port,
                               host=app.settings.metrics_host)
    if app.settings.graph_similar:
        tasks.append(asyncio.create_task(app.similar.run(stop)))
    await nats_entry.serve_queries(app.bus, app.runtime)
    return tasks


async def run(settings: GraphSettings, stop: asyncio.Event | None = None) -> None:
    """Run the graph service until ``stop`` is set (or SIGINT/SIGTERM)."""
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    tracing.setup("graph")  # spans exported when OTEL_EXPORTER_OTLP_ENDPOINT is set (kit/tracing.py)
    async with graph_app(settings) as app:
        tasks = await start(app, stop)
        freeze_startup_heap()
        log.info("graph ready (schema %s, namespace %s)", settings.graph_schema, settings.namespace)
        await stop.wait()
        await asyncio.gather(*tasks, return_exceptions=True)


class _ReadModels:
    def __init__(self, store: PgGraphStore) -> None:
        self.store = store

    async def drop(self) -> None:
        await self.store.drop_read_model()

    async def finish(self) -> None:
        await self.store.analyze()  # the planner's statistics of the tables just loaded (pages want them)


async def replay(settings: GraphSettings, on_progress: Callable[[int, int], None] = lambda d, t: None, *,
                 batch: int = 512, bulk: bool = True) -> ReplayReport:
    """Rebuild the graph from the event log (run with the graph service stopped): the read model is
    emptied, every event applied again in order — ``batch`` events a transaction
    (:meth:`GraphProjection.apply_batch`; ``bulk=False``: one transaction per event, the live
    projection's path) — and the live consumer continues from where the replay got. Memories are queued for their ``similar`` edges, which the running service computes
    (with the memory service up) once it starts."""
    async with graph_app(settings, name="engram-graph-replay") as app:
        await runner.ensure_stopped(app.bus, "graph", [nats_entry.consumer_spec(app.bus.names)])
        return await runner.rebuild(app.bus, app.projection.projector, _ReadModels(app.store),
                                    replay_checkpoint=REPLAY_CHECKPOINT, live_checkpoint=PROJECTOR,
                                    on_progress=on_progress, batch=batch,
                                    apply_batch=app.projection.apply_batch if bulk else None)


async def graph_counts(database_url: str, schema: str = "graph") -> dict[str, int] | None:
    """Nodes and edges by type for `engram status`; None when the graph has no schema yet."""
    pool = await create_pool(database_url, max_size=1)
    try:
        if await pool.fetchval("SELECT to_regclass($1)", f"{schema}.nodes") is None:
            return None
        return await PgGraphStore(pool, schema).counts()
    finally:
        await pool.close()


def main() -> None:
    settings = GraphSettings()
    settings.check_production()
    setup_logging(settings.log_level)
    run_service(run(settings))


__all__ = ["GraphApp", "GraphSettings", "graph_app", "graph_counts", "main", "replay", "run", "start"]
