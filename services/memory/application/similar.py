"""A memory's nearest neighbours in the vector index (:class:`contracts.graph.SimilarMemories`),
which the graph service turns into ``similar`` edges.

The memory's own dense vector is the one its point holds, read back from the index with the
point's tenant, project, status and version: no read-model row and no embedding. A memory the index
does not hold yet (its projection is behind) is read from the read model, and its vector computed the
way the projection indexes it (:meth:`MemoryProjection.memory_vector`: its sentence vectors come from
the embedder's primed vectors or the embedding cache, so a memory saved a moment ago costs no model
run). Then one dense search within the memory's project, tenant-filtered like every search, that
returns ids and scores only. Scope: a memory outside the caller's project scope, or of another
tenant, is answered as unknown (``found`` false), exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any

from contracts.graph import SimilarMemories, SimilarMemory, SimilarMemoryList
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

    async def similar(self, call: Call, q: SimilarMemories) -> SimilarMemoryList:
        """The memory's nearest active neighbours in its project with cosine similarity at least
        ``min_score``, best first (at most ``limit``); none for a forgotten or superseded memory."""
        stored = await self.index.stored_dense(str(q.memory_id), _ROUTING)
        if stored is not None and _routed(stored[1], call.tenant):
            vector, point = stored
            project, status, version = str(point["project"]), str(point["status"]), int(point["version"])
        else:  # not indexed yet (or not this tenant's): the read model says
            state = await self.store.get(call.tenant, q.memory_id)
            if state is None:
                return SimilarMemoryList(found=False, similar=[])
            project, status, version = state.project, state.status.value, state.version
            vector = None if state.status is not MemoryStatus.ACTIVE else await self.projection.encoders.memory_vector(state)
        if not call.sees(project):
            return SimilarMemoryList(found=False, similar=[])
        if status != MemoryStatus.ACTIVE.value or vector is None:
            return SimilarMemoryList(found=True, similar=[], version=version)
        hits = await self.index.search(dense=vector, sparse=None, filter=active_filter(call.tenant, project),
                                       limit=q.limit + 1, mode="dense", with_payload=False)
        own = str(q.memory_id)
        similar = [SimilarMemory(memory_id=h.id, score=h.score) for h in hits if h.id != own and h.score >= q.min_score]
        return SimilarMemoryList(found=True, similar=similar[: q.limit], version=version)


#: what a memory's point says of it that answers a SimilarMemories (besides its vector)
_ROUTING = (TENANT_FIELD, "project", "status", "version")


def _routed(point: dict[str, Any], tenant: str) -> bool:
    """Whether the point is ``tenant``'s and says where it belongs (an index written before points
    carried their version does not: the read model answers)."""
    return (point.get(TENANT_FIELD) == tenant and isinstance(point.get("project"), str)
            and isinstance(point.get("status"), str) and isinstance(point.get("version"), int))
