"""A slice of the graph's read model held in memory while a batch of events is projected in bulk.

The projection's rules (:mod:`services.graph.application.projection`) read and write the read model
through one transaction's operations (``GraphTx``). For a batch, the adapter loads once the part of
the read model those rules can read — the batch's own nodes and every edge touching them, the nodes
of the key families, provenance logs and projects the batch names, the ``updates`` edges into those
nodes, what each aggregate reflects, and where the order sequence stands — into a
:class:`GraphSlice`; the rules then run on it event by event, in stream order, exactly as they run
on Postgres (same answers, same order numbers), and :meth:`GraphSlice.changes` is what the adapter
writes back in a few set-based statements. No I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from contracts.graph import EdgeType, GraphEdge
from services.graph.domain.model import NodeRow, project_node_id, project_row

#: (tenant, node id)
NodeKey = tuple[str, str]
#: (tenant, source, type, target) — the edges table's primary key
EdgeKey = tuple[str, str, str, str]


@dataclass(frozen=True)
class SimilarTask:
    """A memory whose neighbours are wanted (queued when its content may have changed)."""

    tenant: str
    memory_id: str
    project: str
    version: int
    attempts: int = 0


@dataclass
class BatchScope:
    """What a batch's rules may read, named before the batch runs (the adapter loads it)."""

    nodes: set[NodeKey] = field(default_factory=set)  # the batch's own nodes (memories, logs)
    projects: set[NodeKey] = field(default_factory=set)  # (tenant, project node id) of those
    families: set[tuple[str, str, str]] = field(default_factory=set)  # (tenant, project, family)
    logs: set[NodeKey] = field(default_factory=set)  # (tenant, log node id) named as provenance
    keys: set[NodeKey] = field(default_factory=set)  # (tenant, aggregate key) of ``applied``

    def add_node(self, row: NodeRow) -> None:
        self.nodes.add((row.tenant, row.id))
        self.keys.add((row.tenant, row.id))
        self.projects.add((row.tenant, project_node_id(row.project)))
        if row.family is not None:
            self.families.add((row.tenant, row.project, row.family))
        if row.log_id is not None:
            self.logs.add((row.tenant, row.log_id))


@dataclass
class SliceChanges:
    """What a batch changed, to be written back (deletions first)."""

    node_deletes: list[NodeKey]
    node_upserts: list[tuple[int, NodeRow]]
    edge_deletes: list[EdgeKey]
    edge_upserts: list[tuple[EdgeKey, float | None]]
    similar_drops: list[NodeKey]  # every 'similar' edge touching these goes (also one written meanwhile)
    count_deltas: dict[tuple[str, str, str], int]  # (tenant, project, type) -> nodes added
    applied: dict[NodeKey, int]
    unqueue: list[NodeKey]
    queue: list[SimilarTask]  # after ``unqueue``; kept only over an older version (as queue_similar)
    last_order: int | None  # the order sequence's new last value (None: nothing drawn)
    checkpoints: dict[str, int]


