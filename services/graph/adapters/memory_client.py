"""The memory service's nearest neighbours over the bus (:class:`contracts.graph.SimilarMemories`)."""

from __future__ import annotations

from uuid import UUID

from contracts.errors import ErrorCode
from contracts.graph import SimilarMemories, SimilarMemoryList
from kit.client import Client, ServiceFailure
from services.graph.application.ports import NeighboursUnavailable, SimilarTask


class ClientNeighbours:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def similar(self, task: SimilarTask, limit: int, min_score: float) -> SimilarMemoryList:
        """Asked with the memory's project as the scope: neighbours are found within its project."""
        try:
            found: SimilarMemoryList = await self.client.ask(
                task.tenant, SimilarMemories(memory_id=UUID(task.memory_id), limit=limit, min_score=min_score),
                project_scope=task.project,
            )
        except ServiceFailure as exc:
            if exc.error.code is ErrorCode.NOT_FOUND:
                return SimilarMemoryList(found=False, similar=[])
            raise NeighboursUnavailable(str(exc)) from exc
        return found
