"""Event-loop stall warnings: when a service's loop cannot run for a while, say so in the log.

A stalled loop delays every request the process is serving at that moment, so each stall is a
tail-latency sample with a cause: a blocking call, a long garbage collection, a native library
holding the GIL (the embedded vector engine while it builds an index). ``watch_stalls`` ticks every
``interval_s`` and logs a warning when a tick comes late by more than ``threshold_ms``, with how
much of that time the garbage collector took.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

log = logging.getLogger("engram.stalls")


def freeze_startup_heap() -> int:
    """Put every object alive once a service has started (modules, classes, pydantic schemas, the
    model and its tokenizer: ~120,000 objects in the memory service) out of the collector's
    reach, and return how many. A full collection otherwise walks them all, every time: 180 ms
    on a 2-core VM, a stall of every request in flight. After this it walks only what was made
    since. Garbage is collected first, so none is frozen; call once, when start-up is done."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GcClock:
    """Time spent in garbage collection, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self.total_s += time.perf_counter() - self._started
            self._started = 0.0


async def watch_stalls(stop: asyncio.Event, *, threshold_ms: float, interval_s: float = 0.05) -> None:
    """Warn about every tick later than ``threshold_ms`` until ``stop`` is set (0 disables)."""
    if threshold_ms <= 0:
        return
    clock = GcClock()
    gc.callbacks.append(clock)
    try:
        while not stop.is_set():
            gc_before, expected = clock.total_s, time.perf_counter() + interval_s
            await asyncio.sleep(interval_s)
            late = (time.perf_counter() - expected) * 1000
            if late > threshold_ms:
                gc_ms = (clock.total_s - gc_before) * 1000
                log.warning("event loop stalled for %.0f ms (garbage collection: %.0f ms of it)", late, gc_ms)
    finally:
        gc.callbacks.remove(clock)
