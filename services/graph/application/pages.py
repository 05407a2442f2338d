"""The graph's query: keyset pages of nodes with the edges among them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from contracts.envelope import utcnow
from contracts.graph import (
    GraphPage,
    GraphPageQuery,
    RelatedMemories,
    RelatedMemory,
    RelatedMemoryList,
    SimilarMemory,
)
from kit.service import Call
from services.graph.application.ports import GraphStore, PageFilter
from services.graph.domain.model import decode_cursor, encode_cursor, filters_digest, graph_node

#: a page's reply stays under NATS's default 1 MiB message limit (with the envelope around it): a
#: page of 1,000 memories with long labels, provenance and their edges can exceed it, and is then
#: cut to fewer nodes (``next_cursor`` continues right after the last one sent)
MAX_PAGE_BYTES = 900_000


class GraphPages:
    def __init__(self, store: GraphStore, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.clock = clock

    async def graph_page(self, call: Call, q: GraphPageQuery) -> GraphPage:
        """One page of the caller's graph in its stable order: the nodes after ``cursor`` (within
        the caller's project scope: a restricted key or a pinned connection sees only its project,
        and naming another is refused), the edges whose ends are both on this page or an earlier
        one, ``total`` nodes under the same filters, and the cursor of the next page (None at the end).
        A page holds fewer than ``limit`` nodes when ``limit`` of them would not fit in one bus
        message (:data:`MAX_PAGE_BYTES`)."""
        project = call.search_project(q.project)
        digest = filters_digest(q, project)
        after = decode_cursor(q.cursor, digest) if q.cursor is not None else 0
        f = PageFilter(tenant=call.tenant, project=project,
                       node_types=tuple(q.node_types) if q.node_types else None, since=q.since, until=q.until,
                       as_of=q.as_of)
        (rows, edges), total = await asyncio.gather(self.store.page_with_edges(f, after, q.limit), self.store.count(f))
        more = len(rows) > q.limit
        rows = rows[: q.limit]
        now = self.clock()
        while True:
            last = rows[-1][0] if rows else after
            page = GraphPage(nodes=[graph_node(row, now, q.as_of) for _, row in rows], edges=edges,
                             next_cursor=encode_cursor(last, digest) if more else None, total=total)
            if len(rows) <= 1 or len(page.model_dump_json()) <= MAX_PAGE_BYTES:
                return page
            # too big for one bus message: fewer nodes, the rest on the next page (same order)
            rows, more = rows[: len(rows) // 2], True
            edges = await self.store.page_edges(f, [row.id for _, row in rows], rows[-1][0])

    async def related_memories(self, call: Call, q: RelatedMemories) -> RelatedMemoryList:
        """Each asked memory's ``similar`` edges from the read model (found when it was saved; a
        recall's ``~`` markers without a vector search), within the caller's project scope: a memory
        outside it, forgotten or not projected yet is not found. ``version`` is None while a newer
        round of its neighbours is queued (the edges are an older version's)."""
        project = call.search_project(None)
        found = await self.store.related(call.tenant, project, [str(i) for i in dict.fromkeys(q.memory_ids)],
                                         q.limit, q.min_score)
        out = []
        for i in q.memory_ids:
            row = found.get(str(i))
            if row is None:
                out.append(RelatedMemory(memory_id=i, found=False))
                continue
            version, current, edges = row
            out.append(RelatedMemory(memory_id=i, found=True, version=version if current else None,
                                     similar=[SimilarMemory(memory_id=t, score=w) for t, w in edges]))
        return RelatedMemoryList(memories=out)

    def query_handlers(self) -> dict[type, object]:
        """The service's query table (kit's ServiceRuntime dispatches through it)."""
        return {GraphPageQuery: self.graph_page, RelatedMemories: self.related_memories}
