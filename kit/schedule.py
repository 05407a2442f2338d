"""A service's periodic rounds (the extractor's retention and recovery, the memory service's expiry)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("engram")


async def schedule(stop: asyncio.Event, every_s: float, name: str, step: Callable[[str], Awaitable[None]]) -> None:
    """Run ``step(round_id)`` every ``every_s`` seconds until stop (a failed round is logged, not
    fatal). ``round_id`` (``<name>-<the period's number>``) is the same for every replica within a
    period: keys derived from it make replicas running the same round act once."""
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
            log.exception("%s round failed; the next one tries again", name)
