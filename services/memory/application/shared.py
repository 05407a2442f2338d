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
from kit.bus import ConcurrencyConflict
from kit.service import Call, CommandCall
from services.memory.application.common import MAX_RACES, Activity
from services.memory.application.ports import EventLog, ReadModel
from services.memory.application.projection import MemoryProjection
from services.memory.domain import model, shared
from services.memory.domain.errors import PermissionDenied


class SharedMemories:
    """The command and the query of shared memories."""

    def __init__(
        self, store: ReadModel, events: EventLog, names: Names, projection: MemoryProjection, activity: Activity,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.events = events
        self.names = names
        self.projection = projection
        self.activity = activity
        self.clock = clock

    async def save(self, env: CommandCall, cmd: SaveSharedMemory) -> SaveSharedMemoryResult:
        """Save a shared experience; the same title again writes a new version, never a duplicate."""
        self.activity.touch()
        tenant_wide(env)
        sid = shared.shared_id(env.tenant, cmd.title)
        subject = self.names.event(env.tenant, shared.AGGREGATE, str(sid))
        for _ in range(MAX_RACES):
            loaded = await self.events.last_event(subject)
            current: SharedMemoryState | None = loaded[0].data if loaded else None
            state = shared.save(current, env.tenant, cmd, self.clock())
            if state is None:
                assert current is not None
                return SaveSharedMemoryResult(
                    shared_memory_id=current.id, title=current.title, version=current.version,
                    created=False, updated=False,
                )
            event = shared.event_for(
                state, command_id=env.command_id, correlation_id=env.correlation_id,
                event_id=model.event_id_for(env.tenant, env.command_id, state.id, state.version),
            )
            try:
                seq, event = await self.events.append_event_once(subject, event,
                                                                 expected_last_seq=loaded[1] if loaded else 0)
            except ConcurrencyConflict:
                continue
            result = SaveSharedMemoryResult(
                shared_memory_id=state.id, title=state.title, version=state.version,
                created=state.version == 1, updated=state.version > 1,
            )
            await self.projection.apply_shared(event, seq, outcome=env.outcome(result))
            env.recorded = True
            return result
        raise ConcurrencyConflict(f"shared memory {cmd.title!r} kept changing while being saved; retry")

    async def list(self, call: Call, gq: GetSharedMemories) -> SharedMemoryList:
        tenant_wide(call)
        title = shared.normalize_title(gq.title) if gq.title else None
        return SharedMemoryList(shared_memories=await self.store.shared_memories(call.tenant, title, gq.keyword, gq.limit))


def tenant_wide(call: Call) -> None:
    """Shared memories belong to the user, not to a project: a credential or connection restricted
    to one project neither reads nor changes them."""
    if call.project_scope is not None:
        raise PermissionDenied(
            f"shared memories belong to no project; this credential or connection is restricted to project "
            f"'{call.project_scope}'. Use an unrestricted key, without X-Engram-Project, for shared memories",
            "project",
        )
