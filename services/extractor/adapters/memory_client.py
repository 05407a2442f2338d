"""The memory service's memory commands and lookup, through kit's typed client."""

from __future__ import annotations

from contracts.memory import GetMemoryByKey, MemoryLookup, SaveMemory, SaveMemoryResult, UpdateMemory
from kit.client import Client
from services.extractor.application.ports import KnownMemory, Written
from services.extractor.domain.model import Fact

SOURCE = "extractor"


class ClientMemoryWriter:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def by_key(self, tenant: str, project: str, memory_key: str) -> KnownMemory | None:
        found: MemoryLookup = await self.client.ask(tenant, GetMemoryByKey(project=project, memory_key=memory_key))
        if not found.found or found.memory is None:
            return None
        m = found.memory
        return KnownMemory(memory_id=m.id, content=m.content, memory_key=m.memory_key, version=m.version)

    async def save(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str) -> Written:
        result: SaveMemoryResult = await self.client.send(tenant, SaveMemory(
            project=project, category=fact.category, memory_key=memory_key, content=fact.content,
            context=fact.context, importance=fact.importance, confidence=fact.confidence, source=SOURCE,
        ), key=key)
        return Written(memory_id=result.memory_id, created=result.created, updated=result.updated)

    async def update(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str) -> Written:
        result: SaveMemoryResult = await self.client.send(tenant, UpdateMemory(
            project=project, memory_key=memory_key, content=fact.content, context=fact.context,
            importance=fact.importance, confidence=fact.confidence, source=SOURCE,
        ), key=key)
        return Written(memory_id=result.memory_id, created=result.created, updated=result.updated)
