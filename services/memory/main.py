"""Composition root of the memory service: Settings → adapters → application → entrypoints."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from contracts.envelope import utcnow
from contracts.subjects import MEMORY
from kit import metrics, tracing
from kit.bus import Bus
from kit.client import Client
from kit.command_log import PgCommandLog
from kit.config import run_service, setup_logging
from kit.pg import create_pool
from kit.schedule import schedule
from kit.service import ServiceRuntime
from kit.stalls import freeze_startup_heap, watch_stalls
from services.memory.adapters.embedder import build_embedder
from services.memory.adapters.embedding_cache import PgEmbeddingCache
from services.memory.adapters.late_encoder import build_late_encoder
from services.memory.adapters.llm_judge import LlmJudge
from services.memory.adapters.pg_portability import PgPortability
from services.memory.adapters.pg_store import MemoryStore
from services.memory.adapters.reranker import build_reranker
from services.memory.adapters.vector_factory import build_vector_index
from services.memory.application.expiry import expiry_round
from services.memory.application.index_follow import IndexFollower
from services.memory.application.service import MemoryService
from services.memory.config import MemorySettings
from services.memory.domain.decay import policy_from_settings
from services.memory.entrypoints import nats as nats_entry
from services.memory.replay import ReplayReport, ServiceRunning, ensure_service_stopped, rebuild
from services.memory.search.embedding import PrimedEmbedder, PrimedLateEncoder
from services.memory.search.encoders import Encoders
from services.memory.search.ports import Embedder, VectorIndex
from services.memory.search.vector_cache import VectorCache

__all__ = ["MemoryApp", "ReplayReport", "ServiceRunning", "main", "memory_app", "replay", "run"]

log = logging.getLogger("engram.memory")


def make_embedder(settings: MemorySettings) -> Embedder:
    if settings.embedder == "openai":
        return build_embedder(
            "openai", base_url=settings.embedder_url, model=settings.embedder_model,
            dim=settings.embedder_dim, api_key=settings.embedder_api_key,
        )
    return build_embedder(settings.embedder, threads=settings.embedder_threads, compute=settings.embedder_compute)


def make_late_encoder(settings: MemorySettings) -> PrimedLateEncoder | None:
    encoder = build_late_encoder(settings.late_interaction, threads=settings.embedder_threads)
    return PrimedLateEncoder(encoder) if encoder is not None else None


@dataclass
class MemoryApp:
    settings: MemorySettings
    bus: Bus
    store: MemoryStore
    index: VectorIndex
    service: MemoryService


def make_judge(settings: MemorySettings) -> LlmJudge | None:
    """The LLM judge of flagged pairs, when ``ENGRAM_TRUTH_LLM_URL`` is set (with its model)."""
    if not settings.truth_llm_url:
        return None
    if not settings.truth_llm_model:
        raise ValueError("ENGRAM_TRUTH_LLM_URL is set without ENGRAM_TRUTH_LLM_MODEL: name the model the LLM "
                         "judge asks, or unset the URL")
    log.info("flagged pairs of memories get a second opinion from %s (%s)", settings.truth_llm_url,
             settings.truth_llm_model)
    return LlmJudge(settings.truth_llm_url, settings.truth_llm_model, api_key=settings.truth_llm_api_key)


def limit_blas_threads() -> None:
    """Run numpy's BLAS on one thread in this process. Its matrix products here are small (a
    recall's late-interaction MaxSim: ~20 × 384 × 1,500), and OpenBLAS's extra threads spin after
    each one, competing with the onnxruntime threads that do the real work: measured at 100,000
    memories, a recall took p50 13.2 ms and 26 ms of CPU with the default, 10.2 ms and 14 ms with
    one thread (docs/benchmarks-log.md)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


