"""Composition root of the extractor: settings → engine, ledger, memory writer, log source →
the application → the daily-log consumer and the maintenance schedules."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable

from kit.bus import Bus
from kit.client import Client
from kit.config import run_service, setup_logging
from kit.pg import create_pool
from kit.stalls import freeze_startup_heap
from services.extractor.adapters.builtin import BuiltinExtraction
from services.extractor.adapters.ledger import PgTaskLedger
from services.extractor.adapters.llm import LlmExtraction
from services.extractor.adapters.log_source import DAILY_LOG_AGGREGATE, build_log_source
from services.extractor.adapters.memory_client import ClientMemoryWriter
from services.extractor.application.extraction import Extractor, run_maintenance
from services.extractor.application.ports import ExtractionEngine, LogSource
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
            max_chars=settings.extractor_llm_max_chars,
        )
    return BuiltinExtraction()


async def schedule(stop: asyncio.Event, every_s: float, name: str, step: Callable[[str], Awaitable[None]]) -> None:
    """Run ``step(round_id)`` every ``every_s`` seconds until stop (a failed round is logged, not fatal)."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=every_s)
            return
        except TimeoutError:
            pass
        round_id = f"{name}-{int(time.time() // every_s)}"
        try:
            await step(round_id)
        except Exception:
            log.exception("%s round failed", name)


async def run(settings: ExtractorSettings, stop: asyncio.Event | None = None) -> None:
    """Run the extractor until ``stop`` is set (or SIGINT/SIGTERM)."""
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    engine = build_engine(settings)
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-extractor")
    pool = await create_pool(settings.database_url, max_size=4)
    try:
        await bus.ensure_streams(settings.stream_replicas)
        ledger = PgTaskLedger(pool, settings.extractor_schema)
        await ledger.migrate(owner=settings.namespace)
        client = Client(bus)
        logs: LogSource = build_log_source(client)
        extractor = Extractor(engine=engine, logs=logs, memories=ClientMemoryWriter(client), ledger=ledger,
                              task_id=settings.task_id)
        spec = nats_entry.consumer_spec(settings.names, DAILY_LOG_AGGREGATE, ack_wait_s=settings.extractor_ack_wait_s)
        consumer = nats_entry.start(bus, extractor, spec, stop, concurrency=settings.extractor_concurrency)

        async def recover(round_id: str) -> None:
            await logs.recover_stuck(settings.log_stuck_minutes, key=f"x:recover:{round_id}")

        async def retention(round_id: str) -> None:
            await logs.delete_processed(settings.log_retention_days, key=f"x:retention:{round_id}")

        tasks = [
            consumer,
            asyncio.create_task(schedule(stop, settings.log_recover_interval_s, "recover", recover)),
            asyncio.create_task(schedule(stop, settings.log_retention_interval_s, "retention", retention)),
        ]
        freeze_startup_heap()
        log.info("extractor ready (engine %s, task %s, namespace %s)", engine.name, settings.task_id,
                 settings.namespace)
        await stop.wait()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await pool.close()
        await bus.close()


def main() -> None:
    settings = ExtractorSettings()
    settings.check_production()
    setup_logging(settings.log_level)
    run_service(run(settings))


__all__ = ["build_engine", "main", "run", "run_maintenance"]
