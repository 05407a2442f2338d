"""A memory's nearest neighbours in the vector index (:class:`contracts.graph.SimilarMemories`),
which the graph service turns into ``similar`` edges.

The memory's own dense vector is computed the way the projection indexed it
(:meth:`MemoryProjection.memory_vector`: its sentence vectors come from the embedder's primed
vectors or the embedding cache, so a memory saved a moment ago costs no model run), then one dense
search within the memory's project, tenant-filtered like every search. Scope: a memory outside the
caller's project scope is answered as unknown (``found`` false), exactly like one that does not exist.
"""

from __future__ import annotations

from contracts.graph import SimilarMemories, SimilarMemory, SimilarMemoryList
from contracts.memory import MemoryStatus
from kit.service import Call
from services.memory.application.ports import ReadModel
from services.memory.application.projection import MemoryProjection
from services.memory.search.indexing import active_filter
from services.memory.search.ports import VectorIndex


class SimilarSearch:
    def __init__(self, store: ReadModel, index: VectorIndex, projection: MemoryProjection) -> None:
        self.store = store
        self.index = index
        self.projection = projection

    async def similar(self, call: Call, q: SimilarMemories) -> SimilarMemoryList:
        """The memory's nearest active neighbours in its project with cosine similarity at least
        ``min_score``, best first (at most ``limit``); none for a forgotten memory."""
        state = await self.store.get(call.tenant, q.memory_id)
        if state is None or not call.sees(state.project):
            return SimilarMemoryList(found=False, similar=[])
        if state.status is not MemoryStatus.ACTIVE:
            return SimilarMemoryList(found=True, similar=[], version=state.version)
        vector = await self.projection.encoders.memory_vector(state)
        hits = await self.index.search(dense=vector, sparse=None, filter=active_filter(call.tenant, state.project),
                                       limit=q.limit + 1, mode="dense")
        own = str(state.id)
        similar = [SimilarMemory(memory_id=h.id, score=h.score) for h in hits if h.id != own and h.score >= q.min_score]
        return SimilarMemoryList(found=True, similar=similar[: q.limit], version=state.version)
