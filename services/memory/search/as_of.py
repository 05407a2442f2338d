"""Memories as they stood at a past moment (``as_of`` on recall, recall_memory and the profile).

The read model holds each memory's latest version. For a moment in the past, a memory is one of:

- **standing as it is**: said by then and not superseded then (its current row: when it was
  superseded or merged since, the row still says what was said then; ``valid_until`` and
  ``superseded_by`` tell what happened since);
- **standing in an earlier version**: its content changed since (a keyed fact's later version, said
  after the moment): that version is read from the event log, the one source that holds them all;
- **not standing**: said later, or superseded by then.

Forgotten memories are never answered at any moment: forgetting is the user's wish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from uuid import UUID

from contracts.memory import MemoryRelation, MemoryState, MemoryStatus, MemoryView, RelationKind, excerpt
from services.memory.domain import truth

#: every state of one memory of a tenant, oldest first (the event log's)
Versions = Callable[[str, UUID], Awaitable[list[MemoryState]]]


async def as_they_stood(
    tenant: str, views: Sequence[MemoryView], moment: datetime, versions: Versions | None
) -> list[MemoryView | None]:
    """Each of ``views`` as it stood at ``moment`` (None: it did not stand then). An earlier version
    carries ``changed_since`` (newer_version: the content now)."""
    changed = [v for v in views if truth.earlier_version_may_stand(v, moment)]
    then: dict[UUID, MemoryView] = {}
    if changed and versions is not None:
        histories = await asyncio.gather(*(versions(tenant, v.id) for v in changed))
        for now, states in zip(changed, histories, strict=True):
            old = truth.version_at(states, moment)
            if old is None:
                continue
            mark = None
            if old.content != now.content:
                mark = MemoryRelation(kind=RelationKind.NEWER_VERSION, memory_id=now.id, version=now.version,
                                      excerpt=excerpt(now.content))
            then[now.id] = MemoryView.model_validate(old.model_dump()).model_copy(update={"changed_since": mark})
    return [v if truth.valid_at(v, moment) else then.get(v.id) for v in views]


def nameable(views: dict[UUID, MemoryView]) -> dict[UUID, MemoryView]:
    """The memories among ``views`` a read may name beside its own (a hit's relations, a list's
    "superseded by"): not the forgotten ones (the user asked for them to leave recall; their
    history remains, read by id)."""
    return {k: v for k, v in views.items() if v.status is not MemoryStatus.FORGOTTEN}


def superseded_since(views: Sequence[MemoryView], moment: datetime) -> set[UUID]:
    """The ids of the memories that superseded any of ``views`` after ``moment``."""
    return {v.superseded_by.memory_id for v in views
            if v.superseded_by is not None and v.valid_until is not None and v.valid_until > moment}


def mark_superseded(views: Sequence[MemoryView], moment: datetime, newer: dict[UUID, MemoryView]) -> list[MemoryView]:
    """``views`` with ``changed_since`` naming the memory that superseded each after ``moment``
    (superseded_by), where ``newer`` holds it."""
    out = []
    for v in views:
        by = v.superseded_by
        if by is not None and v.valid_until is not None and v.valid_until > moment and by.memory_id in newer \
                and v.changed_since is None:
            v = v.model_copy(update={"changed_since": MemoryRelation(
                kind=RelationKind.SUPERSEDED_BY, memory_id=by.memory_id,
                excerpt=excerpt(newer[by.memory_id].content))})
        out.append(v)
    return out
