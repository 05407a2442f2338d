"""Memory aggregate rules: identity, content normalisation, save and forget transitions.

Pure functions over ``contracts.memory.MemoryState``; no I/O. Identities are derived from the
command's idempotency key, so a retried command produces the very same memory and event ids.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import datetime
from uuid import UUID, uuid5

from contracts.envelope import EventEnvelope
from contracts.events import Event
from contracts.memory import (
    MEMORY_AGGREGATE,
    NAMESPACE_FOR_CATEGORY,
    Category,
    MemoryEventType,
    MemoryState,
    MemoryStatus,
    MemoryVersion,
    Provenance,
    SaveMemory,
    UpdateMemory,
    abridged,
    memory_key_problem,
)
from services.memory.domain.errors import Conflict, InvalidArgument
from services.memory.domain.keywords import STOPWORDS

AGGREGATE = MEMORY_AGGREGATE  # (declared in contracts.memory)
_NS = UUID("8f0c1f9e-51a4-4c1b-9d1e-3c1f6c0e7a11")
SEMANTIC_FORGET_THRESHOLD = 0.85
#: categories the profile's stable facts leave out: relationships and emotional patterns change, or
#: are about others (the read model's profile query says the same in SQL)
NOT_PROFILE_FACTS = frozenset({Category.RELATIONSHIP, Category.EMOTIONAL_PATTERN})


def profile_fact(category: Category | None) -> bool:
    """Whether a memory of ``category`` can be one of the profile's stable facts."""
    return category is not None and category not in NOT_PROFILE_FACTS


def normalize_content(content: str) -> str:
    """The form two contents are compared in: NFC, whitespace collapsed, trimmed."""
    return " ".join(unicodedata.normalize("NFC", content).split())


def normalize_context(context: str | None) -> str | None:
    """A memory's context in stored form (as :func:`normalize_content`); None when absent or blank."""
    if context is None:
        return None
    return normalize_content(context) or None


def content_hash(content: str) -> str:
    return hashlib.sha256(normalize_content(content).casefold().encode("utf-8")).hexdigest()


def content_memory_id(tenant: str, project: str, digest: str, generation: int = 0) -> UUID:
    """A free-form memory's identity is its content's (``digest``: :func:`content_hash`), so that
    processes saving one content at once land on one aggregate and one of them wins its first
    event; ``generation`` counts the earlier memories of that content that have since been
    forgotten or changed (each later save of the content is a new memory)."""
    return uuid5(_NS, f"memory-content:{tenant}:{project}:{digest}:{generation}")


def same_content_active(state: MemoryState, digest: str) -> bool:
    """Whether ``state`` is an active memory holding the content of ``digest``."""
    return state.status is MemoryStatus.ACTIVE and content_hash(state.content) == digest


def indexed(state: MemoryState) -> bool:
    """Whether a memory has a point in the vector index: a current one, and a superseded one (left
    out of current recall by its status, found by recall ``as_of`` a moment it stood); a forgotten
    memory has none."""
    return state.status is not MemoryStatus.FORGOTTEN


def moved_memory_id(state: MemoryState, to_project: str) -> UUID:
    """The memory ``state`` becomes in ``to_project``: a keyed one its key's there, any other one of
    its own (the same each time: moving it again creates nothing more)."""
    if state.memory_key:
        return keyed_memory_id(state.tenant, to_project, state.memory_key)
    return uuid5(_NS, f"moved:{state.id}:{to_project}")


def moved(state: MemoryState, to_project: str, now: datetime) -> MemoryState:
    """``state`` as the first version of a memory of ``to_project``: the same words, fields, sayings,
    pin and moment it was said; no relation to the old project's memories."""
    return state.model_copy(update={
        "id": moved_memory_id(state, to_project), "project": to_project, "version": 1, "status": MemoryStatus.ACTIVE,
        "created_at": now, "updated_at": now, "valid_from": state.valid_from or state.created_at,
        "valid_until": None, "superseded_by": None, "supersedes": [], "conflicts": [], "forget_reason": None,
    })


def keyed_memory_id(tenant: str, project: str, memory_key: str) -> UUID:
    """A keyed memory's identity is its key: every save of one key lands on one aggregate."""
    return uuid5(_NS, f"memory-key:{tenant}:{project}:{memory_key}")


def topic_from_content(content: str) -> str:
    """A readable topic for an omitted memory_key: the first meaningful Latin words, else a digest."""
    words = [w for w in re.findall(r"[a-z0-9]+", normalize_content(content).casefold()) if w not in STOPWORDS]
    topic = "_".join(list(dict.fromkeys(w for w in words if not w.isdigit()))[:4])[:64].strip("_")
    if topic:
        return topic
    return "note_" + hashlib.sha256(normalize_content(content).encode("utf-8")).hexdigest()[:10]


def resolve_key(cmd: SaveMemory) -> str | None:
    """The memory_key a structured save addresses (None for free-form memories)."""
    if cmd.category is None:
        return None
    key = cmd.memory_key or f"{NAMESPACE_FOR_CATEGORY[cmd.category]}.{topic_from_content(cmd.content)}"
    problem = memory_key_problem(cmd.category, key)
    if problem:
        raise InvalidArgument(problem, "memory_key")
    return key


def event_id_for(tenant: str, command_id: str, aggregate_id: UUID | str, version: int = 0) -> UUID:
    return uuid5(_NS, f"event:{tenant}:{command_id}:{aggregate_id}:{version}")


def unmerged_memory_id(memory_id: UUID, version: int) -> UUID:
    """The memory a saying becomes when the merge that wrote ``version`` of ``memory_id`` is undone:
    the same each time (undoing it again creates nothing more)."""
    return uuid5(_NS, f"unmerged:{memory_id}:{version}")


