"""The memory service's index maintenance loop (services/memory/main.py, maintain_index): the
embedded index is flushed on its schedule and optimised when idle, and also under steady writes
once enough points wait for an index; a shard of many segments is compacted beside the loop."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from kit import metrics
from services.memory.main import maintain_index

pytestmark = pytest.mark.unit


class FakeIndex:
    optimizes_itself = False

    def __init__(self, unindexed: int, *, worthwhile: bool = True) -> None:
        self.unindexed = unindexed
        self.worthwhile = worthwhile
        self.optimised = 0
        self.flush_checks = 0

    def unindexed_points(self) -> int:
        return self.unindexed

    def needs_optimize(self) -> bool:
        return self.worthwhile and self.unindexed > 0

    async def optimize(self) -> bool:
        self.optimised += 1
        self.unindexed = 0
        return True

    async def flush_if_due(self) -> bool:
        self.flush_checks += 1
        return False

    def needs_compaction(self) -> bool:
        return False

    def segments(self) -> int:
        return 3


class SegmentedIndex(FakeIndex):
    """Many segments: a compaction is due until one finishes; ``compact`` runs until released."""

    def __init__(self, unindexed: int = 0, *, fails: bool = False) -> None:
        super().__init__(unindexed)
        self.segmented, self.fails = True, fails
        self.started = 0
        self.cancelled = 0
        self.release = asyncio.Event()

    def needs_compaction(self) -> bool:
        return self.segmented

    def segments(self) -> int:
        return 7 if self.segmented else 2

    async def compact(self) -> object | None:
        self.started += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fails:
            raise RuntimeError("no room for the copy")
        self.segmented = False
        return "merged"


async def run_ticks(index: Any, *, busy: bool, ticks: int = 5, steady_points: int = 1000,
                    during: Any = None) -> None:
    """Run the loop for ``ticks`` ticks; ``busy``: a command was handled just now at every tick;
    ``during(tick)``: called after each tick."""
    loop = asyncio.get_running_loop()
    service = SimpleNamespace(last_activity=loop.time() if busy else loop.time() - 3600)
    stop = asyncio.Event()
    task = asyncio.create_task(maintain_index(SimpleNamespace(index=index, service=service), stop,  # type: ignore[arg-type]
                                              tick_s=0.001, idle_s=5.0, steady_points=steady_points))
    for tick in range(ticks):
        if busy:
            service.last_activity = loop.time()
        await asyncio.sleep(0.01)
        if during is not None:
            during(tick)
    stop.set()
    await task


async def test_steady_writes_with_many_unindexed_points_optimise() -> None:
    index = FakeIndex(unindexed=1500)
    await run_ticks(index, busy=True)
    assert index.optimised == 1 and index.flush_checks > 0


async def test_steady_writes_with_few_unindexed_points_wait() -> None:
    index = FakeIndex(unindexed=999)
    await run_ticks(index, busy=True)
    assert index.optimised == 0 and index.flush_checks > 0


async def test_idle_optimises_a_worthwhile_batch_only() -> None:
    worthwhile = FakeIndex(unindexed=200)
    await run_ticks(worthwhile, busy=False)
    assert worthwhile.optimised == 1
    small = FakeIndex(unindexed=200, worthwhile=False)
    await run_ticks(small, busy=False)
    assert small.optimised == 0


async def test_a_failing_maintenance_step_does_not_end_the_loop() -> None:
    class Flaky(FakeIndex):
        async def flush_if_due(self) -> bool:
            self.flush_checks += 1
            if self.flush_checks == 1:
                raise OSError("disk full")
            return False

    index = Flaky(unindexed=1500)
    await run_ticks(index, busy=True)
    assert index.flush_checks > 1 and index.optimised == 1


async def test_an_engine_that_optimises_itself_is_left_alone() -> None:
    index = FakeIndex(unindexed=10**6)
    index.optimizes_itself = True  # type: ignore[misc]
    await run_ticks(index, busy=True)
    assert index.optimised == 0 and index.flush_checks == 0


def compactions(result: str) -> float:
    return metrics.REGISTRY.get_sample_value("engram_vector_index_compactions_total", {"result": result}) or 0.0


async def test_a_segmented_shard_is_compacted_once_at_a_time_and_optimisation_waits_meanwhile() -> None:
    index = SegmentedIndex()
    done_before = compactions("done")

    def points_arrive(tick: int) -> None:
        if tick == 1:  # while the compaction runs: enough new points for an optimisation
            index.unindexed = 5000
        if tick == 3:
            assert index.started == 1 and index.optimised == 0  # one compaction; no optimisation beside it
            index.release.set()

    await run_ticks(index, busy=True, ticks=8, during=points_arrive)
    assert index.started == 1 and index.cancelled == 0 and not index.segmented
    assert index.optimised == 1  # once the compaction was done
    assert index.flush_checks >= 8  # flushes went on all along
    assert compactions("done") == done_before + 1
    assert metrics.REGISTRY.get_sample_value("engram_vector_index_segments") == 2


async def test_stopping_the_service_cancels_a_running_compaction() -> None:
    index = SegmentedIndex()
    await run_ticks(index, busy=True, ticks=3)
    assert index.started == 1 and index.cancelled == 1


async def test_a_failed_compaction_is_logged_and_the_loop_goes_on(caplog: Any) -> None:
    index = SegmentedIndex(fails=True)
    index.release.set()
    failed_before = compactions("failed")
    await run_ticks(index, busy=True, ticks=4)
    assert compactions("failed") >= failed_before + 1
    assert index.started >= 2  # (the real index waits COMPACT_RETRY_S before it says so again)
    assert "compaction did not finish" in caplog.text and index.flush_checks >= 4
