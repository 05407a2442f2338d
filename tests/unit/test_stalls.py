"""The event-loop stall warning: a blocked loop is reported with the garbage collector's share."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref

import pytest

from kit.stalls import freeze_startup_heap, watch_stalls

pytestmark = pytest.mark.unit


async def test_a_blocked_loop_is_reported_with_its_gc_share(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="engram.stalls"):
        watcher = asyncio.create_task(watch_stalls(stop, threshold_ms=40, interval_s=0.01))
        await asyncio.sleep(0.05)
        garbage = [[i] for i in range(200_000)]
        time.sleep(0.12)  # a blocking call on the loop
        gc.collect()
        del garbage
        await asyncio.sleep(0.05)
        stop.set()
        await watcher
    stalls = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert len(stalls) == 1, stalls
    late_ms = float(stalls[0].split("for ")[1].split(" ms")[0])
    gc_ms = float(stalls[0].split("collection: ")[1].split(" ms")[0])
    assert late_ms >= 120 and 0 < gc_ms < late_ms


async def test_a_loop_that_keeps_up_is_quiet_and_zero_disables(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="engram.stalls"):
        watcher = asyncio.create_task(watch_stalls(stop, threshold_ms=500, interval_s=0.01))
        await asyncio.sleep(0.1)
        stop.set()
        await watcher
        await watch_stalls(asyncio.Event(), threshold_ms=0)  # returns at once
    assert not [r for r in caplog.records if "stalled" in r.getMessage()]
    assert all(not isinstance(cb, type(None)) for cb in gc.callbacks)


def test_the_startup_heap_is_frozen_so_full_collections_skip_it() -> None:
    """What is alive when a service has started is frozen, garbage is not: a full collection then
    walks only what was made since."""

    class Node:
        def __init__(self) -> None:
            self.me = self

    startup = [Node() for _ in range(5000)]  # alive at start-up: frozen
    garbage = weakref.ref(Node())  # a reference cycle that is already garbage: collected, not frozen
    try:
        frozen = freeze_startup_heap()
        assert garbage() is None
        assert frozen == gc.get_freeze_count() >= len(startup)
        assert not any(isinstance(o, Node) for o in gc.get_objects())  # none left for the collector to walk
        later = [Node() for _ in range(10)]
        assert sum(isinstance(o, Node) for o in gc.get_objects()) == len(later)
    finally:
        gc.unfreeze()
