"""Composition root of the extractor: settings → engine, ledger, memory writer, log source →
the application → the daily-log consumer and the maintenance schedules."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from datetime import date, timedelta

import asyncpg

from contracts.daily_logs import DAILY_LOG_AGGREGATE, TASK_ID_PATTERN
from contracts.extraction_modes import EXTRACTION_MODE_AGGREGATE
from kit import events, metrics, tracing
from kit.bus import Bus
from kit.client import Client
from kit.config import run_service, setup_logging
from kit.pg import create_pool
from kit.schedule import schedule
from kit.stalls import freeze_startup_heap
from services.extractor.adapters.builtin import BuiltinExtraction
from services.extractor.adapters.ledger import PgTaskLedger
from services.extractor.adapters.llm import LlmExtraction
from services.extractor.adapters.log_catalog import EventLogCatalog
from services.extractor.adapters.log_source import build_log_source
from services.extractor.adapters.memory_client import ClientMemoryWriter
from services.extractor.adapters.modes import PgModes
from services.extractor.adapters.tenants import PgTenants
from services.extractor.application.extraction import (
    Extractor,
    consolidate,
    recover_stuck,
    retention,
    run_maintenance,
)
from services.extractor.application.modes import ModeGate, latest_modes
from services.extractor.application.modes import sweep as sweep_waiting
from services.extractor.application.ports import ExtractionEngine, LogSource
from services.extractor.application.reextract import Progress, ReextractReport
from services.extractor.application.reextract import reextract as run_reextract
from services.extractor.commands import start_commands
from services.extractor.config import ExtractorSettings
from services.extractor.entrypoints import nats as nats_entry

log = logging.getLogger("engram.extractor")


def build_engine(settings: ExtractorSettings) -> ExtractionEngine:
    """The configured engine; the LLM one only when its endpoint is configured."""
    problem = settings.llm_problem()
    if problem:
        raise SystemExit(f"engram extractor: {problem}")
    if settings.extractor_engine == "llm":
        assert settings.extractor_llm_url and settings.extractor_llm_model
        return LlmExtraction(
            settings.extractor_llm_url, settings.extractor_llm_model, api_key=settings.extractor_llm_api_key,
            timeout_s=settings.extractor_llm_timeout_s, attempts=settings.extractor_llm_attempts,
            max_chars=settings.extractor_llm_max_chars, max_tokens=settings.extractor_llm_max_tokens,
        )
    return BuiltinExtraction()


async def run(settings: ExtractorSettings, stop: asyncio.Event | None = None) -> None:
    """Run the extractor until ``stop`` is set (or SIGINT/SIGTERM)."""
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    engine = build_engine(settings)
    tracing.setup("extractor")
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-extractor")
    pool = await create_pool(settings.database_url, max_size=4)
    try:
        await bus.ensure_streams(settings.stream_replicas)
        ledger = PgTaskLedger(pool, settings.extractor_schema)
        await ledger.migrate(owner=settings.namespace)
        tenants = PgTenants(pool, settings.extractor_schema)
        client = Client(bus)
        logs: LogSource = build_log_source(client)
        writer = ClientMemoryWriter(client)
        gate = mode_gate(settings, pool)
        extractor = Extractor(engine=engine, logs=logs, memories=writer, ledger=ledger,
                              task_id=settings.task_id, tenants=tenants, gate=gate)
        spec = nats_entry.consumer_spec(settings.names, DAILY_LOG_AGGREGATE, ack_wait_s=settings.extractor_ack_wait_s)
        consumer = nats_entry.start(bus, extractor, spec, stop, concurrency=settings.extractor_concurrency)
        commands = await start_commands(bus, pool, settings.extractor_schema, settings.namespace, stop,
                                        gate=gate)  # purge, extraction modes

        async def sweep_round(round_id: str) -> None:
            n = await sweep_waiting(extractor, gate)
            if n:
                log.info("handed %d waiting logs to the pipeline (round %s)", n, round_id)

        async def recover_round(round_id: str) -> None:
            n = await recover_stuck(logs, tenants, stuck_minutes=settings.log_stuck_minutes, round_id=round_id)
            if n:
                log.info("recovered %d stuck logs (round %s)", n, round_id)

        async def retention_round(round_id: str) -> None:
            n = await retention(logs, tenants, retention_days=settings.log_retention_days, round_id=round_id)
            if n:
                log.info("deleted %d processed logs past retention (round %s)", n, round_id)

        async def consolidate_round(round_id: str) -> None:
            n = await consolidate(writer, tenants, round_id=round_id)
            if n:
                log.info("consolidated %d near-duplicate memories (round %s)", n, round_id)

        tasks = [
            consumer,
            commands,
            asyncio.create_task(schedule(stop, settings.log_recover_interval_s, "recover", recover_round)),
            asyncio.create_task(schedule(stop, settings.extraction_sweep_interval_s, "sweep", sweep_round)),
            asyncio.create_task(schedule(stop, settings.log_retention_interval_s, "retention", retention_round)),
            asyncio.create_task(schedule(stop, settings.extractor_consolidate_interval_s, "consolidate",
                                         consolidate_round)),
            *metrics.start("extractor", bus, stop, port=settings.extractor_metrics_port,  # /metrics, consumer lag
                           host=settings.metrics_host),
            asyncio.create_task(metrics.sample_every(
                stop, 15.0, lambda: _sample_tasks(ledger), "extraction tasks")),  # engram_extraction_tasks
        ]
        freeze_startup_heap()
        log.info("extractor ready (engine %s, task %s, extraction %s, namespace %s)", engine.name, settings.task_id,
                 settings.extraction.value, settings.namespace)
        await stop.wait()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await pool.close()
        await bus.close()


def mode_gate(settings: ExtractorSettings, pool: asyncpg.Pool) -> ModeGate:
    return ModeGate(PgModes(pool, settings.extractor_schema), default=settings.extraction,
                    handoff=timedelta(minutes=settings.extraction_handoff_minutes))


async def _sample_tasks(ledger: PgTaskLedger) -> None:
    metrics.set_extraction_tasks(await ledger.counts())


async def replay(settings: ExtractorSettings) -> int:
    """Rebuild the extractor's read models (the tenants with daily logs, the projects' extraction
    modes) from the event log; the ledger is the extractor's own record and is kept. Returns how
    many tenants were found."""
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-extractor-replay")
    pool = await create_pool(settings.database_url, max_size=2)
    try:
        await PgTaskLedger(pool, settings.extractor_schema).migrate(owner=settings.namespace)
        found = await nats_entry.tenants_in_event_log(bus, DAILY_LOG_AGGREGATE)
        modes = [event for event, _ in await events.history(bus, bus.names.events_of(EXTRACTION_MODE_AGGREGATE))]
        await PgModes(pool, settings.extractor_schema).replace_project_modes(latest_modes(modes))
        return await PgTenants(pool, settings.extractor_schema).replace(found)
    finally:
        await pool.close()
        await bus.close()


ENGINES = ("builtin", "llm")


async def reextract(
    settings: ExtractorSettings, task_id: str, since: date | None = None, engine: str | None = None,
    on_progress: Progress | None = None, user: str | None = None,
) -> ReextractReport:
    """Run extraction again over the past daily logs (from ``since``, of ``user`` or everyone) under
    ``task_id`` with ``engine`` (default: the configured one), against the running memory service.
    Results are recorded for the new task; memories change only through the merge policy's
    versioned updates; the logs' lifecycle is left alone. Exactly once per (log_id, task_id): a
    second run with the same task id writes nothing. Raises ValueError on a bad task id or engine."""
    if not re.fullmatch(TASK_ID_PATTERN.strip("^$"), task_id):
        raise ValueError(f"task id {task_id!r}: letters, digits and _ . : - only, at most 128 characters")
    if engine is not None:
        if engine not in ENGINES:
            raise ValueError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
        settings = settings.model_copy(update={"extractor_engine": engine})
    problem = settings.llm_problem()
    if problem:
        raise ValueError(problem)
    chosen = build_engine(settings)
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-extractor-reextract")
    pool = await create_pool(settings.database_url, max_size=4)
    try:
        ledger = PgTaskLedger(pool, settings.extractor_schema)
        await ledger.migrate(owner=settings.namespace)
        client = Client(bus)
        extractor = Extractor(engine=chosen, logs=build_log_source(client), memories=ClientMemoryWriter(client),
                              ledger=ledger, task_id=task_id)
        return await run_reextract(extractor, EventLogCatalog(bus, client), since=since, tenant=user,
                                   on_progress=on_progress, concurrency=settings.extractor_concurrency)
    finally:
        await pool.close()
        await bus.close()


async def task_counts(database_url: str, schema: str = "extractor") -> dict[str, int] | None:
    """Extraction tasks by state (running / done / failed) for `engram status`; None when the
    extractor has not created its schema yet."""
    pool = await create_pool(database_url, max_size=1)
    try:
        exists = await pool.fetchval("SELECT to_regclass($1)", f"{schema}.tasks")
        if exists is None:
            return None
        return await PgTaskLedger(pool, schema).counts()
    finally:
        await pool.close()


def main() -> None:
    settings = ExtractorSettings()
    settings.check_production()
    setup_logging(settings.log_level)
    run_service(run(settings))


__all__ = ["ReextractReport", "build_engine", "main", "reextract", "replay", "run", "run_maintenance", "task_counts"]