class GraphSlice:
    """The loaded part of the read model, with the projection transaction's operations."""

    def __init__(self, nodes: Iterable[tuple[int, NodeRow]], edges: Iterable[tuple[EdgeKey, float | None]],
                 applied: dict[NodeKey, int], next_order: int) -> None:
        self._nodes: dict[NodeKey, tuple[int, NodeRow]] = {}
        self._by_family: dict[tuple[str, str, str], set[NodeKey]] = defaultdict(set)
        self._by_log: dict[NodeKey, set[NodeKey]] = defaultdict(set)
        for order, row in nodes:
            self._put(order, row)
        self._base_nodes = dict(self._nodes)
        self._edges: dict[EdgeKey, float | None] = {}
        self._touching: dict[NodeKey, set[EdgeKey]] = defaultdict(set)
        for key, weight in edges:
            self._add_edge(key, weight)
        self._base_edges = dict(self._edges)
        self._applied = dict(applied)
        self._dirty_applied: set[NodeKey] = set()
        self._first_order = self._next_order = next_order
        self._dirty_nodes: set[NodeKey] = set()
        self._counts: dict[tuple[str, str, str], int] = {}
        self._similar_drops: set[NodeKey] = set()
        self._queue: dict[NodeKey, SimilarTask | None] = {}  # None: unqueued (then maybe queued again)
        self._unqueued: set[NodeKey] = set()
        self._checkpoints: dict[str, int] = {}

    # the indexes -----------------------------------------------------------------------------
    def _put(self, order: int, row: NodeRow) -> None:
        key = (row.tenant, row.id)
        self._drop(key)
        self._nodes[key] = (order, row)
        if row.family is not None:
            self._by_family[(row.tenant, row.project, row.family)].add(key)
        if row.log_id is not None:
            self._by_log[(row.tenant, row.log_id)].add(key)

    def _drop(self, key: NodeKey) -> tuple[int, NodeRow] | None:
        found = self._nodes.pop(key, None)
        if found is not None:
            row = found[1]
            if row.family is not None:
                self._by_family[(row.tenant, row.project, row.family)].discard(key)
            if row.log_id is not None:
                self._by_log[(row.tenant, row.log_id)].discard(key)
        return found

    def _add_edge(self, key: EdgeKey, weight: float | None) -> None:
        self._edges[key] = weight
        self._touching[(key[0], key[1])].add(key)
        self._touching[(key[0], key[3])].add(key)

    def _remove_edges(self, keys: Iterable[EdgeKey]) -> None:
        for key in list(keys):
            del self._edges[key]
            self._touching[(key[0], key[1])].discard(key)
            self._touching[(key[0], key[3])].discard(key)

    def _edges_of(self, tenant: str, node_id: str) -> set[EdgeKey]:
        return self._touching.get((tenant, node_id), set())

    # what the projection transaction does ---------------------------------------------------
    async def advance_checkpoint(self, projection: str, seq: int) -> None:
        self._checkpoints[projection] = max(seq, self._checkpoints.get(projection, 0))

    async def lock(self, tenant: str, key: str) -> int | None:
        return self._applied.get((tenant, key)) or None

    async def mark_applied(self, tenant: str, key: str, seq: int) -> None:
        self._applied[(tenant, key)] = seq
        self._dirty_applied.add((tenant, key))

    def _insert(self, row: NodeRow) -> int:
        order = self._next_order
        self._next_order += 1
        self._put(order, row)
        self._dirty_nodes.add((row.tenant, row.id))
        count = (row.tenant, row.project, row.type.value)
        self._counts[count] = self._counts.get(count, 0) + 1
        return order

    async def upsert_node(self, row: NodeRow, seq: int) -> tuple[int, NodeRow | None]:
        found = self._nodes.get((row.tenant, row.id))
        if found is None:
            return self._insert(row), None
        order, before = found
        self._put(order, row)
        self._dirty_nodes.add((row.tenant, row.id))
        return order, before

    async def touch_project(self, tenant: str, project: str, at: datetime, seq: int) -> None:
        key = (tenant, project_node_id(project))
        found = self._nodes.get(key)
        if found is None:
            self._insert(project_row(tenant, project, at))
        elif found[1].updated_at < at:
            self._nodes[key] = (found[0], replace(found[1], updated_at=at))  # a project is in no family or log
            self._dirty_nodes.add(key)

    async def delete_node(self, tenant: str, node_id: str) -> None:
        self._remove_edges(self._edges_of(tenant, node_id))
        gone = self._drop((tenant, node_id))
        if gone is not None:
            self._dirty_nodes.add((tenant, node_id))
            count = (tenant, gone[1].project, gone[1].type.value)
            self._counts[count] = self._counts.get(count, 0) - 1

    async def set_edges(self, tenant: str, source: str, type: EdgeType, targets: Sequence[str]) -> None:
        self._remove_edges(k for k in self._edges_of(tenant, source)
                           if k[1] == source and k[2] == type.value and k[3] not in targets)
        for target in targets:
            if (tenant, source, type.value, target) not in self._edges:
                self._add_edge((tenant, source, type.value, target), None)

    async def add_edges(self, tenant: str, edges: Sequence[GraphEdge]) -> None:
        for e in edges:
            self._add_edge((tenant, e.source, e.type.value, e.target), e.weight)

    async def drop_edges_touching(self, tenant: str, node_id: str, type: EdgeType) -> None:
        self._remove_edges(k for k in self._edges_of(tenant, node_id) if k[2] == type.value)
        if type is EdgeType.SIMILAR:
            self._similar_drops.add((tenant, node_id))

    async def drop_edges_into(self, tenant: str, target: str, type: EdgeType) -> None:
        self._remove_edges(k for k in self._edges_of(tenant, target) if k[2] == type.value and k[3] == target)

    def _members(self, keys: Iterable[NodeKey]) -> list[tuple[int, str]]:
        return sorted((self._nodes[k][0], k[1]) for k in keys)

    async def previous_in_family(self, tenant: str, project: str, family: str, before: int) -> str | None:
        found = [i for s, i in self._members(self._by_family.get((tenant, project, family), ())) if s < before]
        return found[-1] if found else None

    async def previous_from_log(self, tenant: str, log_id: str, before: int) -> str | None:
        found = [i for s, i in self._members(self._by_log.get((tenant, log_id), ())) if s < before]
        return found[-1] if found else None

    async def next_in_family(self, tenant: str, project: str, family: str, after: int) -> str | None:
        found = [i for s, i in self._members(self._by_family.get((tenant, project, family), ())) if s > after]
        return found[0] if found else None

    async def forgotten_without_successor(self, tenant: str, project: str, family: str, before: int) -> list[str]:
        out = []
        for s, node_id in self._members(self._by_family.get((tenant, project, family), ())):
            superseded = any(k[2] == EdgeType.UPDATES.value and k[3] == node_id for k in self._edges_of(tenant, node_id))
            if s < before and self._nodes[(tenant, node_id)][1].forgotten and not superseded:
                out.append(node_id)
        return out

    async def queue_similar(self, task: SimilarTask) -> None:
        key = (task.tenant, task.memory_id)
        held = self._queue.get(key)
        if held is None or held.version < task.version:
            self._queue[key] = task

    async def unqueue_similar(self, tenant: str, memory_id: str) -> None:
        self._queue[(tenant, memory_id)] = None
        self._unqueued.add((tenant, memory_id))

    # what to write back ----------------------------------------------------------------------
    def changes(self) -> SliceChanges:
        """Everything the batch changed (nodes and edges as they end, the rest as deltas)."""
        node_deletes = [k for k in self._dirty_nodes if k not in self._nodes and k in self._base_nodes]
        node_upserts = [self._nodes[k] for k in self._dirty_nodes if k in self._nodes]
        edge_deletes = [k for k in self._base_edges if k not in self._edges]
        edge_upserts = [(k, w) for k, w in self._edges.items()
                        if k not in self._base_edges or self._base_edges[k] != w]
        return SliceChanges(
            node_deletes=sorted(node_deletes),
            node_upserts=sorted(node_upserts, key=lambda x: (x[1].tenant, x[1].id)),
            edge_deletes=sorted(edge_deletes), edge_upserts=sorted(edge_upserts, key=lambda x: x[0]),
            similar_drops=sorted(self._similar_drops), count_deltas=dict(self._counts),
            applied={k: self._applied[k] for k in self._dirty_applied},
            unqueue=sorted(self._unqueued), queue=[t for t in self._queue.values() if t is not None],
            last_order=self._next_order - 1 if self._next_order > self._first_order else None,
            checkpoints=dict(self._checkpoints),
        )
