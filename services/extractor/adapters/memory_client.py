"""The memory service's memory commands and lookup, through kit's typed client. Each memory the
extractor writes carries its provenance: the log, the task and the turns (indices into the log's
``turns``) it came from; a fact read from a structured field names the log with no turn."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from contracts.memory import (
    GetMemoryByKey,
    MemoryLookup,
    MemoryStatus,
    MergeMemory,
    MergeMemoryResult,
    Provenance,
    SaveMemory,
    SaveMemoryResult,
    UpdateMemory,
)
from contracts.portability import MAX_EXPORT_PAGE, ExportPage, ExportPageResult, MemoryRecord
from kit.client import Client
from services.extractor.application.ports import KnownMemory, Origin, Written
from services.extractor.domain.consolidate import Held
from services.extractor.domain.merge import turn_indices
from services.extractor.domain.model import Fact

SOURCE = "extractor"


def provenance_of(fact: Fact, origin: Origin | None) -> Provenance | None:
    if origin is None:
        return None
    turns = turn_indices(fact.turn_refs)
    digests = [origin.turn_digests[i] for i in turns if i in origin.turn_digests]
    return Provenance(log_id=UUID(origin.log_id), task_id=origin.task_id, turns=turns,
                      turn_digests=digests if len(digests) == len(turns) else [])


class ClientMemoryWriter:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def by_key(self, tenant: str, project: str, memory_key: str) -> KnownMemory | None:
        found: MemoryLookup = await self.client.ask(tenant, GetMemoryByKey(project=project, memory_key=memory_key))
        if not found.found or found.memory is None:
            return None
        m = found.memory
        as_of = (m.updated_at.date(), -1)
        if m.provenance is not None and m.provenance.log_date is not None:
            as_of = (m.provenance.log_date, min(m.provenance.turns, default=-1))
        said = frozenset((str(m.provenance.log_id), d) for d in m.provenance.turn_digests) if m.provenance else frozenset()
        return KnownMemory(memory_id=m.id, content=m.content, memory_key=m.memory_key, version=m.version,
                           as_of=as_of, turns_said=said)

    async def save(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str,
                   origin: Origin | None = None) -> Written:
        result: SaveMemoryResult = await self.client.send(tenant, SaveMemory(
            project=project, category=fact.category, memory_key=memory_key, content=fact.content,
            context=fact.context, importance=fact.importance, confidence=fact.confidence, source=SOURCE,
            provenance=provenance_of(fact, origin),
        ), key=key)
        return Written(memory_id=result.memory_id, created=result.created, updated=result.updated)

    async def update(self, tenant: str, project: str, fact: Fact, memory_key: str, *, key: str,
                     origin: Origin | None = None) -> Written:
        result: SaveMemoryResult = await self.client.send(tenant, UpdateMemory(
            project=project, memory_key=memory_key, content=fact.content, context=fact.context,
            importance=fact.importance, confidence=fact.confidence, source=SOURCE,
            provenance=provenance_of(fact, origin),
        ), key=key)
        return Written(memory_id=result.memory_id, created=result.created, updated=result.updated)

    async def extracted(self, tenant: str) -> list[Held]:
        """Every active memory the extractor wrote for ``tenant``, from the memory service's export
        pages (each memory's last version: a long memory's record may come in consecutive parts)."""
        last: dict[UUID, Any] = {}  # (the export's portable state model)
        after: str | None = None
        while True:
            page: ExportPageResult = await self.client.ask(
                tenant, ExportPage(kind="memory", after=after, limit=MAX_EXPORT_PAGE))
            for record in page.records:
                if isinstance(record, MemoryRecord):
                    last[record.id] = record.versions[-1].state
            if page.next is None:
                break
            after = page.next
        out: list[Held] = []
        for state in last.values():
            if state.status != MemoryStatus.ACTIVE or state.source != SOURCE:
                continue
            day = state.updated_at.date()
            if state.provenance is not None and state.provenance.log_date is not None:
                day = state.provenance.log_date
            out.append(Held(id=state.id, project=state.project, memory_key=state.memory_key,
                            content=state.content, importance=state.importance, as_of=day))
        return out

    async def merge(self, tenant: str, held: Held, into: Held, reason: str, *, key: str) -> bool:
        result: MergeMemoryResult = await self.client.send(
            tenant, MergeMemory(project=held.project, memory_id=held.id, into=into.id, reason=reason[:1_000]), key=key)
        return result.merged
