"""The memory service's nearest neighbours over the bus (:class:`contracts.graph.SimilarMemories`)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from contracts.errors import ErrorCode
from contracts.graph import SimilarMemories, SimilarMemoriesResult, SimilarMemoryList
from kit.client import Client, ServiceFailure
from services.graph.application.ports import NeighboursUnavailable, SimilarTask


class ClientNeighbours:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def similar(self, tasks: Sequence[SimilarTask], limit: int, min_score: float) -> list[SimilarMemoryList]:
        """Asked with the memories' project as the scope: neighbours are found within their project."""
        tenant, project = tasks[0].tenant, tasks[0].project
        if any(t.tenant != tenant or t.project != project for t in tasks):
            raise ValueError("one ask is for one tenant's project")
        try:
            found: SimilarMemoriesResult = await self.client.ask(
                tenant, SimilarMemories(memory_ids=[UUID(t.memory_id) for t in tasks], limit=limit,
                                        min_score=min_score),
                project_scope=project,
            )
        except ServiceFailure as exc:
            if exc.error.code is ErrorCode.NOT_FOUND:
                return [SimilarMemoryList(found=False, similar=[]) for _ in tasks]
            raise NeighboursUnavailable(str(exc)) from exc
        answers: list[SimilarMemoryList] = [*found.memories]  # (each a SimilarOf: the list plus its memory's id)
        return answers
