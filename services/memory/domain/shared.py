"""Shared memories (shared experiences): one per (tenant, title); saving a title again updates it."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from uuid import UUID, uuid5

from contracts.envelope import EventEnvelope
from contracts.memory import (
    SHARED_MEMORY_AGGREGATE,
    SaveSharedMemory,
    SharedMemoryEventType,
    SharedMemoryState,
)

AGGREGATE = SHARED_MEMORY_AGGREGATE  # (declared in contracts.memory)
_NS = UUID("0b5c7c4e-2f7e-4d8a-9a55-5a4e1b0f9c21")


def normalize_title(title: str) -> str:
    return " ".join(unicodedata.normalize("NFC", title).split())


def shared_id(tenant: str, title: str) -> UUID:
    return uuid5(_NS, f"shared:{tenant}:{normalize_title(title)}")


def save(current: SharedMemoryState | None, tenant: str, cmd: SaveSharedMemory, now: datetime) -> SharedMemoryState | None:
    """The new state, or None when the saved title already holds exactly this event and importance."""
    title = normalize_title(cmd.title)
    if current is None:
        return SharedMemoryState(
            id=shared_id(tenant, title), tenant=tenant, title=title, event=cmd.event.strip(),
            importance=cmd.importance, version=1, created_at=now, updated_at=now,
        )
    if current.event == cmd.event.strip() and current.importance == cmd.importance:
        return None
    return current.model_copy(
        update={"event": cmd.event.strip(), "importance": cmd.importance, "version": current.version + 1,
                "updated_at": now}
    )


def event_for(state: SharedMemoryState, *, command_id: str, correlation_id: str, event_id: UUID) -> EventEnvelope:
    return EventEnvelope(
        event_id=event_id,
        type=(SharedMemoryEventType.SAVED if state.version == 1 else SharedMemoryEventType.UPDATED).value,
        occurred_at=state.updated_at, tenant=state.tenant, aggregate=AGGREGATE, aggregate_id=str(state.id),
        correlation_id=correlation_id, causation_id=command_id, data=state.model_dump(mode="json"),
    )
