"""What the graph application needs from its adapters: the read model (Postgres) and the
memory service's nearest neighbours."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from contracts.graph import EdgeType, GraphEdge, NodeType, SimilarMemoryList
from kit.command_log import OutcomeRecord
from services.graph.domain.model import NodeRow
from services.graph.domain.slice import BatchScope, SimilarTask

__all__ = ["BatchScope", "SimilarTask"]  # re-exported: the adapters name them here


@dataclass(frozen=True)
class PageFilter:
    tenant: str
    project: str | None = None
    node_types: tuple[NodeType, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None
    as_of: datetime | None = None  # the graph as it stood then


class GraphWrites(Protocol):
    """What the projection's rules do in a transaction: on Postgres statement by statement
    (:class:`GraphTx`), or on a batch's slice loaded in memory (:class:`services.graph.domain.slice.GraphSlice`)."""

    async def advance_checkpoint(self, projection: str, seq: int) -> None: ...

    async def lock(self, tenant: str, key: str) -> int | None:
        """Lock an aggregate's projection (a memory, a log, a result) and return the stream
        sequence it reflects (None: nothing yet)."""

    async def mark_applied(self, tenant: str, key: str, seq: int) -> None: ...

    async def upsert_node(self, row: NodeRow, seq: int) -> tuple[int, NodeRow | None]:
        """Write the node; returns its order number (a new node gets the next one) and the row it
        had before (None when it is new)."""

    async def touch_project(self, tenant: str, project: str, at: datetime, seq: int) -> None:
        """Create the project's node if missing (with the next order number), else move its updated_at."""

    async def delete_node(self, tenant: str, node_id: str) -> None:
        """Remove a node and every edge touching it."""

    async def set_edges(self, tenant: str, source: str, type: EdgeType, targets: Sequence[str]) -> None:
        """Make ``targets`` the only edges of ``type`` from ``source``."""

    async def add_edges(self, tenant: str, edges: Sequence[GraphEdge]) -> None: ...

    async def drop_edges_touching(self, tenant: str, node_id: str, type: EdgeType) -> None: ...

    async def drop_edges_into(self, tenant: str, target: str, type: EdgeType) -> None: ...

    async def previous_in_family(self, tenant: str, project: str, family: str, before: int) -> str | None: ...

    async def previous_from_log(self, tenant: str, log_id: str, before: int) -> str | None: ...

    async def next_in_family(self, tenant: str, project: str, family: str, after: int) -> str | None: ...

    async def forgotten_without_successor(self, tenant: str, project: str, family: str, before: int) -> list[str]: ...

    async def queue_similar(self, task: SimilarTask) -> None: ...

    async def unqueue_similar(self, tenant: str, memory_id: str) -> None: ...


class GraphTx(GraphWrites, Protocol):
    """One projection transaction."""

    async def record_outcome(self, outcome: OutcomeRecord) -> None: ...


class GraphStore(Protocol):
    """The graph's read model."""

    def transaction(self) -> AbstractAsyncContextManager[GraphTx]: ...

    def bulk(self, scope: BatchScope) -> AbstractAsyncContextManager[GraphWrites]:
        """One transaction for a batch: ``scope`` of the read model loaded into a slice first,
        the slice's changes (and its checkpoint) written back on a clean exit."""

    async def checkpoint(self, projection: str) -> int: ...

    async def applied(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The stream sequence each (tenant, aggregate key) reflects (absent: nothing yet)."""

    async def page(self, f: PageFilter, after: int, limit: int) -> list[tuple[int, NodeRow]]: ...

    async def page_with_edges(self, f: PageFilter, after: int, limit: int) -> tuple[list[tuple[int, NodeRow]],
                                                                                   list[GraphEdge]]:
        """The nodes after ``after`` in order, ``limit`` + 1 at most (the extra one says that a next
        page exists), and the edges of the first ``limit`` — one round trip."""

    async def count(self, f: PageFilter) -> int: ...

    async def page_edges(self, f: PageFilter, ids: Sequence[str], last: int) -> list[GraphEdge]:
        """The edges of a page given its nodes (``last``: the largest order number among them)."""

    async def related(self, tenant: str, project: str | None, ids: Sequence[str], limit: int,
                      min_score: float) -> dict[str, tuple[int | None, bool, list[tuple[str, float]]]]:
        """Each of ``ids`` that is a live memory node (within ``project`` when given): its version,
        whether its similar edges are current (not queued for a newer round), and its ``limit``
        strongest similar edges at ``min_score`` or above to live memories (target, weight) — one
        round trip."""

    async def claim_similar(self, limit: int) -> list[SimilarTask]: ...

    async def set_similar(self, task: SimilarTask, found: SimilarMemoryList | None, *, offer_limit: int = 0) -> bool:
        """Replace the memory's similar edges with ``found`` and take it off the queue, if the queue
        still holds this version (else a newer one is waiting): returns whether it did. ``found``
        None: the memory is gone or forgotten; its edges go. ``offer_limit`` > 0: the memory is
        offered to each found neighbour's own list too, kept to that many
        (:func:`services.graph.domain.similar.offer`; not to a forgotten neighbour). For a changed
        memory (version > 1), the edges into it that an older version earned and its neighbours did
        not take again go: their weight was another text's. Each live source that lost such an edge
        is queued again (at its own version), since its own nearest neighbours may still hold the
        new text; its round removes only edges weighed against an older version of it, so this
        does not cascade. The nodes of those sources are locked with the memory's and its
        neighbours' (in key order) before any edge row is written."""

    async def retry_similar(self, task: SimilarTask, delay_s: float, max_attempts: int) -> None: ...

    async def similar_backlog(self) -> int: ...

    async def drop_read_model(self) -> None: ...


class NeighboursUnavailable(Exception):
    """The memory service did not answer (down, busy): ask again later."""


class Neighbours(Protocol):
    """The memory service's nearest neighbours of memories (its vector index)."""

    async def similar(self, tasks: Sequence[SimilarTask], limit: int, min_score: float) -> list[SimilarMemoryList]:
        """The neighbours of each of ``tasks`` (one tenant and project), in their order: one ask."""
        ...
