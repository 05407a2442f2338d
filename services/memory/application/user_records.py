"""A user's records in the memory service: exported page by page, restored, purged (its part of
portability, :mod:`contracts.portability`).

* ``export_page`` (query): a page of the user's records of one kind in id order, from the read
  model's ids; each record's state comes from the event log (a memory's every version, the
  others' last event), so an export says exactly what the log says. Pages are bounded in count
  and bytes, so an export of any size runs in constant memory on both ends.
* ``restore`` (command): exported records appended back to the event log as they were (ids,
  versions, timestamps, event types) and projected, each only if its subject does not already
  hold that version: an import run twice changes nothing. A batch's memory texts are embedded in
  one call, as a batch of saves is. Restored into another user, an extraction result names the
  memories as they were restored (a keyed memory by its key's id in that user: the key is learnt
  from the batch's own records, else from the user's keyed memories). A record whose id is
  another user's (the first event ever appended under that id, in any user, is theirs: only a
  crafted or edited file keeps such an id, since every id Engram makes is derived from its user)
  is refused, before anything of it is written: ids are global keys of the read model and the
  vector index, and restoring it would replace the other user's row and point.
* ``purge`` (command): every row of the user in this service's schema, their vectors, the
  embedding cache's entries derived from their memories' texts and the in-process caches that
  hold their content.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import date
from typing import Any, Protocol
from uuid import UUID, uuid5

from contracts.daily_logs import DAILY_LOG_AGGREGATE, EXTRACTION_RESULT_AGGREGATE, EXTRACTION_TASK_AGGREGATE
from contracts.envelope import EventEnvelope
from contracts.errors import ErrorBody, ErrorCode, ServiceError
from contracts.memory import MemoryState, MemoryStatus
from contracts.portability import (
    EXPORT_PAGE_BYTES,
    DailyLogRecord,
    ExportedVersion,
    ExportPage,
    ExportPageResult,
    ExtractionResultRecord,
    ExtractionTaskRecord,
    MemoryRecord,
    PurgeMemoryUser,
    PurgeResult,
    RecordKind,
    RestoreItem,
    RestoreRecords,
    RestoreResult,
    RestoreStatus,
    SharedMemoryRecord,
)
from contracts.subjects import MEMORY, Names
from kit.aggregates import Answer, Decide, Loaded, Write, WritePath
from kit.bus import ConcurrencyConflict
from kit.service import Call, CommandCall
from services.memory.application.ports import EventLog
from services.memory.application.projection import MemoryProjection
from services.memory.domain import model, shared
from services.memory.domain.errors import Conflict
from services.memory.domain.remap import Remap, links, portable
from services.memory.search.encoders import Encoders
from services.memory.search.indexing import embedding_texts
from services.memory.search.late import late_document
from services.memory.search.ports import VectorIndex

_NS = UUID("2c7e9a41-5b3d-4e8f-a1c6-9d0e7f3b5a24")
#: Memories a purge reads, uncaches and unindexes at a time.
_PURGE_PAGE = 1_000
_AGGREGATE: dict[RecordKind, str] = {
    "memory": model.AGGREGATE, "shared_memory": shared.AGGREGATE, "daily_log": DAILY_LOG_AGGREGATE,
    "extraction_task": EXTRACTION_TASK_AGGREGATE, "extraction_result": EXTRACTION_RESULT_AGGREGATE,
}


def _cursor(after: str | None) -> tuple[UUID | None, int]:
    """An export page's ``after``: the record after which the page starts, and how many of its
    versions were already given (0: all of it; ``<id>@<version>``: the page goes on inside it)."""
    if not after:
        return None, 0
    record, _, given = after.partition("@")
    try:
        return UUID(record), int(given) if given else 0
    except ValueError as exc:
        raise ServiceError("after must be the `next` of the previous page", "after") from exc


def memory_parts(record: MemoryRecord, given: int = 0, limit: int = EXPORT_PAGE_BYTES) -> list[MemoryRecord]:
    """A memory's record as consecutive parts of at most ``limit`` serialised bytes each (a version
    larger than that alone), its versions after the first ``given`` only: a memory edited many
    times over a long text would be one record beyond the bus's message limit. An import appends
    each part's versions after the previous part's, in file order."""
    parts: list[list[ExportedVersion]] = []
    size = 0
    for v in record.versions:
        if v.state.version <= given:
            continue
        v_size = len(v.model_dump_json().encode())
        if parts and size + v_size <= limit:
            parts[-1].append(v)
            size += v_size
        else:
            parts.append([v])
            size = _RECORD_BYTES + v_size
    return [MemoryRecord(id=record.id, versions=p) for p in parts]


#: what a memory record adds to its versions' bytes (its type, id and brackets)
_RECORD_BYTES = 100


class UserRecordsStore(Protocol):
    """What the export, the restore and the purge need from the read model beyond the usual reads."""

    async def page_ids(self, kind: RecordKind, tenant: str, project: str | None, after: UUID | None,
                       limit: int) -> list[UUID]:
        """Ids of the tenant's records of ``kind`` after ``after``, in id order."""
        ...

    async def log_refs(self, tenant: str, ids: Sequence[UUID]) -> dict[UUID, tuple[str, date]]:
        """(project, date) of the tenant's logs among ``ids``."""
        ...

    async def memory_states(self, tenant: str, after: UUID | None, limit: int) -> list[MemoryState]:
        """The tenant's memories (any status) after ``after``, in id order: what the purge derives
        the embedding cache's keys from."""
        ...

    async def cache_owned(self, tenant: str) -> list[bytes]:
        """The embedding cache digests noted as derived from the tenant's memories (any version)."""
        ...

    async def keyed_memories(self, tenant: str) -> list[tuple[str, str]]:
        """(project, memory key) of every keyed memory of the tenant."""
        ...

    async def shared_titles(self, tenant: str) -> list[str]:
        """The titles of the tenant's shared memories."""
        ...

    async def delete_tenant(self, tenant: str) -> dict[str, int]:
        """Delete every row of ``tenant`` in the service's schema; rows removed per table."""
        ...


