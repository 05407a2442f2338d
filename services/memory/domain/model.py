"""Memory aggregate rules: identity, content normalisation, save and forget transitions.

Pure functions over ``contracts.memory.MemoryState``; no I/O. Identities are derived from the
command's idempotency key, so a retried command produces the very same memory and event ids.
"""

from __future__ import annotations

import hashlib
import unicodedata
from datetime import datetime
from uuid import UUID, uuid5

from contracts.envelope import EventEnvelope
from contracts.memory import MemoryEventType, MemoryState, MemoryStatus, SaveMemory
from services.memory.domain.errors import Conflict

AGGREGATE = "memory"
_NS = UUID("8f0c1f9e-51a4-4c1b-9d1e-3c1f6c0e7a11")
SEMANTIC_FORGET_THRESHOLD = 0.85


def normalize_content(content: str) -> str:
    """The form two contents are compared in: NFC, whitespace collapsed, trimmed."""
    return " ".join(unicodedata.normalize("NFC", content).split())


def content_hash(content: str) -> str:
    return hashlib.sha256(normalize_content(content).casefold().encode("utf-8")).hexdigest()


def memory_id_for(tenant: str, command_id: str) -> UUID:
    return uuid5(_NS, f"memory:{tenant}:{command_id}")


def event_id_for(tenant: str, command_id: str, aggregate_id: UUID | str) -> UUID:
    return uuid5(_NS, f"event:{tenant}:{command_id}:{aggregate_id}")


def new_memory(tenant: str, command_id: str, cmd: SaveMemory, now: datetime) -> MemoryState:
    """The state of a memory created by a SaveMemory command."""
    return MemoryState(
        id=memory_id_for(tenant, command_id),
        tenant=tenant,
        project=cmd.project,
        content=normalize_content(cmd.content),
        category=cmd.category,
        importance=cmd.importance,
        confidence=cmd.confidence,
        source=cmd.source,
        version=1,
        status=MemoryStatus.ACTIVE,
        created_at=now,
        updated_at=now,
    )


def forget(state: MemoryState, reason: str | None, now: datetime) -> MemoryState:
    """The state after forgetting: it leaves recall but stays in history with its reason."""
    if state.status is MemoryStatus.FORGOTTEN:
        raise Conflict(f"memory {state.id} is already forgotten", field="memory_id")
    return state.model_copy(
        update={
            "status": MemoryStatus.FORGOTTEN,
            "forget_reason": reason or "forgotten at the user's request",
            "version": state.version + 1,
            "updated_at": now,
        }
    )


def event_for(
    state: MemoryState,
    event_type: MemoryEventType,
    *,
    command_id: str,
    correlation_id: str,
    now: datetime,
) -> EventEnvelope:
    return EventEnvelope(
        event_id=event_id_for(state.tenant, command_id, state.id),
        type=event_type.value,
        version=1,
        occurred_at=now,
        tenant=state.tenant,
        aggregate=AGGREGATE,
        aggregate_id=str(state.id),
        correlation_id=correlation_id,
        causation_id=command_id,
        data=state.model_dump(mode="json"),
    )


def state_of(event: EventEnvelope) -> MemoryState:
    return MemoryState.model_validate(event.data)