@asynccontextmanager
async def memory_app(settings: MemorySettings, *, fresh_index: bool = False) -> AsyncIterator[MemoryApp]:
    """Open every adapter of the memory service (no consumers started); ``fresh_index``: drop the
    vector index first (a replay that rebuilds it, e.g. after the embedding dimension changed)."""
    limit_blas_threads()
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-memory")
    pool = await create_pool(settings.database_url)
    index: VectorIndex | None = None
    judge = make_judge(settings)
    try:
        await bus.ensure_streams(settings.stream_replicas)
        store = MemoryStore(pool, settings.memory_schema)
        await store.migrate(owner=settings.namespace)
        command_log = PgCommandLog(pool, settings.memory_schema)
        await command_log.migrate(owner=settings.namespace)
        embedder = PrimedEmbedder(metrics.TimedEmbedder(make_embedder(settings)))  # engram_embed_duration_seconds
        await asyncio.to_thread(embedder.embed, ["warm-up"])
        index = build_vector_index(
            qdrant_url=settings.qdrant_url, path=settings.vector_path, dim=embedder.dim,
            collection=settings.qdrant_collection, api_key=settings.qdrant_api_key, owner=settings.namespace,
            search_threads=settings.vector_search_threads or None,
        )
        if fresh_index:
            await ensure_service_stopped(bus)  # never drop the index under a running service
            await index.drop()
        await index.ensure()
        encoders = Encoders(
            embedder=embedder, late_encoder=await asyncio.to_thread(make_late_encoder, settings),
            reranker=build_reranker(settings.reranker, threads=settings.embedder_threads),
            cache=VectorCache(PgEmbeddingCache(pool, settings.memory_schema,
                                                max_entries=settings.embedding_cache_max_entries)),
        )
        metrics.track_embedding_cache(encoders.cache)  # engram_embedding_cache_total{result=hit|miss}
        service = MemoryService(
            store, index, encoders, bus, settings.names, rerank_candidates=settings.rerank_candidates,
            late_candidates=settings.late_candidates, keyword_feedback=settings.keyword_feedback,
            decay_policy=policy_from_settings(os.environ),  # ENGRAM_DECAY_HALF_LIFE_<CATEGORY> (docs/memory-truth.md)
            log_retention_days=settings.log_retention_days,
            portability=PgPortability(pool, settings.memory_schema), judge=judge,
        )
        service.bind(ServiceRuntime(MEMORY, service.command_handlers(), service.query_handlers(), command_log))
        yield MemoryApp(settings, bus, store, index, service)
    finally:
        if index is not None:
            await index.close()
        if judge is not None:
            await judge.close()
        await pool.close()
        await bus.close()


IDLE_BEFORE_OPTIMIZE_S = 5.0
#: Optimise under steady writes too, once this many points wait for an index (else they would be
#: scanned by every search for as long as saves keep coming less than 5 s apart). It bounds what
#: one optimisation covers, and so how long it stalls the process: the embedded engine holds the
#: GIL while it builds HNSW (~0.2 ms a point on 2 cores; docs/scaling.md).
STEADY_OPTIMIZE_POINTS = 10_000
#: How often the maintenance loop looks (flush schedule, optimisation).
MAINTENANCE_TICK_S = 1.0


async def maintain_index(
    app: MemoryApp, stop: asyncio.Event, *, tick_s: float = MAINTENANCE_TICK_S,
    idle_s: float = IDLE_BEFORE_OPTIMIZE_S, steady_points: int = STEADY_OPTIMIZE_POINTS,
) -> None:
    """Keep the embedded vector index flushed, optimised and compacted while the service runs.

    Every ``tick_s``: flush the shard if its schedule says so (``flush_if_due``: writes pending
    for a while; the WAL stays bounded), then build the index for new points when either
    ``idle_s`` passed without commands and a worthwhile batch waits (``needs_optimize``), or
    ``steady_points`` points wait whatever the traffic. The engine searches unindexed points by
    full scan and blocks the whole process while it builds an index (it holds the GIL), so the
    idle rule prefers quiet moments and the count rule bounds both the scan and each stall.
    Reads do not postpone it. Once the shard has many segments (``needs_compaction``), they are
    merged in a process of its own (``compact``, a task beside this loop: no optimisation runs
    meanwhile, the flushes go on); stopping the service stops it.
    """
    if app.index.optimizes_itself:
        return  # a Qdrant server optimises and persists in the background by itself
    loop = asyncio.get_running_loop()
    compaction: asyncio.Task[object | None] | None = None
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=tick_s)
                return
            except TimeoutError:
                pass
            try:
                if compaction is not None and compaction.done():
                    _log_compaction(compaction)
                    compaction = None
                await app.index.flush_if_due()
                metrics.VECTOR_SEGMENTS.set(app.index.segments())
                if compaction is not None:
                    continue
                idle = loop.time() - app.service.last_activity >= idle_s
                waiting = app.index.unindexed_points()
                if (idle and app.index.needs_optimize()) or waiting >= steady_points:
                    started = loop.time()
                    await app.index.optimize()
                    log.info("vector index optimised in %.1fs (%d points were unindexed, %s)",
                             loop.time() - started, waiting, "idle" if idle else "under writes")
                elif app.index.needs_compaction():
                    log.info("vector index: compacting its segments in a process of its own")
                    compaction = asyncio.create_task(app.index.compact())
            except Exception:  # never let maintenance end the service; the next tick tries again
                log.exception("vector index maintenance failed")
    finally:
        if compaction is not None and not compaction.done():
            compaction.cancel()
            await asyncio.gather(compaction, return_exceptions=True)


