"""Housekeeping of the authorization server: expired OAuth rows are deleted on a schedule, so
anonymous traffic (registrations, authorization requests, failed sign-ins) cannot grow the
database without bound."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from services.auth.adapters.oauth_store import OAuthStore

log = logging.getLogger("engram.auth.maintenance")
DEFAULT_UNUSED_CLIENT_AGE = timedelta(days=7)


async def purge_once(oauth_store: OAuthStore, unused_client_age: timedelta = DEFAULT_UNUSED_CLIENT_AGE) -> dict[str, int]:
    counts = await oauth_store.purge_expired(unused_client_age=unused_client_age)
    if any(counts.values()):
        log.info("purged expired OAuth rows: %s", ", ".join(f"{k} {v}" for k, v in counts.items() if v))
    return counts


async def run_purge_loop(
    oauth_store: OAuthStore, stop: asyncio.Event, interval_s: float, *,
    unused_client_age: timedelta = DEFAULT_UNUSED_CLIENT_AGE,
) -> None:
    """Purge at once, then every ``interval_s`` seconds until ``stop`` is set. A failed round
    (Postgres away for a moment) is logged and retried at the next interval."""
    while not stop.is_set():
        try:
            await purge_once(oauth_store, unused_client_age)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("purging expired OAuth rows failed; retrying in %.0f s", interval_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