def new_memory(
    tenant: str, cmd: SaveMemory, now: datetime, memory_key: str | None = None, generation: int = 0
) -> MemoryState:
    """The state of a memory created by a SaveMemory command: identified by its key, else by its
    content and generation."""
    return MemoryState(
        id=keyed_memory_id(tenant, cmd.project, memory_key) if memory_key
        else content_memory_id(tenant, cmd.project, content_hash(cmd.content), generation),
        tenant=tenant,
        project=cmd.project,
        content=normalize_content(cmd.content),
        context=normalize_context(cmd.context),
        category=cmd.category,
        memory_key=memory_key,
        importance=cmd.importance,
        confidence=cmd.confidence,
        source=cmd.source,
        version=1,
        status=MemoryStatus.ACTIVE,
        created_at=now,
        updated_at=now,
        provenance=cmd.provenance,
        client=cmd.client,
    )


def save_over(current: MemoryState, cmd: SaveMemory, now: datetime) -> MemoryState | None:
    """Saving an existing key: a new version, or None when nothing would change."""
    changes = {
        "content": normalize_content(cmd.content),
        "context": normalize_context(cmd.context),
        "category": cmd.category,
        "importance": cmd.importance,
        "confidence": cmd.confidence,
        "source": cmd.source,
        "status": MemoryStatus.ACTIVE,
        "forget_reason": None,
        "valid_until": None,
        "superseded_by": None,
    }
    return _new_version(current, changes, now, cmd.provenance, cmd.client)


def update(current: MemoryState, cmd: UpdateMemory, now: datetime) -> MemoryState | None:
    """An update_memory: a new version with the given fields, or None when nothing would change."""
    if current.status is MemoryStatus.FORGOTTEN:
        raise Conflict(f"memory {current.id} is forgotten; save it again to bring it back", "id")
    changes: dict[str, object] = {}
    if cmd.content is not None:
        changes["content"] = normalize_content(cmd.content)
    if cmd.context is not None:
        changes["context"] = normalize_context(cmd.context)
    for name in ("importance", "confidence", "source"):
        if getattr(cmd, name) is not None:
            changes[name] = getattr(cmd, name)
    if cmd.category is not None:
        if current.memory_key is not None:
            problem = memory_key_problem(cmd.category, current.memory_key)
            if problem:  # the stored memory's key decides: a conflict with it, not a malformed request
                raise Conflict(problem, "category")
        changes["category"] = cmd.category
    return _new_version(current, changes, now, cmd.provenance or current.provenance, cmd.client)


def _new_version(
    current: MemoryState, changes: dict[str, object], now: datetime, provenance: Provenance | None,
    client: str | None = None,
) -> MemoryState | None:
    """A new version with ``changes`` (and the given provenance; ``client``, the assistant writing
    it), or None when nothing would change: provenance or client alone never makes a new version
    (the same fact found again in another log, or said again by another assistant)."""
    if all(getattr(current, k) == v for k, v in changes.items()):
        return None
    return current.model_copy(
        update={**changes, "provenance": provenance, "client": client, "version": current.version + 1,
                "updated_at": now}
    )


def history(events: list[tuple[Event[MemoryState], int]]) -> list[MemoryVersion]:
    """Every version of a memory, each valid until the next one was written."""
    versions = []
    for i, (event, seq) in enumerate(events):
        state = state_of(event)
        following = events[i + 1][0].occurred_at if i + 1 < len(events) else None
        versions.append(
            MemoryVersion(
                version=state.version, event=event.type, sequence=seq, occurred_at=event.occurred_at,
                content=state.content, context=state.context, status=state.status, category=state.category,
                memory_key=state.memory_key, importance=state.importance, confidence=state.confidence,
                forget_reason=state.forget_reason, valid_until=following, provenance=state.provenance,
                source=state.source, client=state.client,
            )
        )
    return versions


#: A history answer is cut to about this many bytes (the bus carries 1 MB a message): a memory
#: edited or pinned many times over a long text would not fit whole.
HISTORY_BYTES = 600_000


def fitting(versions: list[MemoryVersion], limit: int = HISTORY_BYTES) -> list[MemoryVersion]:
    """``versions`` as one answer carries them: whole while they fit ``limit`` bytes, else the earlier
    versions' contents cut to their start (oldest first, :func:`abridged`) until they do; the newest
    is always whole (what an edit starts from)."""
    size = sum(len(v.model_dump_json().encode()) for v in versions)
    out = list(versions)
    for i, v in enumerate(out[:-1]):
        if size <= limit:
            break
        cut = abridged(v)
        size -= len(v.content.encode()) - len(cut.content.encode())
        out[i] = cut
    return out


def forget(state: MemoryState, reason: str | None, now: datetime, client: str | None = None) -> MemoryState:
    """The state after forgetting: it leaves recall but stays in history with its reason."""
    if state.status is MemoryStatus.FORGOTTEN:
        raise Conflict(f"memory {state.id} is already forgotten", field="memory_id")
    return state.model_copy(
        update={
            "status": MemoryStatus.FORGOTTEN,
            "forget_reason": reason or "forgotten at the user's request",
            "version": state.version + 1,
            "updated_at": now,
            "client": client,
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
        event_id=event_id_for(state.tenant, command_id, state.id, state.version),
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


def state_of(event: Event[MemoryState]) -> MemoryState:
    """A memory event's state (parsed by ``kit.events``, which types every event once)."""
    if not isinstance(event.data, MemoryState):
        raise TypeError(f"not a memory event: {event.aggregate} {event.type}")
    return event.data
