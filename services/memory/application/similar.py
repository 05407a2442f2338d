"""A memory's nearest neighbours in the vector index (:class:`contracts.graph.SimilarMemories`),
which the graph service turns into ``similar`` edges.

The memory's own dense vector is the one its point holds, read back from the index with the
point's tenant, project, status and version: no read-model row and no embedding. A memory the index
does not hold yet (its projection is behind) is read from the read model, and its vector computed the
way the projection indexes it (:meth:`MemoryProjection.memory_vector`: its sentence vectors come from
the embedder's primed vectors or the embedding cache, so a memory saved a moment ago costs no model
run). Then one dense search within the memory's project, tenant-filtered like every search, that
returns ids and scores only (one read of the asked memories' points, one batch of searches).
Scope: a memory outside the caller's project scope, or of another tenant, is answered as unknown
(``found`` false), exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from contracts.graph import SimilarMemories, SimilarMemoriesResult, SimilarMemory, SimilarOf
from contracts.memory import MemoryStatus
from kit.service import Call
from services.memory.application.ports import ReadModel
from services.memory.application.projection import MemoryProjection
from services.memory.search.indexing import active_filter
from services.memory.search.ports import TENANT_FIELD, VectorIndex


class SimilarSearch:
    def __init__(self, store: ReadModel, index: VectorIndex, projection: MemoryProjection) -> None:
        self.store = store
        self.index = index
        self.projection = projection

    async def similar(self, call: Call, q: SimilarMemories) -> SimilarMemoriesResult:
        """Each memory's nearest active neighbours in its project with cosine similarity at least
        ``min_score``, best first (at most ``limit``); none for a forgotten or superseded memory. One
        read of the memories' points, one batch of searches."""
        stored = await self.index.stored_dense(list(dict.fromkeys(str(i) for i in q.memory_ids)), _ROUTING)
        answers: list[SimilarOf] = []
        asks: list[tuple[int, list[float], str]] = []  # (answer's position, vector, project)
        for memory_id in q.memory_ids:
            point = stored.get(str(memory_id))
            if point is not None and _routed(point[1], call.tenant):
                vector: list[float] | None = point[0]
                project, status, version = (str(point[1]["project"]), str(point[1]["status"]),
                                            int(point[1]["version"]))
            else:  # not indexed yet (or not this tenant's): the read model says
                state = await self.store.get(call.tenant, memory_id)
                if state is None:
                    answers.append(SimilarOf(memory_id=memory_id, found=False, similar=[]))
                    continue
                project, status, version = state.project, state.status.value, state.version
                vector = (None if state.status is not MemoryStatus.ACTIVE
                          else await self.projection.encoders.memory_vector(state))
            if not call.sees(project):
                answers.append(SimilarOf(memory_id=memory_id, found=False, similar=[]))
                continue
            answers.append(SimilarOf(memory_id=memory_id, found=True, similar=[], version=version))
            if status == MemoryStatus.ACTIVE.value and vector is not None:
                asks.append((len(answers) - 1, vector, project))
        found = await self.index.nearest([(v, active_filter(call.tenant, p)) for _, v, p in asks], q.limit + 1)
        for (at, _, _), hits in zip(asks, found, strict=True):
            own = str(answers[at].memory_id)
            answers[at].similar = [SimilarMemory(memory_id=h.id, score=h.score) for h in hits
                                   if h.id != own and h.score >= q.min_score][: q.limit]
        return SimilarMemoriesResult(memories=answers)


#: what a memory's point says of it that answers a SimilarMemories (besides its vector)
_ROUTING = (TENANT_FIELD, "project", "status", "version")


def _routed(point: dict[str, Any], tenant: str) -> bool:
    """Whether the point is ``tenant``'s and says where it belongs (an index written before points
    carried their version does not: the read model answers)."""
    return (point.get(TENANT_FIELD) == tenant and isinstance(point.get("project"), str)
            and isinstance(point.get("status"), str) and isinstance(point.get("version"), int))
