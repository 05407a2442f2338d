"""Shared memories: experiences the user shared with the assistant, by title, tenant-wide."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from contracts.envelope import utcnow
from contracts.memory import (
    GetSharedMemories,
    SaveSharedMemory,
    SaveSharedMemoryResult,
    SharedMemoryList,
    SharedMemoryState,
)
from contracts.subjects import Names
from kit.aggregates import Answer, Loaded, Write, WritePath
from kit.service import Call, CommandCall
from services.memory.application.ports import ReadModel
from services.memory.domain import model, paging, shared
from services.memory.domain.errors import PermissionDenied


class SharedMemories:
    """The command and the query of shared memories."""

    def __init__(self, store: ReadModel, names: Names, writes: WritePath, clock: Callable[[], datetime] = utcnow,
                 ) -> None:
        self.store = store
        self.names = names
        self.writes = writes
        self.clock = clock

    async def save(self, call: CommandCall, cmd: SaveSharedMemory) -> SaveSharedMemoryResult:
        """Save a shared experience; the same title again writes a new version, never a duplicate."""
        tenant_wide(call)
        sid = shared.shared_id(call.tenant, cmd.title)

        def decide(loaded: Loaded) -> Write[SaveSharedMemoryResult] | Answer[SaveSharedMemoryResult]:
            current: SharedMemoryState | None = loaded[0].data if loaded else None
            state = shared.save(current, call.tenant, cmd, self.clock())
            if state is None:
                assert current is not None
                return Answer(SaveSharedMemoryResult(
                    shared_memory_id=current.id, title=current.title, version=current.version,
                    created=False, updated=False,
                ))
            event = shared.event_for(
                state, command_id=call.command_id, correlation_id=call.correlation_id,
                event_id=model.event_id_for(call.tenant, call.command_id, state.id, state.version),
            )
            return Write(event, lambda stored: _saved(stored.data))

        reply = await self.writes.write(call, self.names.event(call.tenant, shared.AGGREGATE, str(sid)), decide,
                                        what=f"shared memory {cmd.title!r}")
        assert reply is not None
        return reply

    async def list(self, call: Call, gq: GetSharedMemories) -> SharedMemoryList:
        tenant_wide(call)
        title = shared.normalize_title(gq.title) if gq.title else None
        found = await self.store.shared_memories(call.tenant, title, gq.keyword, gq.limit)
        shown, more = paging.fitting(found, lambda v: v)  # (the newest that fit)
        return SharedMemoryList(shared_memories=shown, more=more or None)


def _saved(state: SharedMemoryState) -> SaveSharedMemoryResult:
    return SaveSharedMemoryResult(shared_memory_id=state.id, title=state.title, version=state.version,
                                  created=state.version == 1, updated=state.version > 1)


def tenant_wide(call: Call) -> None:
    """Shared memories belong to the user, not to a project: a credential or connection restricted
    to one project neither reads nor changes them."""
    if call.project_scope is not None:
        raise PermissionDenied(
            f"shared memories belong to no project; this credential or connection is restricted to project "
            f"'{call.project_scope}'. Use an unrestricted key, without X-Engram-Project, for shared memories",
            "project",
        )
