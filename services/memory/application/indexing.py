"""How a memory becomes a point in the vector index, and how a recall searches it — one place,
shared by the service, replay and the recall-quality benchmark."""

from __future__ import annotations

from contracts.memory import MemoryState, MemoryStatus, RecallMode
from services.memory.adapters.vectors import SearchFilter, VectorPoint
from services.memory.domain.keywords import document_vector

SEARCH_MODES = {RecallMode.HYBRID: "hybrid", RecallMode.DENSE: "dense", RecallMode.KEYWORD: "sparse"}


def indexed_text(state: MemoryState) -> str:
    """The text that is embedded and keyword-indexed for a memory."""
    return state.content


def point_for(state: MemoryState, dense: list[float]) -> VectorPoint:
    return VectorPoint(
        id=str(state.id),
        dense=dense,
        sparse=document_vector(indexed_text(state)),
        payload={
            "tenant": state.tenant,
            "project": state.project,
            "status": state.status.value,
            "category": state.category.value if state.category else None,
            "memory_key": state.memory_key,
            "importance": state.importance,
            "created_at": state.created_at.isoformat(),
        },
    )


def active_filter(tenant: str, project: str | None, category: str | None = None) -> SearchFilter:
    return SearchFilter(tenant=tenant, project=project, status=MemoryStatus.ACTIVE.value, category=category)
