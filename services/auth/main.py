"""Composition root of the auth service."""

from __future__ import annotations

import asyncio
import logging
import signal

from nats.aio.msg import Msg

from contracts.envelope import CommandEnvelope, Reply
from contracts.errors import ErrorCode
from contracts.subjects import AUTH
from kit.bus import Bus, reply_to
from kit.config import setup_logging
from kit.pg import create_pool
from services.auth.adapters.pg_store import AuthStore
from services.auth.application.service import AuthService
from services.auth.config import AuthSettings

log = logging.getLogger("engram.auth")


async def run(settings: AuthSettings, stop: asyncio.Event | None = None) -> None:
    """Run the auth service until ``stop`` is set (or SIGINT/SIGTERM)."""
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-auth")
    pool = await create_pool(settings.database_url)
    try:
        await bus.ensure_streams(settings.stream_replicas)
        store = AuthStore(pool, settings.auth_schema)
        await store.migrate()
        service = AuthService(store, bus, settings.names)

        async def on_command(msg: Msg) -> None:
            reply = await service.handle_command(CommandEnvelope.model_validate_json(msg.data))
            await reply_to(bus, msg, reply)

        async def on_dead(msg: Msg, reason: str) -> None:
            await reply_to(bus, msg, Reply.failure(ErrorCode.INTERNAL, f"command dead-lettered: {reason}"))

        consumer = asyncio.create_task(
            bus.consume(settings.names.command_consumer(AUTH), on_command, stop, on_dead=on_dead)
        )
        handler = service.handle_query
        await bus.serve_queries(
            AUTH, {"introspect": handler, "list_api_keys": handler, "command_outcome": handler}, concurrency=64
        )
        log.info("auth service ready (namespace %s)", settings.namespace)
        await stop.wait()
        await asyncio.gather(consumer, return_exceptions=True)
    finally:
        await pool.close()
        await bus.close()


def main() -> None:
    settings = AuthSettings()
    setup_logging(settings.log_level)
    asyncio.run(run(settings))
