"""Events → the graph's read model, once per stream sequence (kit's CheckpointedProjector).

Projected aggregates: memories (``MemoryState``), daily logs (``DailyLogState``) and extraction
results (``ExtractionResultState``); every other event on the log is not the graph's. A lone event
is one transaction: the aggregate's lock (the sequence it reflects), the node, its edges, and the
consumer's checkpoint; a batch (a replay's, a backlog's) is one transaction for all of its events,
the same rules run on a slice of the read model loaded first (:meth:`GraphProjection.apply_batch`).
Edge rules:

- ``in_project``: a memory or log → its project's node (created with the first thing in it);
- ``derives``: a log → a memory whose provenance names it, and → each memory of an extraction result;
- ``extends``: a memory → the memory before it (in the graph's order) of its key family in its
  project, and → the memory before it extracted from the same log;
- ``updates``: a memory → a forgotten memory of its key family it followed (the first memory of the
  family after the forgotten one); a memory saved again after being forgotten loses it; and a
  memory → the memory it superseded (a changed fact, ``superseded_by``: docs/memory-truth.md);
- ``similar``: asked of the memory service after the projection (:mod:`.similar`): a saved or
  changed memory is queued in the same transaction (its neighbours' lists are offered it then,
  and a changed one's edges from lists that do not take it again go); a forgotten one loses its
  similar edges.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    DEFAULT_LOG_RETENTION_DAYS,
    EXTRACTION_RESULT_AGGREGATE,
    DailyLogState,
    ExtractionResultState,
)
from contracts.envelope import EventEnvelope
from contracts.events import Event
from contracts.graph import EdgeType, GraphEdge
from contracts.memory import MEMORY_AGGREGATE, MemoryState
from kit.command_log import OutcomeRecord
from kit.events import known
from kit.projector import CheckpointedProjector
from services.graph.application.ports import BatchScope, GraphStore, GraphTx, GraphWrites, SimilarTask
from services.graph.domain.model import (
    NodeRow,
    log_node_id,
    log_row,
    memory_node_id,
    memory_row,
    project_node_id,
)

#: the live consumer's checkpoint
PROJECTOR = "graph-projector"


def aggregate_key(event: Event[Any] | EventEnvelope) -> tuple[str, str] | None:
    """The key under which the graph records what an event's aggregate reflects (None: not the graph's)."""
    if event.aggregate == MEMORY_AGGREGATE:
        return event.tenant, memory_node_id(event.aggregate_id)
    if event.aggregate == DAILY_LOG_AGGREGATE:
        return event.tenant, log_node_id(event.aggregate_id)
    if event.aggregate == EXTRACTION_RESULT_AGGREGATE:
        return event.tenant, f"result:{event.aggregate_id}"
    return None


class GraphProjection:
    """Applies memory, daily-log and extraction-result events to the graph."""

    def __init__(self, store: GraphStore, *, retention_days: int = DEFAULT_LOG_RETENTION_DAYS,
                 on_similar_queued: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.retention_days = retention_days
        self.on_similar_queued = on_similar_queued
        self.projector: CheckpointedProjector[GraphTx] = CheckpointedProjector(store, prepare=self.prepare)
        self.projector.route(MEMORY_AGGREGATE, self.apply_memory)
        self.projector.route(DAILY_LOG_AGGREGATE, self.apply_log)
        self.projector.route(EXTRACTION_RESULT_AGGREGATE, self.apply_result)

    async def project(self, event: Event[Any] | EventEnvelope, seq: int, checkpoint: str) -> bool:
        return await self.projector.project(event, seq, checkpoint)

    async def prepare(self, batch: Sequence[tuple[Event[Any], int]]) -> None:
        """Learn with one query which of a fetched batch's events are projected already (after a
        replay the live consumer sees every event again): those then cost no transaction. Not
        for a lone event (its transaction finds out as cheaply; the query would only delay it)."""
        if len(batch) < 2:
            return
        keys = [k for k in (aggregate_key(event) for event, _ in batch) if k is not None]
        if keys:
            self.projector.note_applied(await self.store.applied(keys))

    # memories ------------------------------------------------------------------------------
    async def apply_memory(self, event: Event[MemoryState], seq: int, checkpoint: str | None) -> bool:
        """A memory's node (current version), its project, and its edges."""
        state = event.data
        row = memory_row(state)
        if self.projector.known_applied((row.tenant, row.id), seq, checkpoint):
            return False
        queued = False

        async def write(tx: GraphTx, _: OutcomeRecord | None) -> bool:
            nonlocal queued
            queued = await self.write_memory(tx, state, row, seq)
            return False

        wrote = await self.projector.apply_once(lock=lambda tx: tx.lock(row.tenant, row.id), write=write, seq=seq,
                                                checkpoint=checkpoint)
        if queued:
            self.on_similar_queued()
        return wrote

    @staticmethod
    async def write_memory(tx: GraphWrites, state: MemoryState, row: NodeRow, seq: int) -> bool:
        """The memory's rules in ``tx``; returns whether it queued the memory for its neighbours."""
        tenant = row.tenant
        queued = False
        await tx.touch_project(tenant, state.project, state.updated_at, seq)
        order, before = await tx.upsert_node(row, seq)
        await tx.set_edges(tenant, row.id, EdgeType.IN_PROJECT, [project_node_id(state.project)])
        if row.log_id is not None:
            await tx.add_edges(tenant, [GraphEdge(source=row.log_id, target=row.id, type=EdgeType.DERIVES)])
        extends = []
        if row.family is not None:
            prev = await tx.previous_in_family(tenant, row.project, row.family, order)
            if prev is not None:
                extends.append(prev)
        if row.log_id is not None:
            prev = await tx.previous_from_log(tenant, row.log_id, order)
            if prev is not None and prev not in extends:
                extends.append(prev)
        await tx.set_edges(tenant, row.id, EdgeType.EXTENDS, extends)
        if row.family is not None:
            if row.forgotten:
                successor = await tx.next_in_family(tenant, row.project, row.family, order)
                if successor is not None:
                    await tx.add_edges(tenant, [GraphEdge(source=successor, target=row.id, type=EdgeType.UPDATES)])
            elif before is None:
                olds = await tx.forgotten_without_successor(tenant, row.project, row.family, order)
                await tx.add_edges(tenant, [GraphEdge(source=row.id, target=o, type=EdgeType.UPDATES) for o in olds])
            elif before.forgotten:  # saved again: no longer superseded
                await tx.drop_edges_into(tenant, row.id, EdgeType.UPDATES)
        if state.superseded_by is not None:  # a changed fact: the memory that said what changed updates this one
            await tx.add_edges(tenant, [GraphEdge(source=memory_node_id(state.superseded_by.memory_id), target=row.id,
                                                  type=EdgeType.UPDATES)])
        if row.forgotten:
            # off the queue first: a similar-edge round writing this memory's edges right now holds
            # its queue row, so the delete below runs after that round committed and takes its edges too
            await tx.unqueue_similar(tenant, row.id)
            await tx.drop_edges_touching(tenant, row.id, EdgeType.SIMILAR)
        elif before is None or before.forgotten or before.version != row.version:
            await tx.queue_similar(SimilarTask(tenant, memory_node_id(state.id), state.project, state.version))
            queued = True
        await tx.mark_applied(tenant, row.id, seq)
        return queued

    # daily logs ----------------------------------------------------------------------------
    async def apply_log(self, event: Event[DailyLogState], seq: int, checkpoint: str | None) -> bool:
        """A daily log's node (a document), or its removal when retention deleted it."""
        state = event.data
        row = log_row(state, self.retention_days)
        if self.projector.known_applied((row.tenant, row.id), seq, checkpoint):
            return False

        async def write(tx: GraphTx, _: OutcomeRecord | None) -> bool:
            await self.write_log(tx, state, row, seq)
            return False

        return await self.projector.apply_once(lock=lambda tx: tx.lock(row.tenant, row.id), write=write, seq=seq,
                                               checkpoint=checkpoint)

    @staticmethod
    async def write_log(tx: GraphWrites, state: DailyLogState, row: NodeRow, seq: int) -> None:
        tenant = row.tenant
        if state.deleted:
            await tx.delete_node(tenant, row.id)
        else:
            await tx.touch_project(tenant, state.project, state.updated_at, seq)
            await tx.upsert_node(row, seq)
            await tx.set_edges(tenant, row.id, EdgeType.IN_PROJECT, [project_node_id(state.project)])
        await tx.mark_applied(tenant, row.id, seq)

    # extraction results --------------------------------------------------------------------
    async def apply_result(self, event: Event[ExtractionResultState], seq: int, checkpoint: str | None) -> bool:
        """A log → each memory one extraction task produced from it (``derives``)."""
        result = event.data
        key = result_key(result)
        if self.projector.known_applied((result.tenant, key), seq, checkpoint):
            return False

        async def write(tx: GraphTx, _: OutcomeRecord | None) -> bool:
            await self.write_result(tx, result, seq)
            return False

        return await self.projector.apply_once(lock=lambda tx: tx.lock(result.tenant, key), write=write, seq=seq,
                                               checkpoint=checkpoint)

    @staticmethod
    async def write_result(tx: GraphWrites, result: ExtractionResultState, seq: int) -> None:
        source = log_node_id(result.log_id)
        await tx.add_edges(result.tenant, [GraphEdge(source=source, target=memory_node_id(m), type=EdgeType.DERIVES)
                                           for m in result.memory_ids])
        await tx.mark_applied(result.tenant, result_key(result), seq)

    # a batch in bulk -----------------------------------------------------------------------
    async def apply_batch(self, batch: Sequence[tuple[Event[Any] | EventEnvelope, int]], checkpoint: str) -> int:
        """A fetched batch in one transaction (a replay's, :func:`kit.replay.rebuild`, and the live
        consumer's backlog): the part of the read model the batch's rules can read is loaded once
        (:class:`~services.graph.domain.slice.GraphSlice`), the same rules as :meth:`project` run on
        it event by event in stream order, and what they changed is written back with a few
        set-based statements and the checkpoint. The result is the one event-by-event projection
        gives (same nodes, order numbers and edges: tested). Returns how many events it wrote."""
        steps: list[tuple[tuple[str, str], int, Callable[[GraphWrites], Awaitable[bool]]]] = []
        scope = BatchScope()
        for event, seq in known(batch):  # (typed already, from kit's consumer or replay)
            if isinstance(state := event.data, MemoryState):
                row = memory_row(state)
                scope.add_node(row)
                steps.append(((row.tenant, row.id), seq, partial(self.write_memory, state=state, row=row, seq=seq)))
            elif isinstance(log := event.data, DailyLogState):
                row = log_row(log, self.retention_days)
                scope.add_node(row)
                steps.append(((row.tenant, row.id), seq, partial(_no_queue, self.write_log, state=log, row=row, seq=seq)))
            elif isinstance(result := event.data, ExtractionResultState):
                scope.keys.add((result.tenant, result_key(result)))
                steps.append(((result.tenant, result_key(result)), seq,
                              partial(_no_queue, self.write_result, result=result, seq=seq)))
        if not batch:
            return 0
        written, queued = 0, False
        async with self.store.bulk(scope) as tx:
            for (tenant, key), seq, step in steps:
                applied = await tx.lock(tenant, key)
                if applied is None or applied < seq:
                    queued = await step(tx) or queued
                    written += 1
            await tx.advance_checkpoint(checkpoint, max(seq for _, seq in batch))
        if queued:
            self.on_similar_queued()
        return written


def result_key(result: ExtractionResultState) -> str:
    """What an extraction result's projection is recorded under."""
    return f"result:{result.id}"


async def _no_queue(write: Callable[..., Awaitable[None]], tx: GraphWrites, **kw: object) -> bool:
    await write(tx, **kw)
    return False
