"""Events → the graph's read model, once per stream sequence (kit's CheckpointedProjector).

Projected aggregates: memories (``MemoryState``), daily logs (``DailyLogState``) and extraction
results (``ExtractionResultState``); every other event on the log is not the graph's. Each event is
one transaction: the aggregate's lock (the sequence it reflects), the node, its edges, and the
consumer's checkpoint. Edge rules:

- ``in_project``: a memory or log → its project's node (created with the first thing in it);
- ``derives``: a log → a memory whose provenance names it, and → each memory of an extraction result;
- ``extends``: a memory → the memory before it (in the graph's order) of its key family in its
  project, and → the memory before it extracted from the same log;
- ``updates``: a memory → a forgotten memory of its key family it followed (the first memory of the
  family after the forgotten one); a memory saved again after being forgotten loses it;
- ``similar``: asked of the memory service after the projection (:mod:`.similar`): a saved or
  changed memory is queued in the same transaction; a forgotten one loses its similar edges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    DEFAULT_LOG_RETENTION_DAYS,
    EXTRACTION_RESULT_AGGREGATE,
    DailyLogState,
    ExtractionResultState,
)
from contracts.envelope import EventEnvelope
from contracts.graph import MEMORY_AGGREGATE, EdgeType, GraphEdge
from contracts.memory import MemoryState
from kit.command_log import OutcomeRecord
from kit.projector import CheckpointedProjector
from services.graph.application.ports import GraphStore, GraphTx, SimilarTask
from services.graph.domain.model import log_node_id, log_row, memory_node_id, memory_row, project_node_id

#: the live consumer's checkpoint
PROJECTOR = "graph-projector"


def aggregate_key(event: EventEnvelope) -> tuple[str, str] | None:
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

    async def project(self, event: EventEnvelope, seq: int, checkpoint: str) -> bool:
        return await self.projector.project(event, seq, checkpoint)

    async def prepare(self, batch: Sequence[tuple[EventEnvelope, int]]) -> None:
        """Learn with one query which of a fetched batch's events are projected already (after a
        replay the live consumer sees every event again): those then cost no transaction."""
        keys = [k for k in (aggregate_key(event) for event, _ in batch) if k is not None]
        if keys:
            self.projector.note_applied(await self.store.applied(keys))

    # memories ------------------------------------------------------------------------------
    async def apply_memory(self, event: EventEnvelope, seq: int, checkpoint: str | None) -> bool:
        """A memory's node (current version), its project, and its edges."""
        state = MemoryState.model_validate(event.data)
        row = memory_row(state)
        tenant = state.tenant
        if self.projector.known_applied((tenant, row.id), seq, checkpoint):
            return False
        queued = False

        async def write(tx: GraphTx, _: OutcomeRecord | None) -> bool:
            nonlocal queued
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
            if row.forgotten:
                await tx.drop_edges_touching(tenant, row.id, EdgeType.SIMILAR)
                await tx.unqueue_similar(tenant, row.id)
            elif before is None or before.forgotten or before.version != row.version:
                await tx.queue_similar(SimilarTask(tenant, memory_node_id(state.id), state.project, state.version))
                queued = True
            await tx.mark_applied(tenant, row.id, seq)
            return False

        wrote = await self.projector.apply_once(lock=lambda tx: tx.lock(tenant, row.id), write=write, seq=seq,
                                                checkpoint=checkpoint)
        if queued:
            self.on_similar_queued()
        return wrote

    # daily logs ----------------------------------------------------------------------------
    async def apply_log(self, event: EventEnvelope, seq: int, checkpoint: str | None) -> bool:
        """A daily log's node (a document), or its removal when retention deleted it."""
        state = DailyLogState.model_validate(event.data)
        row = log_row(state, self.retention_days)
        tenant = state.tenant
        if self.projector.known_applied((tenant, row.id), seq, checkpoint):
            return False

        async def write(tx: GraphTx, _: OutcomeRecord | None) -> bool:
            if state.deleted:
                await tx.delete_node(tenant, row.id)
            else:
                await tx.touch_project(tenant, state.project, state.updated_at, seq)
                await tx.upsert_node(row, seq)
                await tx.set_edges(tenant, row.id, EdgeType.IN_PROJECT, [project_node_id(state.project)])
            await tx.mark_applied(tenant, row.id, seq)
            return False

        return await self.projector.apply_once(lock=lambda tx: tx.lock(tenant, row.id), write=write, seq=seq,
                                               checkpoint=checkpoint)

    # extraction results --------------------------------------------------------------------
    async def apply_result(self, event: EventEnvelope, seq: int, checkpoint: str | None) -> bool:
        """A log → each memory one extraction task produced from it (``derives``)."""
        result = ExtractionResultState.model_validate(event.data)
        key = f"result:{result.id}"
        source = log_node_id(result.log_id)
        if self.projector.known_applied((result.tenant, key), seq, checkpoint):
            return False

        async def write(tx: GraphTx, _: OutcomeRecord | None) -> bool:
            await tx.add_edges(result.tenant, [GraphEdge(source=source, target=memory_node_id(m), type=EdgeType.DERIVES)
                                               for m in result.memory_ids])
            await tx.mark_applied(result.tenant, key, seq)
            return False

        return await self.projector.apply_once(lock=lambda tx: tx.lock(result.tenant, key), write=write, seq=seq,
                                               checkpoint=checkpoint)
