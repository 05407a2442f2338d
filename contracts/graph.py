"""The memory graph (graph service contracts): nodes, edges and keyset-paginated pages of them.

Nodes are memories (their current version), daily logs (documents) and projects. Edges:

- ``updates``  — a newer fact superseded an older one (a version chain across memories: same key
  family, the old one forgotten or replaced); source is the newer memory, target the older;
- ``extends``  — facts of one key family (``user.pet.*``) or of one daily log, that add to each other;
- ``derives``  — a daily log → a memory extracted from it (from the memory's provenance);
- ``similar``  — a memory → one of its nearest neighbours above a cosine threshold (the vectors are
  the memory service's: the graph asks it with :class:`SimilarMemories`);
- ``in_project`` — a memory or log → its project node.

A page is ordered by a stable key (the node's creation order in the graph's read model, then id),
so a cursor names the last node a client has seen and every node appears exactly once across pages
even while memories are being written. A page carries the edges whose both ends are on this page or
on an earlier one, so a client that loads every page has every edge exactly once.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from contracts.daily_logs import BoundedDateTime

# the memory service's aggregate (declared in contracts.memory), which the graph projects
from contracts.memory import MEMORY_AGGREGATE as MEMORY_AGGREGATE
from contracts.memory import PROJECT_PATTERN, AsOf
from contracts.messages import query
from contracts.subjects import GRAPH, MEMORY

DEFAULT_GRAPH_PAGE = 200
MAX_GRAPH_PAGE = 1000
MAX_CURSOR_CHARS = 512
MAX_SIMILAR = 20


class NodeType(StrEnum):
    MEMORY = "memory"
    LOG = "log"
    PROJECT = "project"


class NodeState(StrEnum):
    ACTIVE = "active"
    FORGOTTEN = "forgotten"
    EXPIRING = "expiring"  # valid for at most 7 more days
    NEW = "new"  # created within the last 24 hours


class EdgeType(StrEnum):
    UPDATES = "updates"
    EXTENDS = "extends"
    DERIVES = "derives"
    SIMILAR = "similar"
    IN_PROJECT = "in_project"


class GraphNode(BaseModel):
    id: str = Field(description="memory id, 'log:<id>' or 'project:<name>'")
    type: NodeType
    label: str = Field(description="a short text to draw: a memory's content, a log's date, a project's name")
    state: NodeState = NodeState.ACTIVE
    project: str | None = None
    category: str | None = None
    memory_key: str | None = None
    importance: int | None = None
    version: int | None = None
    created_at: datetime
    updated_at: datetime
    detail: dict[str, object] = Field(default_factory=dict, description="type-specific extras (a log's status…)")


class GraphEdge(BaseModel):
    source: str
    target: str
    type: EdgeType
    weight: float | None = Field(None, description="cosine similarity for 'similar' edges")


class GraphPageQuery(BaseModel):
    """One page of the user's memory graph, in a stable order; pass ``next_cursor`` for the next."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    node_types: list[NodeType] | None = Field(None, description="only these node types (default all)")
    since: BoundedDateTime | None = Field(None, description="only nodes updated at or after this time")
    until: BoundedDateTime | None = Field(None, description="only nodes updated before this time")
    as_of: AsOf = Field(None, description="the graph as it stood at this moment (ISO 8601 date or date-time, UTC "
                        "unless an offset is given): memories said by then and not superseded then, logs and projects "
                        "made by then; forgotten memories are left out; a node changed since says so "
                        "(detail.changed_since)")
    cursor: str | None = Field(None, min_length=1, max_length=MAX_CURSOR_CHARS)
    limit: int = Field(DEFAULT_GRAPH_PAGE, ge=1, le=MAX_GRAPH_PAGE)


class GraphPage(BaseModel):
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    next_cursor: str | None = None
    total: int = Field(description="nodes matching the filters, over all pages")


MAX_SIMILAR_MEMORIES = 64


class SimilarMemories(BaseModel):
    """Memories' nearest neighbours in the vector index, one read of their vectors and one batch of
    searches (memory service: the graph's similar-edge worker asks for a burst of saves, a recall's
    ``~`` markers for the hits the graph has not caught up with)."""

    model_config = ConfigDict(extra="forbid")

    memory_ids: list[UUID] = Field(min_length=1, max_length=MAX_SIMILAR_MEMORIES)
    limit: int = Field(5, ge=1, le=MAX_SIMILAR)
    min_score: float = Field(0.6, ge=-1.0, le=1.0)


class SimilarMemory(BaseModel):
    memory_id: UUID
    score: float


class SimilarMemoryList(BaseModel):
    found: bool = Field(description="false when the memory is unknown (or not visible to the caller)")
    similar: list[SimilarMemory]
    version: int | None = Field(None, description="the memory's version the neighbours were found for (its "
                                "current one in the memory service's read model)")


class SimilarOf(SimilarMemoryList):
    memory_id: UUID


class SimilarMemoriesResult(BaseModel):
    memories: list[SimilarOf] = Field(description="one per asked memory, in the order asked")


MAX_RELATED_MEMORIES = 10


class RelatedMemories(BaseModel):
    """Several memories' ``similar`` edges as the graph's read model holds them (found once, when
    each memory was saved): a recall's ``~`` markers for its best hits in one call, without a
    vector search (graph service)."""

    model_config = ConfigDict(extra="forbid")

    memory_ids: list[UUID] = Field(min_length=1, max_length=MAX_RELATED_MEMORIES)
    limit: int = Field(3, ge=1, le=MAX_SIMILAR, description="at most this many neighbours per memory, closest first")
    min_score: float = Field(0.6, ge=-1.0, le=1.0)


class RelatedMemory(BaseModel):
    memory_id: UUID
    found: bool = Field(description="false when the graph does not hold the memory (unknown, forgotten, not "
                        "visible to the caller, or not projected yet)")
    version: int | None = Field(None, description="the memory's version its neighbours were found for; None while "
                                "they are still being found (then ``similar`` is what an older version earned)")
    similar: list[SimilarMemory] = Field(default_factory=list)


class RelatedMemoryList(BaseModel):
    memories: list[RelatedMemory] = Field(description="one per asked memory, in the order asked")


query(GRAPH, "graph_page", result=GraphPage)(GraphPageQuery)
query(GRAPH, "related_memories", result=RelatedMemoryList)(RelatedMemories)
query(MEMORY, "similar_memories", result=SimilarMemoriesResult)(SimilarMemories)