async def expire_supersessions(app: MemoryApp, stop: asyncio.Event, every_s: float) -> None:
    """Every ``every_s``: the expiry round (:func:`expiry_round`), its commands sent through the bus
    like any other's."""
    client = Client(app.bus)

    async def expiry(round_id: str) -> None:
        back = await expiry_round(app.store, client.send, utcnow())
        if back:
            log.info("%d memories current again: what superseded them has expired (round %s)", back, round_id)

    await schedule(stop, every_s, "expiry", expiry)


def _log_compaction(task: asyncio.Task[object | None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        metrics.VECTOR_COMPACTIONS.labels(result="failed").inc()
        log.warning("vector index compaction did not finish (the shard is as it was): %s", error)
    elif task.result() is not None:
        metrics.VECTOR_COMPACTIONS.labels(result="done").inc()
        log.info("vector index compacted: %s", task.result())


async def run(settings: MemorySettings, stop: asyncio.Event | None = None) -> None:
    """Run the memory service until ``stop`` is set (or SIGINT/SIGTERM)."""
    stop = stop or _stop_on_signals()
    tracing.setup(MEMORY)
    async with memory_app(settings) as app:
        follows = bool(settings.memory_replica) and not app.index.optimizes_itself  # its own shard: index_follow
        if follows:  # before anything of this replica writes (see IndexFollower.sweep)
            follower = IndexFollower(app.service.projection, app.store, app.index)
            swept = await follower.sweep()
            log.info("memory replica %s follows the event log into its own vector index (%d stale points removed)",
                     settings.memory_replica, swept)
        tasks = nats_entry.start(app.bus, app.service, stop)
        if follows:
            tasks += await nats_entry.start_index_follower(app.bus, app.service, follower, settings.memory_replica,
                                                           stop, from_start=app.index.created)
        tasks += metrics.start(MEMORY, app.bus, stop, port=settings.memory_metrics_port,  # /metrics, consumer lag
                               host=settings.metrics_host)
        tasks.append(asyncio.create_task(maintain_index(app, stop)))
        tasks.append(asyncio.create_task(expire_supersessions(app, stop, settings.expiry_interval_s)))
        tasks.append(asyncio.create_task(watch_stalls(stop, threshold_ms=settings.stall_warning_ms)))
        await nats_entry.serve_queries(app.bus, app.service)
        freeze_startup_heap()
        log.info("memory service ready (namespace %s, embedder %s, late interaction %s, reranker %s)",
                 settings.namespace, app.service.encoders.embedder.model_id, settings.late_interaction, settings.reranker)
        await stop.wait()
        await asyncio.gather(*tasks, return_exceptions=True)


async def replay(
    settings: MemorySettings, on_progress: Callable[[int, int], None], *, rebuild_index: bool = False,
) -> ReplayReport:
    """Rebuild the memory service's read models from the event log (`engram replay memory`); the
    service must be stopped (:class:`ServiceRunning` otherwise). ``rebuild_index``: drop the vector
    index and write every point, instead of keeping the points already right."""
    async with memory_app(settings, fresh_index=rebuild_index) as app:
        await ensure_service_stopped(app.bus)
        return await rebuild(app, on_progress, rebuild_index=rebuild_index)


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def main() -> None:
    settings = MemorySettings()
    settings.check_production()  # ENGRAM_ENV=production refuses unsafe settings (kit/config.py)
    setup_logging(settings.log_level)
    run_service(run(settings))