class UserRecords:
    """The handlers of export pages, restores and the purge."""

    def __init__(self, port: UserRecordsStore, index: VectorIndex, encoders: Encoders, events: EventLog, names: Names,
                 projection: MemoryProjection, writes: WritePath, forget_caches: Callable[[str], None]) -> None:
        self.port = port
        self.writes = writes
        self.index = index
        self.encoders = encoders
        self.events = events
        self.names = names
        self.projection = projection
        self.forget_caches = forget_caches
        #: told the purged user once a purge is done (replicas with their own vector index: the
        #: memory service's entrypoint broadcasts it, see index_follow)
        self.after_purge: Callable[[str], Awaitable[None]] | None = None

    def _subject(self, kind: RecordKind, tenant: str, record_id: UUID) -> str:
        return self.names.event(tenant, _AGGREGATE[kind], str(record_id))

    async def _refuse_foreign(self, kind: RecordKind, tenant: str, record_id: UUID) -> None:
        """Refuse to restore a record under an id that is another user's: the first event ever
        appended under it (in any user: a wildcard over the tenant token) is not ``tenant``'s."""
        any_user = self.names.events_of(_AGGREGATE[kind]).removesuffix(">") + str(record_id)
        first = await self.events.first_event(any_user)
        if first is not None and first[0].tenant != tenant:
            raise Conflict(
                f"{kind.replace('_', ' ')} {record_id} is another user's: this record was not restored (an export "
                f"keeps its ids only when imported into the user it was exported from)", "id")

    # export ------------------------------------------------------------------------------
    async def export_page(self, call: Call, q: ExportPage) -> ExportPageResult:
        """A page of the caller's records of one kind (a restricted caller: its project only;
        shared memories belong to no project, so such a caller gets none). A memory whose versions
        together outgrow a page comes as consecutive parts (:func:`memory_parts`), and a page may
        end inside one: its ``next`` then names the last version given (``<id>@<version>``)."""
        project = call.search_project(q.project)
        if q.kind == "shared_memory" and project is not None:
            return ExportPageResult(records=[])
        after, given = _cursor(q.after)
        if given and q.kind != "memory":
            raise ServiceError("after must be the `next` of the previous page (only a memory's goes on inside it)",
                               "after")
        ids = await self.port.page_ids(q.kind, call.tenant, project, after, q.limit)
        todo = [after, *ids] if after is not None and given else list(ids)
        records: list[Any] = []
        size = 0
        cursor: str | None = None
        for record_id in todo:
            record = await self._record(q.kind, call.tenant, record_id)
            if record is not None and record_id == after and project is not None \
                    and record.versions[-1].state.project != project:
                record = None  # a cursor into a memory outside the page's project (or the caller's reach)
            parts = [] if record is None else (
                memory_parts(record, given if record_id == after else 0) if q.kind == "memory" else [record])
            for n, part in enumerate(parts, 1):
                part_size = len(part.model_dump_json().encode())
                if records and size + part_size > EXPORT_PAGE_BYTES:  # it starts the next page: a page
                    return ExportPageResult(records=records, next=cursor)  # must stay under the bus's limit
                records.append(part)
                size += part_size
                cursor = str(record_id) if n == len(parts) else f"{record_id}@{part.versions[-1].state.version}"
                if size >= EXPORT_PAGE_BYTES and (n < len(parts) or record_id != todo[-1] or len(ids) == q.limit):
                    return ExportPageResult(records=records, next=cursor)
            cursor = str(record_id)
        return ExportPageResult(records=records, next=cursor if ids and len(ids) == q.limit else None)

    async def _record(self, kind: RecordKind, tenant: str, record_id: UUID) -> Any:
        subject = self._subject(kind, tenant, record_id)
        if kind == "memory":
            history = await self.events.history(subject)
            if not history:
                return None
            return MemoryRecord(id=record_id, versions=[
                ExportedVersion(event=e.type, occurred_at=e.occurred_at, state=portable(model.state_of(e)))
                for e, _ in history
            ])
        loaded = await self.events.last_event(subject)
        if loaded is None:
            return None
        event = loaded[0]
        state = event.data  # (typed: the aggregate's state model)
        data = state.model_dump(mode="json", exclude={"tenant"})
        base = {"event": event.type, "occurred_at": event.occurred_at, "state": data}
        if kind == "shared_memory":
            return SharedMemoryRecord.model_validate(base)
        if kind == "daily_log":
            return DailyLogRecord.model_validate(base)
        if kind == "extraction_task":
            refs = await self.port.log_refs(tenant, list(state.log_ids))
            return ExtractionTaskRecord.model_validate({
                **base, "log_dates": {k: v[1] for k, v in refs.items()}, "log_projects": {k: v[0] for k, v in refs.items()},
            })
        refs = await self.port.log_refs(tenant, [state.log_id])
        found = refs.get(state.log_id)
        return ExtractionResultRecord.model_validate({**base, "log_date": found[1] if found else None})

    # restore -----------------------------------------------------------------------------
    async def restore(self, call: CommandCall, cmd: RestoreRecords) -> RestoreResult:
        """Append exported records back to the event log and project them; a record whose
        subject already holds its version is a duplicate."""
        remap = Remap(cmd.source_user, call.tenant)
        await self._prime(remap, cmd)
        await self._learn_names(remap, call.tenant, cmd)
        items = []
        for i, record in enumerate(cmd.records):
            try:
                items.append(await self._restore_one(call, remap, i, record))
            except ServiceError as exc:
                items.append(RestoreItem(index=i, status=RestoreStatus.ERROR,
                                         error=ErrorBody(code=exc.code, message=exc.message,
                                                         field=f"records[{i}].{exc.field}" if exc.field else f"records[{i}]")))
        return RestoreResult(items=items)

    async def _prime(self, remap: Remap, cmd: RestoreRecords) -> None:
        """Embed every memory that will be projected, in one call (as a batch of saves is)."""
        finals = [remap.memory_states(r)[-1][2] for r in cmd.records if isinstance(r, MemoryRecord)]
        active = [s for s in finals if s.status is MemoryStatus.ACTIVE]
        applied = await self.projection.store.applied_sequences([s.id for s in active])
        fresh = [s for s in active if s.id not in applied]
        if fresh:
            await self.encoders.prime([t for s in fresh for t in embedding_texts(s)], [late_document(s) for s in fresh])

    async def _learn_names(self, remap: Remap, tenant: str, cmd: RestoreRecords) -> None:
        """Before results and memories that name memories are restored: into the same user, which
        of the named memories were restored beside another (:meth:`Remap.beside`); into another user,
        the keys and titles their memory ids and shared memory ids need (:class:`Remap`). The
        batch's own records first (``_prime`` read its memories), then the keys the importer names
        for keyed memories of the file that come in a later batch (``named_keys``); an id still
        unknown may name a record restored by an earlier batch, so the user's keyed memories and
        shared titles are read (once, only then). An id known from none of them is a free-form
        memory's (``uuid5``)."""
        results = [r for r in cmd.records if isinstance(r, ExtractionResultRecord)]
        # the memories named by results, and by memories (what one superseded or is flagged against)
        named = {i for r in results for i in r.state.memory_ids} | {
            link.memory_id for r in cmd.records if isinstance(r, MemoryRecord) for v in r.versions for link in links(v.state)}
        if not named and not any(r.state.shared_memory_ids for r in results):
            return
        if remap.same:  # a memory restored beside another by an earlier request of the import
            for old in {i for i in named if i not in remap.memories}:
                moved = remap.beside_id(old)
                if await self.events.last_event(self._subject("memory", tenant, moved)) is not None:
                    remap.memories[old] = moved
            return
        for record in cmd.records:
            if isinstance(record, SharedMemoryRecord):
                remap.shared_state(record)
        for named_key in cmd.named_keys:  # keyed memories of the file restored by a later batch
            remap.know_keyed(named_key.project, named_key.memory_key)
        if any(i not in remap.memories for i in named):
            for project, key in await self.port.keyed_memories(tenant):
                remap.know_keyed(project, key)
        if any(i not in remap.shared for r in results for i in r.state.shared_memory_ids):
            for title in await self.port.shared_titles(tenant):
                remap.know_shared(title)

    async def _restore_one(self, call: CommandCall, remap: Remap, index: int, record: Any) -> RestoreItem:
        if isinstance(record, MemoryRecord):
            return await self._restore_memory(call, remap, index, record)
        if isinstance(record, SharedMemoryRecord):
            state: Any = remap.shared_state(record)
            kind: RecordKind = "shared_memory"
        elif isinstance(record, DailyLogRecord):
            state, kind = remap.log_state(record), "daily_log"
        elif isinstance(record, ExtractionTaskRecord):
            state, kind = remap.task_state(record), "extraction_task"
        else:
            state, kind = remap.result_state(record), "extraction_result"
        await self._refuse_foreign(kind, call.tenant, state.id)
        subject = self._subject(kind, call.tenant, state.id)
        restored = RestoreItem(index=index, status=RestoreStatus.RESTORED, id=state.id)

        def decide(loaded: Loaded) -> Write[RestoreItem] | Answer[RestoreItem]:
            if loaded is not None and loaded[0].data.version >= state.version:
                return Answer(RestoreItem(index=index, status=RestoreStatus.DUPLICATE, id=state.id))
            return Write(self._event(call, _AGGREGATE[kind], state.id, state.version, record.event,
                                     record.occurred_at, state.model_dump(mode="json")), lambda _: restored)

        return await self._write(call, subject, decide, await self.events.last_event(subject))

    async def _restore_memory(self, call: CommandCall, remap: Remap, index: int, record: MemoryRecord) -> RestoreItem:
        versions = remap.memory_states(record)
        memory_id = versions[-1][2].id
        subject = self._subject("memory", call.tenant, memory_id)
        history = await self.events.history(subject)
        if (history and versions[-1][2].memory_key is None  # (a key's memory is the key's, whoever made it)
                and model.state_of(history[0][0]).created_at != versions[-1][2].created_at):
            versions = remap.beside(record.id, versions)  # another memory holds the id (see there)
            memory_id = versions[-1][2].id
            subject = self._subject("memory", call.tenant, memory_id)
            history = await self.events.history(subject)
        await self._refuse_foreign("memory", call.tenant, memory_id)  # (before anything of it is written)

        def decide(loaded: Loaded) -> Write[RestoreItem] | Answer[RestoreItem]:
            newest = model.state_of(loaded[0]).version if loaded is not None else 0
            if versions[0][2].version > newest + 1:  # a later part of the record (memory_parts) alone
                raise ServiceError(
                    f"memory {memory_id} holds {newest} versions and this record goes on from version "
                    f"{versions[0][2].version}: import the file's earlier lines of this memory first", "versions")
            missing = [self._event(call, model.AGGREGATE, memory_id, state.version, event_type, occurred_at,
                                   state.model_dump(mode="json"))
                       for event_type, occurred_at, state in versions if state.version > newest]
            if not missing:
                return Answer(RestoreItem(index=index, status=RestoreStatus.DUPLICATE, id=memory_id))
            # every missing version appended in order; the last one projected
            return Write(missing[-1], lambda _: RestoreItem(index=index, status=RestoreStatus.RESTORED, id=memory_id),
                         before=tuple(missing[:-1]))

        # decided on the history read above: a save landing on the id after that read fails the
        # append (its expected sequence), and the item asks for the import again (never a retry
        # here, which would put the record's versions onto the newcomer instead of beside it)
        return await self._write(call, subject, decide, history[-1] if history else None)

    async def _write(self, call: CommandCall, subject: str, decide: Decide[RestoreItem], loaded: Loaded,
                     ) -> RestoreItem:
        """Kit's write path for one record, on what was read of it, in one attempt; the restore's
        result is recorded once, after its last record. A record changed meanwhile is that item's
        error (import again)."""
        try:
            item = await self.writes.write(call, subject, decide, outcome=False, loaded=loaded, attempts=1)
        except ConcurrencyConflict as exc:
            raise ServiceError(f"{subject} changed while being restored; import again", None,
                               code=ErrorCode.CONFLICT) from exc
        assert item is not None
        return item

    @staticmethod
    def _event(call: CommandCall, aggregate: str, record_id: UUID, version: int, event_type: str, occurred_at: Any,
               data: dict[str, Any]) -> EventEnvelope:
        return EventEnvelope(
            event_id=uuid5(_NS, f"restore:{call.tenant}:{aggregate}:{record_id}:{version}"), type=event_type,
            occurred_at=occurred_at, tenant=call.tenant, aggregate=aggregate, aggregate_id=str(record_id),
            correlation_id=call.correlation_id, causation_id=call.command_id, data=data, origin="import",
        )

    # purge -------------------------------------------------------------------------------
    async def purge(self, call: CommandCall, cmd: PurgeMemoryUser) -> PurgeResult:
        """Delete every row of the user in this service's schema, their vectors and cached
        content. Idempotent: a second purge removes nothing. The user's events are purged from
        the event stream by the caller (kit/purge.py), before and after this command.

        The embedding cache is keyed by hashes of texts, not by user: its entries derived from the
        user's memories (sentence vectors, late-interaction tokens, dense and keyword vectors) are
        found from the memories' rows (their current versions) and from the digests noted for the
        user as each version was projected (earlier versions: their events are already purged),
        and deleted page by page, with the vectors, before the rows go, so a purge
        interrupted anywhere and run again finds them from the rows still there. Another user's
        memory of the same text loses its entries too: a cache, it is recomputed when needed."""
        user = cmd.user_id
        cache = self.encoders.cache
        vectors = cached = 0
        after: UUID | None = None
        if cache is not None:  # texts of versions since replaced: no row holds them any more
            cached += await cache.forget_digests(await self.port.cache_owned(user))
        while page := await self.port.memory_states(user, after, _PURGE_PAGE):
            if cache is not None:
                cached += await cache.forget_memories(self.encoders, page)
            await self.index.delete([str(s.id) for s in page])
            vectors += len(page)
            after = page[-1].id
        removed = await self.port.delete_tenant(user)
        removed["vectors"] = vectors
        removed["embedding_cache"] = cached
        self.forget_caches(user)
        if self.after_purge is not None:
            await self.after_purge(user)
        return PurgeResult(service=MEMORY, removed=removed)

