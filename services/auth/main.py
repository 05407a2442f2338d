"""Composition root of the auth service: NATS consumers (API keys, users, introspection) and,
in the same event loop, the OAuth 2.1 authorization server over HTTP."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import uvicorn

from contracts.subjects import AUTH
from kit import listen, metrics, tracing
from kit.bus import Bus
from kit.command_log import PgCommandLog
from kit.config import run_service, setup_logging
from kit.pg import create_pool
from kit.service import ServiceRuntime
from kit.stalls import freeze_startup_heap, watch_stalls
from services.auth.adapters.oauth_store import OAuthStore
from services.auth.adapters.pg_store import AuthStore
from services.auth.application.events import AuthEvents
from services.auth.application.maintenance import run_purge_loop
from services.auth.application.service import AuthService
from services.auth.config import AuthSettings
from services.auth.domain.passwords import WeakPassword, hash_password
from services.auth.entrypoints.http import create_app, header_timeout_protocol
from services.auth.oauth.pages import Pages
from services.auth.oauth.provider import EngramOAuthProvider

log = logging.getLogger("engram.auth")

# The auth service's public entry for the deployment layer: run it, and hash a password the way it
# expects a new login's password (the CLI hashes before the password travels).
__all__ = ["AuthSettings", "WeakPassword", "hash_password", "main", "run"]


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside our loop: the service, not uvicorn, owns SIGINT/SIGTERM."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def start_http(settings: AuthSettings, store: AuthStore, oauth: OAuthStore, events: AuthEvents) -> tuple[_EmbeddedServer, asyncio.Task[None]]:
    provider = EngramOAuthProvider(oauth, events, issuer=settings.issuer, resource=settings.resource)
    pages = Pages(oauth, issuer=settings.issuer, allow_signup=settings.allow_signup)
    config = uvicorn.Config(
        create_app(provider, pages, settings.issuer, settings), host=settings.auth_host, port=settings.auth_port,
        log_level=settings.log_level.lower(), proxy_headers=False, lifespan="off",  # ENGRAM_TRUSTED_PROXIES decides
        timeout_keep_alive=settings.auth_keep_alive_s, http=header_timeout_protocol(settings.auth_header_timeout_s),
    )
    server = _EmbeddedServer(config)
    sockets = [listen.bind(settings.auth_host, settings.auth_port)] if listen.reuse_port_requested() else None
    task = asyncio.create_task(server.serve(sockets=sockets))  # replicas share the port with ENGRAM_REUSE_PORT=1
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start (port taken, …)
            raise RuntimeError("the OAuth HTTP server stopped while starting")
        await asyncio.sleep(0.05)
    log.info("OAuth authorization server at %s (issuer), tokens for %s", settings.issuer, settings.resource)
    return server, task


async def run(settings: AuthSettings, stop: asyncio.Event | None = None) -> None:
    """Run the auth service until ``stop`` is set (or SIGINT/SIGTERM)."""
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    tracing.setup(AUTH)
    bus = await Bus.connect(settings.nats_url, settings.names, name="engram-auth")
    pool = await create_pool(settings.database_url)
    try:
        await bus.ensure_streams(settings.stream_replicas)
        store = AuthStore(pool, settings.auth_schema)
        await store.migrate(owner=settings.namespace)
        oauth = OAuthStore(pool, settings.auth_schema)
        service = AuthService(store, bus, settings.names, oauth)
        server, http_task = await start_http(settings, store, oauth, AuthEvents(bus, settings.names))
        purge = asyncio.create_task(run_purge_loop(
            oauth, stop, settings.auth_purge_interval_s, unused_client_age=timedelta(days=settings.auth_unused_client_days)))

        command_log = PgCommandLog(pool, settings.auth_schema)
        await command_log.migrate(owner=settings.namespace)
        runtime = ServiceRuntime(AUTH, service.command_handlers(), service.query_handlers(), command_log,
                                 tenant_required=False)
        consumer = runtime.start_commands(bus, stop)
        await runtime.serve_queries(bus, concurrency=64)
        stalls = asyncio.create_task(watch_stalls(stop, threshold_ms=settings.stall_warning_ms))
        sampling = metrics.start(AUTH, bus, stop, port=settings.auth_metrics_port,  # /metrics, consumer lag
                                 host=settings.metrics_host)
        freeze_startup_heap()
        log.info("auth service ready (namespace %s)", settings.namespace)
        await stop.wait()
        server.should_exit = True
        await asyncio.gather(consumer, http_task, stalls, purge, *sampling, return_exceptions=True)
    finally:
        await pool.close()
        await bus.close()


def main() -> None:
    settings = AuthSettings()
    settings.check_production()  # ENGRAM_ENV=production refuses unsafe settings (kit/config.py)
    setup_logging(settings.log_level)
    run_service(run(settings))
