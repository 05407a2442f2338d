"""Memories: save, update and forget (commands, with their batch priming), and the reads of
memories by key, list, history, project and profile.

A command writes through kit's write path (:mod:`kit.aggregates`): it appends an event
(optimistic concurrency on the memory's subject) and projects it inline before replying, its
outcome recorded in the projection's transaction, so the caller reads its own write at once and
the effect and its outcome commit together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar
from uuid import UUID

from pydantic import BaseModel

from contracts.envelope import EventEnvelope, utcnow
from contracts.events import Event
from contracts.memory import (
    ForgetMemory,
    ForgetMemoryResult,
    GetMemory,
    GetMemoryByKey,
    GetProfile,
    ListProjects,
    MemoryEventType,
    MemoryHistory,
    MemoryHistoryQuery,
    MemoryList,
    MemoryLookup,
    MemoryState,
    MemoryStatus,
    MemoryView,
    Profile,
    ProjectList,
    RecallMemory,
    SaveMemory,
    SaveMemoryResult,
    UpdateMemory,
)
from contracts.subjects import Names
from kit.aggregates import Answer, Decide, Loaded, Write, WritePath
from kit.service import Call, CommandCall
from services.memory.application.common import HINTS_MAX, memory_subject
from services.memory.application.ports import EventLog, ReadModel
from services.memory.application.projection import MemoryProjection
from services.memory.domain import model
from services.memory.domain.errors import InvalidArgument, NotFound
from services.memory.search.encoders import Encoders
from services.memory.search.indexing import active_filter, content_vector, memory_passages
from services.memory.search.ports import VectorIndex

Content = tuple[str, str, str]  # (tenant, project, content hash)
C = TypeVar("C", SaveMemory, UpdateMemory)
R = TypeVar("R")


class Memories:
    """The commands on memories."""

    def __init__(
        self, store: ReadModel, index: VectorIndex, encoders: Encoders, events: EventLog, names: Names,
        writes: WritePath, clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.index = index
        self.encoders = encoders
        self.events = events
        self.names = names
        self.writes = writes
        self.clock = clock
        self._content_locks = [asyncio.Lock() for _ in range(64)]  # striped by content hash
        # Read once per fetched command batch (prime_saves) instead of once per command: contents
        # known to be in no active memory.
        self._absent_contents: set[Content] = set()
        self._content_writes = 0  # counts writes of memory contents, see prime_saves
        self._content_written: dict[Content, int] = {}

    async def save(self, call: CommandCall, cmd: SaveMemory) -> SaveMemoryResult:
        """Save a memory: by content (the same content again is not duplicated) or by memory_key."""
        call.require_project(cmd.project)
        cmd = await self._with_provenance(call, cmd)
        key = model.resolve_key(cmd)
        if key is not None:
            return await self._save_keyed(call, cmd, key)
        digest = model.content_hash(cmd.content)
        lock = self._content_locks[int(digest[:8], 16) % len(self._content_locks)]
        async with lock:  # identical contents saved concurrently here still make one memory
            content = (call.tenant, cmd.project, digest)
            if content in self._absent_contents:
                self._absent_contents.discard(content)
                existing = None
            else:
                existing = await self.store.find_active_by_hash(call.tenant, cmd.project, digest)
            if existing is not None:
                return _unchanged(existing)
            return await self._save_new_content(call, cmd, digest)

    async def _save_new_content(self, call: CommandCall, cmd: SaveMemory, digest: str) -> SaveMemoryResult:
        """A memory of a content no active memory holds, on its content's first free identity
        (:func:`model.content_memory_id`): a replica saving the same content at the same instant
        appends to the same aggregate, one of the two first events wins, and the other command
        answers with the winner's memory (projected here too, so its caller reads it at once). A
        generation already used by a memory since forgotten or changed is passed over — unless
        this very command created it (a retry after the log's duplicate window, its first
        attempt's outcome lost): then it answers what it did, and creates nothing more. A memory
        purged meanwhile frees its identity again (the write path's retry appends anew)."""
        generation = 0
        while True:
            state = model.new_memory(call.tenant, cmd, self.clock(), generation=generation)
            event = _event(call, state, MemoryEventType.SAVED)

            def decide(loaded: Loaded, state: MemoryState = state, event: EventEnvelope = event,
                       ) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult] | None:
                if loaded is None:  # (a new identity; or purged meanwhile: free again)
                    return Write(event, lambda stored: _saved(model.state_of(stored), created=True))
                current = model.state_of(loaded[0])
                if model.same_content_active(current, digest):
                    return Answer(_unchanged(current), project=loaded)  # (a no-op when its row is there)
                return None  # another memory's since: the next generation, unless it was ours

            reply = await self._write(call, state, decide, loaded=None)
            if reply is not None:
                return reply
            subject = memory_subject(self.names, call.tenant, state.id)
            first = await self.events.first_event(subject)
            if first is not None and first[0].event_id == event.event_id:
                return _saved(model.state_of(first[0]), created=True)
            generation += 1

    async def _with_provenance(self, call: CommandCall, cmd: C) -> C:
        """The command with its provenance's log date filled in; a provenance naming a log the
        caller cannot see (unknown, another user's, deleted) or turns it does not have is refused."""
        prov = cmd.provenance
        if prov is None:
            return cmd
        log = await self.store.get_log(call.tenant, prov.log_id)
        if log is None or not call.sees(log.project):
            raise NotFound(f"no daily log with id {prov.log_id}", "provenance.log_id")
        beyond = [i for i in prov.turns if i >= len(log.turns or [])]
        if beyond:
            raise InvalidArgument(f"daily log {prov.log_id} has {len(log.turns or [])} turns; no turn {beyond[0]}",
                                  "provenance.turns")
        return cmd.model_copy(update={"provenance": prov.model_copy(update={"log_date": log.log_date})})

    async def _save_keyed(self, call: CommandCall, cmd: SaveMemory, key: str) -> SaveMemoryResult:
        """Save by memory_key: the first save creates, every later save writes a new version."""
        memory_id = model.keyed_memory_id(call.tenant, cmd.project, key)

        def decide(loaded: Loaded) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult]:
            now = self.clock()
            if loaded is None:
                return self._decided(call, model.new_memory(call.tenant, cmd, now, memory_key=key),
                                     MemoryEventType.SAVED, created=True)
            current = model.state_of(loaded[0])
            new_state = model.save_over(current, cmd, now)
            if new_state is None:
                return Answer(_unchanged(current))
            return self._decided(call, new_state, MemoryEventType.UPDATED, created=False)

        reply = await self._write(call, memory_id, decide, what=f"memory_key {key}")
        assert reply is not None
        return reply

    async def update(self, call: CommandCall, cmd: UpdateMemory) -> SaveMemoryResult:
        """A new version of an existing memory, addressed by id or memory_key."""
        cmd = await self._with_provenance(call, cmd)
        if cmd.id is not None:
            found = await self.store.get(call.tenant, cmd.id)
            if found is None or not call.sees(found.project):
                raise NotFound(f"no memory with id {cmd.id}", "id")
            memory_id = found.id
        else:
            assert cmd.memory_key is not None
            call.require_project(cmd.project)
            memory_id = model.keyed_memory_id(call.tenant, cmd.project, cmd.memory_key)

        def decide(loaded: Loaded) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult]:
            if loaded is None:
                raise NotFound(f"no memory with memory_key {cmd.memory_key} in project {cmd.project}", "memory_key")
            current = model.state_of(loaded[0])
            new_state = model.update(current, cmd, self.clock())
            if new_state is None:
                return Answer(_unchanged(current))
            return self._decided(call, new_state, MemoryEventType.UPDATED, created=False)

        reply = await self._write(call, memory_id, decide)
        assert reply is not None
        return reply

    @staticmethod
    def _decided(call: CommandCall, state: MemoryState, event_type: MemoryEventType, *,
                 created: bool) -> Write[SaveMemoryResult]:
        """Append ``state`` as ``event_type``; the reply says what the log holds (a retry's first
        attempt's state, when it had appended it)."""
        return Write(_event(call, state, event_type), lambda stored: _saved(model.state_of(stored), created))

    async def _write(self, call: CommandCall, memory: MemoryState | UUID, decide: Decide[R], *,
                     loaded: Loaded | Literal["load"] = "load", what: str | None = None) -> R | None:
        """Kit's write path on one memory; a content written is noted for ``prime_saves`` once its
        projection committed."""
        memory_id = memory.id if isinstance(memory, MemoryState) else memory
        written: list[MemoryState] = []

        def noted(loaded: Loaded) -> Write[R] | Answer[R] | None:
            decided = decide(loaded)
            if not isinstance(decided, Write):
                return decided
            reply_of = decided.reply

            def reply(stored: Event[Any]) -> R:
                written[:] = [model.state_of(stored)]
                return reply_of(stored)

            return Write(decided.event, reply)

        reply = await self.writes.write(call, memory_subject(self.names, call.tenant, memory_id), noted, loaded=loaded,
                                        what=what or f"memory {memory_id}")
        if written:  # (appended, and projected: write returned)
            state = written[0]
            self._content_writes += 1
            content = (state.tenant, state.project, model.content_hash(state.content))
            self._content_written[content] = self._content_writes
            self._absent_contents.discard(content)
        return reply

    async def forget(self, call: CommandCall, cmd: ForgetMemory) -> ForgetMemoryResult:
        """Forget by id, or by content: an exact match first, then the closest memory above the
        semantic threshold; says so when nothing matches."""
        if (cmd.memory_id is None) == (cmd.content is None):
            raise InvalidArgument("give exactly one of memory_id or content", "content")
        found = await self._find_to_forget(call, cmd)
        if found is None:
            return ForgetMemoryResult(
                forgotten=False,
                message="No memory matches that content closely enough; nothing was forgotten. "
                "Recall first to see what is stored, then forget with the exact text.",
            )
        target, match, similarity = found

        def decide(loaded: Loaded) -> Write[ForgetMemoryResult] | Answer[ForgetMemoryResult]:
            if loaded is None:
                raise NotFound(f"memory {target.id} has no history", "memory_id")
            current = model.state_of(loaded[0])
            if current.status is MemoryStatus.FORGOTTEN:
                return Answer(ForgetMemoryResult(
                    forgotten=False, match=match, memory_id=current.id, content=current.content,
                    message="That memory was already forgotten.",
                ))
            now = self.clock()
            new_state = model.forget(current, cmd.reason, now, cmd.client)
            event = model.event_for(new_state, MemoryEventType.FORGOTTEN, command_id=call.command_id,
                                    correlation_id=call.correlation_id, now=now)
            return Write(event, lambda _: ForgetMemoryResult(
                forgotten=True, match=match, similarity=similarity, memory_id=new_state.id,
                content=new_state.content, message="Forgotten. It no longer appears in recall; its history remains.",
            ))

        reply = await self.writes.write(call, memory_subject(self.names, target.tenant, target.id), decide,
                                        what=f"memory {target.id}")
        assert reply is not None
        return reply

    async def _find_to_forget(
        self, call: CommandCall, cmd: ForgetMemory
    ) -> tuple[MemoryState, str, float | None] | None:
        tenant = call.tenant
        if cmd.memory_id is not None:
            state = await self.store.get(tenant, cmd.memory_id)
            if state is None or not call.sees(state.project):
                raise NotFound(f"no memory with id {cmd.memory_id}", "memory_id")
            return state, "id", None
        assert cmd.content is not None
        call.require_project(cmd.project)
        exact = await self.store.find_active_by_hash(tenant, cmd.project, model.content_hash(cmd.content))
        if exact is not None:
            return exact, "exact", 1.0
        # compared the way memories are embedded (sentence by sentence), not as one text
        dense = await asyncio.to_thread(content_vector, self.encoders.embedder, model.normalize_content(cmd.content))
        hits = await self.index.search(
            dense=dense, sparse=None, mode="dense", limit=3,
            filter=active_filter(tenant, cmd.project),
        )
        for hit in hits:
            if hit.score < model.SEMANTIC_FORGET_THRESHOLD:
                break
            state = await self.store.get(tenant, UUID(hit.id))
            if state is not None and state.status is MemoryStatus.ACTIVE:
                return state, "semantic", round(hit.score, 4)
        return None

    # batching -----------------------------------------------------------------------------
    async def prime_saves(self, batch: Sequence[tuple[CommandCall, BaseModel]]) -> None:
        """Prepare a fetched batch of commands (those with no outcome yet): embed every save's
        sentences in one call, and find with one query which contents are already saved, so each
        save skips that lookup.

        A content written by this process after the lookup started is left out (the write
        counter), so the hint never claims a content is new when a write may have raced it."""
        to_embed: list[tuple[Content | None, list[str]]] = []  # (unkeyed content, texts)
        documents: list[tuple[Content | None, tuple[str | None, str]]] = []  # late interaction's
        for call, cmd in batch:
            if not isinstance(cmd, SaveMemory):
                continue
            content = (call.tenant, cmd.project, model.content_hash(cmd.content)) if model.resolve_key(cmd) is None else None
            text, context = model.normalize_content(cmd.content), model.normalize_context(cmd.context)
            to_embed.append((content, memory_passages(text, context)))
            documents.append((content, (context, text)))
        contents = [content for content, _ in to_embed if content is not None]
        written_before = self._content_writes
        present = await self.store.active_hashes(contents)
        if len(self._absent_contents) > HINTS_MAX or len(self._content_written) > HINTS_MAX:
            self._absent_contents.clear()
            self._content_written.clear()  # (and forget the hints the counter guarded)
        self._absent_contents.update(
            c for c in contents if c not in present and self._content_written.get(c, 0) <= written_before
        )
        # a content already saved is answered "unchanged" without embedding (idempotent re-imports)
        await self.encoders.prime([t for content, texts in to_embed if content not in present for t in texts],
                    [d for content, d in documents if content not in present])


