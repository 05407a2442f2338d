"""Restoring exported records into a user: the states as they were, with ids of the new user.

Pure rules, no I/O. A record restored into the user it was exported from keeps every id. Into
another user, the ids that Engram derives from the user (a keyed memory's, a shared memory's, a
daily log's, an extraction task's and result's) are derived again for the new user, so that later
saves by key, title or day land on the restored records; other ids (free-form memories) become
``uuid5(new user, old id)``. Ids are global keys of the read model and the vector index, so the
same file imported into two users never makes them share a row or a point.

An extraction result names memories and shared memories by id; each of those ids is mapped exactly
as the record it names is (a keyed memory's to the new user's keyed id, a shared memory's to the
new user's id of its title, a free-form memory's to ``uuid5``), so that in the new user the result
names the restored records. What a name needs (a memory's key, a shared memory's title) comes from
the records of the same restore (:meth:`Remap.memory_states`, :meth:`Remap.shared_state`) or from
the new user's own records (:meth:`Remap.know_keyed`, :meth:`Remap.know_shared`).
"""

from __future__ import annotations

from datetime import date
from typing import Any
from uuid import UUID, uuid5

from contracts.daily_logs import (
    DailyLogState,
    ExtractionResultState,
    ExtractionTaskState,
    daily_log_id,
    extraction_result_id,
    extraction_task_uuid,
)
from contracts.memory import MemoryState, SharedMemoryState, Supersession
from contracts.portability import (
    DailyLogRecord,
    ExtractionResultRecord,
    ExtractionTaskRecord,
    MemoryRecord,
    SharedMemoryRecord,
)
from services.memory.domain.model import keyed_memory_id
from services.memory.domain.shared import shared_id

_NS = UUID("8f5b1c2e-6d3a-4f7e-9b0c-1a2d3e4f5a6b")


