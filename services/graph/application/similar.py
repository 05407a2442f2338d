"""``similar`` edges: each memory's nearest neighbours, asked of the memory service after the
projection, off the projection's path.

The projection queues a memory (tenant, id, version) in the transaction that writes its node (a new
memory, a new version, a memory saved again after being forgotten); this worker drains the queue:
it asks the memory service for the neighbours of what is due, a tenant's project at a time
(:class:`contracts.graph.SimilarMemories`: one read and one batch of searches in its vector
index, within the project; a burst of saves is gathered for ``linger_s`` first) and replaces each
memory's ``similar`` edges — only if the queue still holds that version, so a late answer never
overwrites a newer one, and a second worker or a retry writes the same edges again (idempotent).
Similarity is symmetric, so the memory is offered to each neighbour's list too
(:mod:`services.graph.domain.similar`): a neighbour saved earlier gains a closer memory that
arrived after it. A memory the memory service does not know yet (its
read model is behind the event log), or an older version of it, is asked again a little later; an
unreachable memory service leaves the queue for later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from contracts.graph import MAX_SIMILAR_MEMORIES
from services.graph.application.ports import GraphStore, Neighbours, NeighboursUnavailable, SimilarTask

log = logging.getLogger("engram.graph.similar")


class SimilarEdges:
    def __init__(
        self, store: GraphStore, neighbours: Neighbours, *, limit: int = 5, min_score: float = 0.6, batch: int = 32,
        concurrency: int = 4, retry_delay_s: float = 0.5, max_attempts: int = 10, linger_s: float = 0.2,
    ) -> None:
        self.store = store
        self.neighbours = neighbours
        self.limit = limit
        self.min_score = min_score
        self.batch = min(batch, MAX_SIMILAR_MEMORIES)
        self.retry_delay_s = retry_delay_s
        self.max_attempts = max_attempts
        self.linger_s = linger_s
        self._gate = asyncio.Semaphore(concurrency)
        self.wake = asyncio.Event()
        self.done = 0

    def queued(self) -> None:
        """The projection queued something."""
        self.wake.set()

    async def some(self, tasks: list[SimilarTask]) -> None:
        """Ask for the neighbours of ``tasks`` (one tenant's project) at once, then write each one's edges."""
        async with self._gate:
            try:
                answers = await self.neighbours.similar(tasks, self.limit, self.min_score)
            except NeighboursUnavailable as exc:
                log.debug("similar for %d memories later: %s", len(tasks), exc)
                for task in tasks:
                    await self.store.retry_similar(task, self.retry_delay_s * 4, self.max_attempts * 10)
                return
            for task, found in zip(tasks, answers, strict=True):
                if not found.found or (found.version is not None and found.version < task.version):
                    await self.store.retry_similar(task, self.retry_delay_s, self.max_attempts)
                elif await self.store.set_similar(task, found, offer_limit=self.limit):
                    self.done += 1

    async def drain(self) -> int:
        """One round over what is due; returns how many were taken."""
        tasks = await self.store.claim_similar(self.batch)
        groups: dict[tuple[str, str], list[SimilarTask]] = {}
        for task in tasks:
            groups.setdefault((task.tenant, task.project), []).append(task)
        await asyncio.gather(*(self.some(group) for group in groups.values()))
        return len(tasks)

    async def run(self, stop: asyncio.Event, idle_s: float = 1.0) -> None:
        """Drain the queue until ``stop``; between rounds wait for the projection's signal (or
        ``idle_s``, for retries that come due). After a signal, linger ``linger_s`` so that a burst
        of saves is asked for in one batch rather than one by one."""
        while not stop.is_set():
            self.wake.clear()  # before the round: a signal during it is kept for the wait below
            try:
                taken = await self.drain()
            except Exception:
                log.exception("similar edges round failed")
                taken = 0
            if taken >= self.batch:
                continue
            waiter = asyncio.ensure_future(self.wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, timeout=idle_s, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
            if self.linger_s > 0 and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.linger_s)