def _event(call: CommandCall, state: MemoryState, event_type: MemoryEventType) -> EventEnvelope:
    return model.event_for(state, event_type, command_id=call.command_id, correlation_id=call.correlation_id,
                           now=state.updated_at)


def _saved(state: MemoryState, created: bool) -> SaveMemoryResult:
    return SaveMemoryResult(
        memory_id=state.id, project=state.project, version=state.version, memory_key=state.memory_key,
        created=created, updated=not created,
    )


def _unchanged(current: MemoryState) -> SaveMemoryResult:
    return SaveMemoryResult(
        memory_id=current.id, project=current.project, version=current.version,
        memory_key=current.memory_key, created=False, updated=False,
    )


class MemoryReads:
    """The queries on memories (recall is :mod:`services.memory.search.recall`'s)."""

    def __init__(self, store: ReadModel, events: EventLog, names: Names, projection: MemoryProjection) -> None:
        self.store = store
        self.events = events
        self.names = names
        self._tenant_writes = projection.tenant_writes
        # Profiles are asked with most recalls and change only when the tenant's memories do:
        # cached per question, valid while the tenant's write count is what it was.
        self._profiles: dict[tuple[str, str | None, int, int], tuple[int, Profile]] = {}

    async def get_by_key(self, call: Call, q: GetMemoryByKey) -> MemoryLookup:
        call.require_project(q.project)
        state = await self.store.get(call.tenant, model.keyed_memory_id(call.tenant, q.project, q.memory_key))
        if state is not None and state.status is MemoryStatus.ACTIVE:
            return MemoryLookup(found=True, memory=MemoryView.model_validate(state.model_dump()))
        return MemoryLookup(found=False)

    async def list_memories(self, call: Call, rm: RecallMemory) -> MemoryList:
        project = call.search_project(rm.project)
        return MemoryList(memories=await self.store.list_active(call.tenant, project, rm.category, rm.keyword, rm.limit))

    async def get(self, call: Call, q: GetMemory) -> MemoryView:
        """A memory by id as it stands now (none outside the caller's project)."""
        state = await self.store.get(call.tenant, q.memory_id)
        if state is None or not call.sees(state.project):
            raise NotFound(f"no memory with id {q.memory_id}", "memory_id")
        return MemoryView.model_validate(state.model_dump())

    async def history(self, call: Call, hq: MemoryHistoryQuery) -> MemoryHistory:
        """Every version of a memory from the event log (none outside the caller's project)."""
        events = await self.events.history(memory_subject(self.names, call.tenant, hq.memory_id))
        if not events or not call.sees(model.state_of(events[-1][0]).project):
            raise NotFound(f"no memory with id {hq.memory_id}", "memory_id")
        return MemoryHistory(memory_id=hq.memory_id, versions=model.history(events))

    async def projects(self, call: Call, _: ListProjects) -> ProjectList:
        found = await self.store.projects(call.tenant)
        return ProjectList(projects=[p for p in found if call.sees(p.project)])

    async def profile(self, call: Call, q: GetProfile) -> Profile:
        project = call.search_project(q.project)
        return await self.cached_profile(call.tenant, q if project == q.project else q.model_copy(update={"project": project}))

    async def cached_profile(self, tenant: str, query: GetProfile) -> Profile:
        """The profile from the read model, cached until this process projects a write of the
        tenant's (every write passes through the projection here: inline, by the projector or replay)."""
        key = (tenant, query.project, query.static_limit, query.dynamic_limit)
        writes = self._tenant_writes[tenant]
        cached = self._profiles.get(key)
        if cached is not None and cached[0] == writes:
            return cached[1]
        profile = await self.store.profile(tenant, query.project, query.static_limit, query.dynamic_limit)
        if len(self._profiles) > HINTS_MAX:
            self._profiles.clear()
        self._profiles[key] = (writes, profile)
        return profile