class Remap:
    """Ids of records exported from ``source`` as they are in ``target``."""

    def __init__(self, source: str | None, target: str) -> None:
        self.same = source is None or source == target
        self.source = source or target
        self.target = target
        #: source id -> id in ``target`` of the memories and shared memories whose key or title is
        #: known (the others are free-form: :meth:`other`)
        self.memories: dict[UUID, UUID] = {}
        self.shared: dict[UUID, UUID] = {}

    def know_keyed(self, project: str, memory_key: str) -> None:
        """A keyed memory the target holds: the source's memory of that key maps onto it."""
        self.memories[keyed_memory_id(self.source, project, memory_key)] = keyed_memory_id(self.target, project, memory_key)

    def know_shared(self, title: str) -> None:
        """A shared memory the target holds: the source's shared memory of that title maps onto it."""
        self.shared[shared_id(self.source, title)] = shared_id(self.target, title)

    def memory_id(self, old: UUID) -> UUID:
        """A source memory's id in the target, as its record is restored: its key's id when the key
        is known, the id it was restored beside another under (:meth:`beside`), else :meth:`other`."""
        return self.memories.get(old) or (old if self.same else self.other(old))

    def beside(self, record_id: UUID, versions: list[tuple[str, Any, MemoryState]]) -> list[tuple[str, Any, MemoryState]]:
        """A memory's versions under an id of their own, when another memory of the target holds
        theirs (one saved since with the same content: a free-form memory's id is its content's,
        and a purge frees it); the same id again when the import is retried, and what the
        records restored after it that name the memory are given."""
        new = self.beside_id(versions[-1][2].id)
        self.memories[record_id] = new
        return [(kind, at, state.model_copy(update={"id": new})) for kind, at, state in versions]

    def beside_id(self, held: UUID) -> UUID:
        """The id a memory whose id ``held`` is taken is restored under (:meth:`beside`)."""
        return uuid5(_NS, f"restored-beside:{self.target}:{held}")

    def shared_memory_id(self, old: UUID) -> UUID:
        """A source shared memory's id in the target: its title's id when known, else :meth:`other`."""
        return old if self.same else self.shared.get(old) or self.other(old)

    def other(self, old: UUID) -> UUID:
        return old if self.same else uuid5(_NS, f"import:{self.target}:{old}")

    def log(self, old: UUID, project: str | None, log_date: date | None) -> UUID:
        if self.same or project is None or log_date is None:
            return self.other(old)
        return daily_log_id(self.target, project, log_date)

    def memory_states(self, record: MemoryRecord) -> list[tuple[str, Any, MemoryState]]:
        """(event type, occurred_at, state) of every version, in the target user. The memories a
        state names (what it superseded, what superseded it, what it is flagged against) are named
        by their ids in the target, as :meth:`memory_id` maps them."""
        out = []
        for version in record.versions:
            data = version.state.model_dump()
            data["tenant"] = self.target
            if not self.same:
                key = data.get("memory_key")
                data["id"] = keyed_memory_id(self.target, data["project"], key) if key else self.other(data["id"])
                prov = data.get("provenance")
                if prov:
                    prov["log_id"] = self.log(prov["log_id"], data["project"], prov.get("log_date"))
            out.append((version.event, version.occurred_at, self._relinked(MemoryState.model_validate(data))))
        if not self.same:
            self.memories[record.id] = out[-1][2].id
        return out

    def _relinked(self, state: MemoryState) -> MemoryState:
        """``state`` naming the memories of :func:`links` by their ids in the target."""
        def moved(link: Supersession) -> Supersession:
            return link.model_copy(update={"memory_id": self.memory_id(link.memory_id)})

        return state.model_copy(update={
            "supersedes": [moved(s) for s in state.supersedes], "conflicts": [moved(c) for c in state.conflicts],
            "superseded_by": moved(state.superseded_by) if state.superseded_by is not None else None})

    def shared_state(self, record: SharedMemoryRecord) -> SharedMemoryState:
        data = record.state.model_dump()
        data["tenant"] = self.target
        if not self.same:
            data["id"] = self.shared[record.state.id] = shared_id(self.target, data["title"])
        return SharedMemoryState.model_validate(data)

    def log_state(self, record: DailyLogRecord) -> DailyLogState:
        data = record.state.model_dump()
        data["tenant"] = self.target
        if not self.same:
            data["id"] = daily_log_id(self.target, data["project"], data["log_date"])
        return DailyLogState.model_validate(data)

    def task_state(self, record: ExtractionTaskRecord) -> ExtractionTaskState:
        data = record.state.model_dump()
        data["tenant"] = self.target
        if not self.same:
            data["id"] = extraction_task_uuid(self.target, data["task_id"])
            data["log_ids"] = [self.log(i, record.log_projects.get(i), record.log_dates.get(i)) for i in data["log_ids"]]
        return ExtractionTaskState.model_validate(data)

    def result_state(self, record: ExtractionResultRecord) -> ExtractionResultState:
        data = record.state.model_dump()
        data["tenant"] = self.target
        data["memory_ids"] = [self.memory_id(i) for i in data["memory_ids"]]  # (same user: beside)
        if not self.same:
            data["log_id"] = self.log(data["log_id"], data["project"], record.log_date)
            data["id"] = extraction_result_id(self.target, data["log_id"], data["task_id"])
            data["shared_memory_ids"] = [self.shared_memory_id(i) for i in data["shared_memory_ids"]]
        return ExtractionResultState.model_validate(data)


def portable(state: Any) -> dict[str, Any]:
    """A state as an export writes it: without its tenant."""
    data: dict[str, Any] = state.model_dump(mode="json")
    data.pop("tenant", None)
    return data


def links(state: MemoryState) -> list[Supersession]:
    """The memories a memory's state names: what it superseded, what it is flagged against, what
    superseded it."""
    return [*state.supersedes, *state.conflicts, *([state.superseded_by] if state.superseded_by else [])]
