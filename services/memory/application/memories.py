"""Memories: save, update and forget (commands, with their batch priming), and the reads of
memories by key, list, history, project and profile.

A command writes through kit's write path (:mod:`kit.aggregates`): it appends an event
(optimistic concurrency on the memory's subject) and projects it inline before replying, its
outcome recorded in the projection's transaction, so the caller reads its own write at once and
the effect and its outcome commit together.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar
from uuid import UUID

import numpy as np
from pydantic import BaseModel

from contracts.daily_logs import DailyLogState, turn_digest
from contracts.envelope import EventEnvelope, utcnow
from contracts.events import Event
from contracts.memory import (
    LISTED_CONTENT_CHARS,
    MAX_LISTED_PROJECTS,
    MAX_RECALL_LIMIT,
    ConflictList,
    ConflictView,
    DecidedBy,
    ForgetMemory,
    ForgetMemoryResult,
    GetMemory,
    GetMemoryByKey,
    GetProfile,
    ListConflicts,
    ListProjects,
    MemoryEventType,
    MemoryHistory,
    MemoryHistoryQuery,
    MemoryList,
    MemoryLookup,
    MemoryState,
    MemoryStatus,
    MemoryView,
    MergeMemory,
    MergeMemoryResult,
    MoveMemory,
    MoveMemoryResult,
    PinMemory,
    Profile,
    ProjectList,
    RecallMemory,
    ReinstateExpired,
    ReinstateExpiredResult,
    SaveMemory,
    SaveMemoryResult,
    SettleConflict,
    SettleConflictResult,
    Supersession,
    UnmergeMemory,
    UnmergeMemoryResult,
    UpdateMemory,
    abridged,
    excerpt,
)
from contracts.subjects import Names
from kit.aggregates import Answer, Decide, Loaded, Write, WritePath
from kit.service import Call, CommandCall
from services.memory.application.common import HINTS_MAX, memory_subject
from services.memory.application.ports import EventLog, Judge, ReadModel, StandingOrder
from services.memory.application.projection import MemoryProjection
from services.memory.domain import decay, log_edits, model, paging, truth
from services.memory.domain.errors import Conflict, InvalidArgument, NotFound
from services.memory.domain.supersession import Opinion, Statement, Verdict, decide_all, second_opinion
from services.memory.search.as_of import as_they_stood, mark_superseded, nameable, superseded_since
from services.memory.search.encoders import Encoders
from services.memory.search.indexing import active_filter, content_vector, memory_passages, view_of
from services.memory.search.ports import VectorIndex

Content = tuple[str, str, str]  # (tenant, project, content hash)
log = logging.getLogger(__name__)

#: recall_memory's status filter: the read model's statuses it lists
LISTED_STATUSES: dict[str, tuple[str, ...]] = {
    "current": (MemoryStatus.ACTIVE.value,), "superseded": (MemoryStatus.SUPERSEDED.value,),
    "forgotten": (MemoryStatus.FORGOTTEN.value,),
    "all": (MemoryStatus.ACTIVE.value, MemoryStatus.SUPERSEDED.value, MemoryStatus.FORGOTTEN.value)}
#: recall_memory's status filter as of a moment: what stood then, what was superseded by then, or both
AS_OF_STATUSES: dict[str, frozenset[str]] = {
    "current": frozenset({"standing"}), "superseded": frozenset({"superseded"}),
    "all": frozenset({"standing", "superseded"})}
#: a save puts at most this many flagged pairs to the LLM judge, and waits for it this long at most
MAX_JUDGED = 3
JUDGE_TIMEOUT_S = 30.0
#: an answer as of a past moment reads this many times the candidates it returns from the read model
#: (some did not stand as they are now), at most ``AS_OF_MAX_CANDIDATES``
AS_OF_OVERFETCH = 3
AS_OF_MAX_CANDIDATES = 300


def _by_importance(_: datetime) -> Callable[[MemoryView], tuple[float, datetime]]:
    return lambda v: (v.importance, v.updated_at)


def _by_weight(_: datetime) -> Callable[[MemoryView], tuple[float, datetime]]:
    return lambda v: (v.importance * v.confidence, v.updated_at)


def _by_last_change(moment: datetime) -> Callable[[MemoryView], tuple[datetime]]:
    """A memory's last change by ``moment`` (one changed since: when it was said)."""
    return lambda v: (v.updated_at if v.updated_at <= moment else truth.valid_from(v),)


_STANDING_KEYS: dict[str, Callable[[datetime], Callable[[MemoryView], Any]]] = {
    "importance": _by_importance, "weight": _by_weight, "recent": _by_last_change}

#: a listing page's sort keys, by sort (what its cursor carries of the page's last memory)
_PAGE_KEYS: dict[str, Callable[[MemoryView], list[Any]]] = {
    "importance": lambda v: [v.importance, v.updated_at, v.id],
    "newest": lambda v: [v.created_at, v.id], "oldest": lambda v: [v.created_at, v.id]}
_KEY_TYPES: dict[str, tuple[Callable[[Any], Any], ...]] = {
    "importance": (int, datetime.fromisoformat, UUID), "newest": (datetime.fromisoformat, UUID),
    "oldest": (datetime.fromisoformat, UUID)}


def page_cursor(sort: str, last: MemoryView) -> str:
    """The cursor after ``last`` in ``sort`` (:mod:`services.memory.domain.paging`)."""
    return paging.encode(sort, _PAGE_KEYS[sort](last))


def page_after(sort: str, cursor: str) -> list[Any]:
    """The sort keys a cursor carries; refused (409, naming cursor) unless this listing gave it in ``sort``."""
    return paging.decode(cursor, _KEY_TYPES, sort)


C = TypeVar("C", SaveMemory, UpdateMemory)
R = TypeVar("R")


async def visible(store: ReadModel, call: Call, memory_id: UUID, field: str) -> MemoryState:
    """The memory ``memory_id`` as the read model holds it, if the caller may see it (else, whether
    it is missing or outside the caller's projects alike: not found, naming ``field``)."""
    found = await store.get(call.tenant, memory_id)
    if found is None or not call.sees(found.project):
        raise NotFound(f"no memory with id {memory_id}", field)
    return found


class Memories:
    """The commands on memories."""

    def __init__(
        self, store: ReadModel, index: VectorIndex, encoders: Encoders, events: EventLog, names: Names,
        writes: WritePath, clock: Callable[[], datetime] = utcnow, judge: Judge | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.encoders = encoders
        self.events = events
        self.names = names
        self.writes = writes
        self.clock = clock
        self.judge = judge  # a second opinion on flagged pairs (the LLM judge), when configured
        self._content_locks = [asyncio.Lock() for _ in range(64)]  # striped by content hash
        # Read once per fetched command batch (prime_saves) instead of once per command: contents
        # known to be in no active memory.
        self._absent_contents: set[Content] = set()
        self._content_writes = 0  # counts writes of memory contents, see prime_saves
        self._content_written: dict[Content, int] = {}

    async def save(self, call: CommandCall, cmd: SaveMemory) -> SaveMemoryResult:
        """Save a memory: by content (the same content again is not duplicated) or by memory_key.

        A free-form memory is first judged against the nearest current memories of its project
        (:mod:`services.memory.domain.truth`): the same fact said again is merged into the memory
        that holds it; a changed fact supersedes the memories it changes; what the rules cannot
        settle is flagged."""
        call.require_project(cmd.project)
        cmd = await self._with_provenance(call, cmd)
        key = model.resolve_key(cmd)
        if key is not None:
            return await self._save_keyed(call, cmd, key)
        digest = model.content_hash(cmd.content)
        lock = self._content_locks[int(digest[:8], 16) % len(self._content_locks)]
        when = truth.said_at(cmd.provenance, self.clock())
        async with lock:  # identical contents saved concurrently here still make one memory
            content = (call.tenant, cmd.project, digest)
            if content in self._absent_contents:
                self._absent_contents.discard(content)
                existing = None
            else:
                existing = await self.store.find_active_by_hash(call.tenant, cmd.project, digest)
            if existing is not None:
                if cmd.provenance is not None and not truth.already_merged(existing, cmd):
                    merged = await self._merge(call, existing.id, cmd, when, judged=truth.first_person(existing.content))
                    if merged is not None:
                        return merged
                await self._carry_out(call, existing)  # (a retry whose first attempt stopped half-way)
                return _unchanged(existing)
            p = truth.plan(await self._judge(call.tenant, cmd.project, cmd.content, when, cmd))
            if p.merge_into is not None:
                merged = await self._merge(call, p.merge_into.candidate.ref, cmd, when,  # type: ignore[arg-type]
                                           judged=p.merge_into.candidate.content)
                if merged is not None:
                    return merged
                p = truth.Plan()  # (the duplicate is no longer current: this replica's index was behind)
            reply = await self._save_new_content(call, cmd, digest, p, when)
        return reply

    async def _judge(self, tenant: str, project: str, content: str, when: datetime, cmd: SaveMemory | MemoryState,
                     exclude: UUID | None = None) -> list[truth.Decision]:
        """The rules' decisions on ``content`` against the current memories of ``project`` nearest to it."""
        text = model.normalize_content(content)
        dense = await asyncio.to_thread(content_vector, self.encoders.embedder, text)
        hits = await self.index.search(dense=dense, sparse=None, mode="dense", limit=truth.CANDIDATES,
                                       filter=active_filter(tenant, project))
        hits = [h for h in hits if h.score >= truth.MIN_SIMILARITY and h.id != str(exclude)]
        if not hits:
            return []
        views = {h.id: v for h in hits if (v := view_of(h.id, h.payload)) is not None}
        if len(views) < len(hits):
            views.update({str(k): v for k, v in (await self.store.views(tenant, [UUID(h.id) for h in hits
                                                                                 if h.id not in views])).items()})
        candidates = [truth.candidate(views[h.id], h.score) for h in hits if h.id in views]
        statement = truth.statement(cmd.model_copy(update={"content": text}), when)
        # the rules are CPU (3 ms at p50, 25 ms at p99 for 8 LoCoMo turns): off the event loop
        decisions = await asyncio.to_thread(decide_all, statement, candidates)
        if self.judge is not None and any(d.verdict is Verdict.UNCERTAIN for d in decisions):
            decisions = await self._second_opinions(statement, decisions)
        return decisions

    async def _second_opinions(self, new: Statement, decisions: list[truth.Decision]) -> list[truth.Decision]:
        """The pairs the rules flagged, put to the LLM judge (at most ``MAX_JUDGED`` per save, at once):
        a sure answer settles a pair (``decided_by: llm``); no answer or an unsure one leaves it flagged."""
        judge = self.judge
        assert judge is not None
        doubtful = [i for i, d in enumerate(decisions) if d.verdict is Verdict.UNCERTAIN][:MAX_JUDGED]

        async def ask(d: truth.Decision) -> Opinion | None:
            try:
                return await asyncio.wait_for(judge.judge(new, d.candidate), JUDGE_TIMEOUT_S)
            except TimeoutError:
                log.warning("the LLM judge took more than %.0f s: the pair stays flagged", JUDGE_TIMEOUT_S)
                return None

        opinions = await asyncio.gather(*(ask(decisions[i]) for i in doubtful))
        out = list(decisions)
        for i, opinion in zip(doubtful, opinions, strict=True):
            if opinion is not None:
                out[i] = second_opinion(decisions[i], opinion, new)
        return out

    async def _merge(self, call: CommandCall, memory_id: UUID, cmd: SaveMemory, when: datetime, *,
                     judged: str) -> SaveMemoryResult | None:
        """The same fact said again: one more saying of ``memory_id`` (``MemoryMerged``); None when
        that memory is no longer what was judged (forgotten, superseded or changed since this
        replica's index saw it: ``judged`` is the content the rules compared)."""

        def decide(loaded: Loaded) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult] | None:
            if loaded is None:
                return None
            current = model.state_of(loaded[0])
            if current.status is not MemoryStatus.ACTIVE or truth.first_person(current.content) != judged:
                return None
            if truth.already_merged(current, cmd):
                return Answer(_unchanged(current))
            new_state = truth.merged(current, cmd, when, self.clock())
            return Write(_event(call, new_state, MemoryEventType.MERGED),
                         lambda stored: _saved(model.state_of(stored), created=False, merged=True))

        return await self._write(call, memory_id, decide)

    async def _carry_out(self, call: CommandCall, state: MemoryState | UUID,
                         whys: Sequence[Supersession] | None = None) -> None:
        """What a new memory's state says about others, carried out on them: each memory it
        supersedes is marked superseded (``MemorySuperseded``; nothing when it already is, so a
        retried command appends nothing). Each is its own aggregate's write; the command's outcome
        is recorded after all of them (kit's runtime), so a command stopped half-way is run again."""
        if isinstance(state, UUID):
            loaded = await self.store.get(call.tenant, state)
            if loaded is None:
                return
            state = loaded
        new = state
        why = {w.memory_id: w for w in (state.supersedes if whys is None else whys)}
        await self._on_each(call, why, lambda old: truth.superseded(old, new.id, truth.valid_from(new), why[old.id],
                                                                    self.clock()), MemoryEventType.SUPERSEDED)

    async def _on_each(self, call: CommandCall, ids: Iterable[UUID],
                       change: Callable[[MemoryState], MemoryState | None],
                       event_type: MemoryEventType) -> list[MemoryState]:
        """``change`` carried out on each memory of ``ids`` (its state now), each its own aggregate's
        write (``event_type``; nothing where it gives None: done already, so a retried command
        appends nothing); the command's outcome is recorded after all of them (kit's runtime), so a
        command stopped half-way is run again. The states written."""
        written: list[MemoryState] = []
        for memory_id in ids:
            def decide(loaded: Loaded) -> Write[MemoryState | None] | Answer[MemoryState | None]:
                state = change(model.state_of(loaded[0])) if loaded is not None else None
                if state is None:
                    return Answer(None)
                return Write(model.event_for(state, event_type, command_id=call.command_id,
                                             correlation_id=call.correlation_id, now=state.updated_at), model.state_of)

            done = await self.writes.write(call, memory_subject(self.names, call.tenant, memory_id), decide,
                                           outcome=False, what=f"memory {memory_id}")
            if done is not None:
                written.append(done)
        return written

    async def _save_new_content(self, call: CommandCall, cmd: SaveMemory, digest: str, p: truth.Plan,
                                when: datetime) -> SaveMemoryResult:
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
            state = truth.with_plan(model.new_memory(call.tenant, cmd, self.clock(), generation=generation), p, when)
            event = _event(call, state, MemoryEventType.SAVED)

            def decide(loaded: Loaded, state: MemoryState = state, event: EventEnvelope = event,
                       ) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult] | None:
                if loaded is None:  # (a new identity; or purged meanwhile: free again)
                    return Write(event, lambda stored: _saved(model.state_of(stored), created=True))
                current = model.state_of(loaded[0])
                if model.same_content_active(current, digest):
                    return Answer(_unchanged(current), project=loaded)  # (a no-op when its row is there)
                return None  # another memory's since: the next generation, unless it was ours

            # with memories to supersede, the outcome is recorded once they are (kit's runtime)
            reply = await self._write(call, state, decide, loaded=None, outcome=not state.supersedes)
            if reply is None:
                subject = memory_subject(self.names, call.tenant, state.id)
                first = await self.events.first_event(subject)
                if first is None or first[0].event_id != event.event_id:
                    generation += 1
                    continue
                reply = _saved(model.state_of(first[0]), created=True)
            if reply.created:
                await self._carry_out(call, state)
            return reply

    async def _with_provenance(self, call: CommandCall, cmd: C) -> C:
        """The command with its provenance's log date filled in; a provenance naming a log the
        caller cannot see (unknown, another user's, deleted) or turns it does not have is refused."""
        prov = cmd.provenance
        if prov is None:
            return cmd
        log = await self.store.get_log(call.tenant, prov.log_id)
        if log is None or not call.sees(log.project):
            raise NotFound(f"no daily log with id {prov.log_id}", "provenance.log_id")
        turns = log.turns or []
        beyond = [i for i in prov.turns if i >= len(turns)]
        if beyond:
            raise InvalidArgument(f"daily log {prov.log_id} has {len(turns)} turns; no turn {beyond[0]}",
                                  "provenance.turns")
        digests = prov.turn_digests if len(prov.turn_digests) == len(prov.turns) else [
            turn_digest(turns[i].speaker, turns[i].text) for i in prov.turns]
        return cmd.model_copy(update={"provenance": prov.model_copy(update={"log_date": log.log_date,
                                                                            "turn_digests": digests})})

    async def forget_unlearnt(self, call: CommandCall, log: DailyLogState) -> list[MemoryState]:
        """The memories learnt only from turns the log no longer holds (:func:`log_edits.unlearnt`),
        forgotten, what each had superseded current again first (so that a command stopped half-way
        and run again finds the memory still to forget, and finishes). The memories forgotten."""
        kept = {turn_digest(t.speaker, t.text) for t in log.turns or []}

        def gone(state: MemoryState) -> bool:
            return log_edits.unlearnt(state, log.id, log.created_at, kept) and call.sees(state.project)

        found = [m for m in await self.store.learnt_from_log(call.tenant, log.id) if gone(m)]
        for memory in found:
            if memory.supersedes:
                await self._reinstate(call, memory)
        reason = log_edits.unlearnt_reason(log.log_date)
        return await self._on_each(call, [m.id for m in found],
                                   lambda current: model.forget(current, reason, self.clock()) if gone(current) else None,
                                   MemoryEventType.FORGOTTEN)

    async def _save_keyed(self, call: CommandCall, cmd: SaveMemory, key: str) -> SaveMemoryResult:
        """Save by memory_key: the first save creates, every later save writes a new version (the
        key's own chain of supersession); the same content said again in another log is counted as
        said again. Other memories the new content changes are superseded, doubtful ones flagged."""
        memory_id = model.keyed_memory_id(call.tenant, cmd.project, key)
        when = truth.said_at(cmd.provenance, self.clock())
        decisions = await self._judge(call.tenant, cmd.project, cmd.content, when, cmd, exclude=memory_id)
        if cmd.provenance is not None:
            merged = await self._merge_said_again(call, cmd, memory_id, truth.plan(decisions), when)
            if merged is not None:
                return merged
        p = truth.plan([d for d in decisions if d.verdict is not Verdict.DUPLICATE])
        p = truth.Plan(supersede=p.supersede, flags=p.flags)  # a keyed fact is its key's current value
        added: list[Supersession] = []

        def decide(loaded: Loaded) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult]:
            now = self.clock()
            if loaded is None:
                state = truth.with_plan(model.new_memory(call.tenant, cmd, now, memory_key=key), p, when)
                added[:] = state.supersedes
                return self._decided(call, state, MemoryEventType.SAVED, created=True)
            current = model.state_of(loaded[0])
            if (cmd.provenance is not None and current.status is MemoryStatus.ACTIVE
                    and model.normalize_content(cmd.content) == current.content):
                if truth.already_merged(current, cmd):
                    return Answer(_unchanged(current))
                # the same words from another log: said again, not a new version
                return Write(_event(call, truth.merged(current, cmd, when, now), MemoryEventType.MERGED),
                             lambda stored: _saved(model.state_of(stored), created=False, merged=True))
            new_state = model.save_over(current, cmd, now)
            if new_state is None:
                added[:] = current.supersedes  # (a retry whose first attempt stopped half-way: idempotent)
                return Answer(_unchanged(current))
            new_state, added[:] = _judged_version(current, truth.new_content(current, new_state, when), p)
            return self._decided(call, new_state, MemoryEventType.UPDATED, created=False)

        reply = await self._write(call, memory_id, decide, what=f"memory_key {key}", outcome=not p.supersede)
        assert reply is not None
        if added:
            await self._carry_out(call, reply.memory_id, added)
        return reply

    async def _merge_said_again(self, call: CommandCall, cmd: SaveMemory, memory_id: UUID, p: truth.Plan,
                                when: datetime) -> SaveMemoryResult | None:
        """A fact learnt from a log under a key of its own that no memory holds yet, which the rules
        judge the same fact as a current memory (another phrasing of it, said in another log): one more
        saying of that memory, as a free-form save's would be, not a second memory beside it. A key
        that already holds a memory keeps its own chain of versions. None: saved under its key."""
        if p.merge_into is None or await self.store.get(call.tenant, memory_id) is not None:
            return None
        return await self._merge(call, p.merge_into.candidate.ref, cmd, when,  # type: ignore[arg-type]
                                 judged=p.merge_into.candidate.content)

    async def _judged_update(self, call: CommandCall, base: MemoryState | None, cmd: UpdateMemory,
                             when: datetime) -> truth.Plan:
        """What an update's new content changes in the memory's project (as a keyed save's: what it
        supersedes, what it is flagged against; never a merge: the memory is its own)."""
        if base is None or cmd.content is None or model.normalize_content(cmd.content) == base.content:
            return truth.Plan()
        subject = base.model_copy(update={"content": cmd.content, "category": cmd.category or base.category})
        decisions = await self._judge(call.tenant, base.project, cmd.content, when, subject, exclude=base.id)
        p = truth.plan([d for d in decisions if d.verdict is not Verdict.DUPLICATE])
        return truth.Plan(supersede=p.supersede, flags=p.flags)

    async def update(self, call: CommandCall, cmd: UpdateMemory) -> SaveMemoryResult:
        """A new version of an existing memory, addressed by id or memory_key."""
        cmd = await self._with_provenance(call, cmd)
        if cmd.id is not None:
            found = await visible(self.store, call, cmd.id, "id")
            memory_id = found.id
        else:
            assert cmd.memory_key is not None
            call.require_project(cmd.project)
            memory_id = model.keyed_memory_id(call.tenant, cmd.project, cmd.memory_key)
            found = await self.store.get(call.tenant, memory_id)

        when = truth.said_at(cmd.provenance, self.clock())
        p = await self._judged_update(call, found, cmd, when)
        withdrawn = await self._withdrawn(call, found, cmd.content, when) if found is not None else []
        added: list[Supersession] = []
        written: list[MemoryState] = []  # the new version (what the memories withdrawn are checked against)
        resumed: list[MemoryState] = []  # the version a first attempt of this command wrote

        def decide(loaded: Loaded) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult]:
            if loaded is None:
                raise NotFound(f"no memory with memory_key {cmd.memory_key} in project {cmd.project}", "memory_key")
            current = model.state_of(loaded[0])
            now = self.clock()
            new_state = model.update(current, cmd, now)
            if new_state is None:
                added[:] = current.supersedes  # (a retry whose first attempt stopped half-way: idempotent)
                if loaded[0].causation_id == call.command_id and loaded[0].type == MemoryEventType.UPDATED.value:
                    resumed[:] = [current]  # ... which answers as that attempt did
                    return Answer(_saved(current, created=False))
                return Answer(_unchanged(current))
            new_state, added[:] = _judged_version(current, truth.new_content(current, new_state, when), p)
            new_state = new_state.model_copy(update={"supersedes": [w for w in new_state.supersedes
                                                                    if w.memory_id not in withdrawn]})
            written[:] = [new_state]
            return self._decided(call, new_state, MemoryEventType.UPDATED, created=False)

        # with memories to supersede or bring back, the outcome is recorded once they are (kit's runtime)
        reply = await self._write(call, memory_id, decide, outcome=not p.supersede and not withdrawn)
        assert reply is not None
        if resumed and found is not None:  # a retry: what its first attempt withdrew may not be back yet
            states = [model.state_of(e) for e, _ in await self.events.history(
                memory_subject(self.names, call.tenant, memory_id))]
            before = next((v for v in reversed(states) if v.version < resumed[0].version), None)
            withdrawn = await self._withdrawn(call, before, cmd.content, when) if before is not None else []
            written[:] = resumed
        if added:
            await self._carry_out(call, reply.memory_id, added)
        if withdrawn and written and written[0].status is MemoryStatus.ACTIVE:
            back = await self._reinstate(call, written[0], withdrawn)
            reply = reply.model_copy(update={"reinstated": [m.id for m in back]})
        return reply

    async def _withdrawn(self, call: CommandCall, base: MemoryState, content: str | None,
                         when: datetime) -> list[UUID]:
        """The memories ``base`` supersedes that its new ``content`` no longer changes: the rules, as
        for a save, on each of them (an edit that takes a change back, "I moved to Porto" made "I like
        port wine", brings back what the change had hidden). None when the content is kept."""
        text = model.normalize_content(content) if content is not None else base.content
        if text == base.content:
            return []
        held = await self.store.superseded_by(call.tenant, base.id)
        if not held:
            return []
        dense = np.asarray(await asyncio.to_thread(content_vector, self.encoders.embedder, text))
        stored = await self.index.stored_dense([str(v.id) for v in held], ())
        candidates = [truth.candidate(v, float(dense @ np.asarray(stored[str(v.id)][0])))  # as a save's judgement
                      for v in held if str(v.id) in stored]                              # compares with a hit
        candidates.sort(key=lambda c: -c.similarity)
        statement = truth.statement(base.model_copy(update={"content": text}), when)
        decisions = await asyncio.to_thread(decide_all, statement, candidates)
        still = {d.candidate.ref for d in decisions if d.new_supersedes}
        return [c.ref for c in candidates if c.ref not in still]  # type: ignore[misc]  # (one not indexed stays)

    @staticmethod
    def _decided(call: CommandCall, state: MemoryState, event_type: MemoryEventType, *,
                 created: bool) -> Write[SaveMemoryResult]:
        """Append ``state`` as ``event_type``; the reply says what the log holds (a retry's first
        attempt's state, when it had appended it)."""
        return Write(_event(call, state, event_type), lambda stored: _saved(model.state_of(stored), created))

    async def _write(self, call: CommandCall, memory: MemoryState | UUID, decide: Decide[R], *,
                     loaded: Loaded | Literal["load"] = "load", what: str | None = None, outcome: bool = True,
                     ) -> R | None:
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
                                        what=what or f"memory {memory_id}", outcome=outcome)
        if written:  # (appended, and projected: write returned)
            state = written[0]
            self._content_writes += 1
            content = (state.tenant, state.project, model.content_hash(state.content))
            self._content_written[content] = self._content_writes
            self._absent_contents.discard(content)
        return reply

    async def settle(self, call: CommandCall, cmd: SettleConflict) -> SettleConflictResult:
        """Settle a flagged pair (``list_conflicts``): both stand (the flag is removed), or one is
        current and the other superseded by it, decided by whoever settles (an agent over MCP, a
        person over REST). The flag lives on ``memory_id``: its removal and, when it is the one
        superseded, its supersession are one event; the other's supersession is its own."""
        await visible(self.store, call, cmd.memory_id, "memory_id")
        other = await visible(self.store, call, cmd.other_id, "other_id")
        if cmd.keep == "other":
            _keepable(other)
        by = DecidedBy.AGENT if cmd.client else DecidedBy.PERSON
        reason = (cmd.reason or "")[:500] or {"both": "both stand", "memory": "settled: the flagged memory is current",
                                "other": "settled: the earlier memory is current"}[cmd.keep]

        def decide(loaded: Loaded) -> Write[SettleConflictResult] | Answer[SettleConflictResult]:
            if loaded is None:
                raise NotFound(f"no memory with id {cmd.memory_id}", "memory_id")
            current = model.state_of(loaded[0])
            if not any(c.memory_id == cmd.other_id for c in current.conflicts):
                return Answer(SettleConflictResult(settled=False, current=[current.id, cmd.other_id],
                                                   message="No open conflict between these two memories."))
            if cmd.keep == "memory":
                _keepable(current)
            now = self.clock()
            state = truth.settled(current, cmd.other_id, now)
            why = Supersession(memory_id=cmd.other_id, reason=reason, confidence=1.0, decided_by=by)
            kind = MemoryEventType.CONFLICT_SETTLED
            if cmd.keep == "memory":
                state = state.model_copy(update={"supersedes": [*state.supersedes, why]})
            elif cmd.keep == "other":
                marked = truth.superseded(state, cmd.other_id, truth.valid_from(other), why, now)
                if marked is not None:
                    state, kind = marked.model_copy(update={"version": state.version}), MemoryEventType.SUPERSEDED
            keep = {"both": [current.id, cmd.other_id], "memory": [current.id], "other": [cmd.other_id]}[cmd.keep]
            gone = {"both": None, "memory": cmd.other_id, "other": current.id}[cmd.keep]
            return Write(model.event_for(state, kind, command_id=call.command_id, correlation_id=call.correlation_id,
                                         now=now),
                         lambda _: SettleConflictResult(settled=True, current=keep, superseded=gone,
                                                        message="Settled." + (f" {gone} is superseded." if gone else "")))

        reply = await self.writes.write(call, memory_subject(self.names, call.tenant, cmd.memory_id), decide,
                                        outcome=cmd.keep != "memory", what=f"memory {cmd.memory_id}")
        assert reply is not None
        if reply.settled and cmd.keep == "memory":
            await self._carry_out(call, cmd.memory_id,
                                  [Supersession(memory_id=cmd.other_id, reason=reason, confidence=1.0, decided_by=by)])
        return reply

    async def pin(self, call: CommandCall, cmd: PinMemory) -> SaveMemoryResult:
        """Pin or unpin a memory, or set or clear when it leaves recall (``forget_after``). A memory
        whose expiry is cleared or moved past now after it had passed supersedes again what it
        superseded (:meth:`reinstate_expired` brought those back when it expired) and still stands
        current, by the rules that judged them when it was said."""
        before = await visible(self.store, call, cmd.memory_id, "memory_id")
        lapsed = not decay.in_recall(self.clock(), before.forget_after) and bool(before.supersedes)
        resumed: list[MemoryState] = []  # the version a first attempt of this command wrote

        def decide(loaded: Loaded) -> Write[SaveMemoryResult] | Answer[SaveMemoryResult]:
            if loaded is None:
                raise NotFound(f"no memory with id {cmd.memory_id}", "memory_id")
            current = model.state_of(loaded[0])
            if current.status is MemoryStatus.FORGOTTEN:
                raise Conflict(f"memory {current.id} is forgotten", "memory_id")
            now = self.clock()
            state = truth.pinned(current, cmd.pinned, cmd.forget_after, cmd.clear_forget_after, now)
            if state is None:
                if loaded[0].causation_id == call.command_id and loaded[0].type == MemoryEventType.PINNED.value:
                    resumed[:] = [current]  # a retry whose first attempt stopped half-way: answered as it was
                    return Answer(_saved(current, created=False))
                return Answer(_unchanged(current))
            return Write(_event(call, state, MemoryEventType.PINNED),
                         lambda stored: _saved(model.state_of(stored), created=False))

        # with memories to supersede again, the outcome is recorded once they are (kit's runtime)
        reply = await self._write(call, cmd.memory_id, decide, outcome=not lapsed)
        assert reply is not None
        if resumed:  # had the version before the first attempt's lapsed, that attempt may not have finished
            lapsed = await self._had_lapsed(call, resumed[0])
        if lapsed and decay.in_recall(self.clock(), (await visible(self.store, call, cmd.memory_id,
                                                                   "memory_id")).forget_after):
            await self._carry_out(call, cmd.memory_id)  # (a retry too: what is superseded already stays)
        return reply

    async def _had_lapsed(self, call: CommandCall, written: MemoryState) -> bool:
        """Whether the version before ``written`` (a pin's) had passed its expiry while it still
        superseded memories: the expiry round may have brought those back, and the pin that cleared
        the expiry supersedes them again."""
        states = [model.state_of(e) for e, _ in await self.events.history(
            memory_subject(self.names, call.tenant, written.id))]
        before = next((v for v in reversed(states) if v.version < written.version), None)
        return before is not None and bool(before.supersedes) and \
            not decay.in_recall(self.clock(), before.forget_after)

    async def reinstate_expired(self, call: CommandCall, cmd: ReinstateExpired) -> ReinstateExpiredResult:
        """The memories an expired memory (``forget_after`` passed) superseded, current again
        (``MemoryReinstated``, :func:`truth.reinstated`, as when it is forgotten): a statement that
        has left recall no longer hides the fact it changed. The expired memory itself is left as it
        is, in its history, its expiry still clearable with pin_memory."""
        state = await visible(self.store, call, cmd.memory_id, "memory_id")
        if state.status is MemoryStatus.FORGOTTEN or decay.in_recall(self.clock(), state.forget_after):
            return ReinstateExpiredResult(expired=False, message="That memory has not expired: nothing changed.")
        back = await self._reinstate(call, state)
        said = _named(back)
        return ReinstateExpiredResult(expired=True, reinstated=[m.id for m in back],
                                      message=f"Current again: {said}." if back else "Nothing it superseded was "
                                      "still hidden by it.")

    async def unmerge(self, call: CommandCall, cmd: UnmergeMemory) -> UnmergeMemoryResult:
        """Undo the merge that wrote version ``cmd.version`` of a memory (:func:`truth.unmerged`): the
        saying it added becomes a memory of its own (first: a command stopped half-way is run again
        whole, and creating it again appends nothing), then leaves the memory (``MemoryUnmerged``)."""
        await visible(self.store, call, cmd.memory_id, "memory_id")
        events = await self.events.history(memory_subject(self.names, call.tenant, cmd.memory_id))
        states = [(e.type, model.state_of(e)) for e, _ in events]
        at = next((i for i, (kind, st) in enumerate(states) if st.version == cmd.version and i > 0), None)
        if at is None or states[at][0] != MemoryEventType.MERGED.value:
            raise Conflict(f"version {cmd.version} of memory {cmd.memory_id} is not a merge: "
                           "get_memory_history shows its MemoryMerged versions", "version")
        before, merge = states[at - 1][1], states[at][1]
        split_id = model.unmerged_memory_id(cmd.memory_id, cmd.version)
        now = self.clock()

        def undo(current: MemoryState) -> tuple[MemoryState, MemoryState] | None:
            return truth.unmerged(before, merge, current, split_id, now)

        def create(loaded: Loaded) -> Write[None] | Answer[None]:
            if loaded is not None:
                return Answer(None)  # created by an earlier try of this command (or of another like it)
            done = undo(states[-1][1])  # (the memory as the history just read ends)
            if done is None:
                return Answer(None)
            return Write(_event(call, done[1], MemoryEventType.UNMERGED), lambda _: None)

        await self._write(call, split_id, create, outcome=False, what=f"memory {split_id}")

        def leave(loaded: Loaded) -> Write[UnmergeMemoryResult] | Answer[UnmergeMemoryResult]:
            if loaded is None:
                raise NotFound(f"no memory with id {cmd.memory_id}", "memory_id")
            current = model.state_of(loaded[0])
            done = undo(current)
            if done is None:
                return Answer(UnmergeMemoryResult(
                    unmerged=False, memory_id=current.id, split_id=split_id, repeats=current.repeats,
                    message=f"That saying had left the memory already: it is memory {split_id}."))
            holder = done[0]
            return Write(_event(call, holder, MemoryEventType.UNMERGED), lambda _: UnmergeMemoryResult(
                unmerged=True, memory_id=holder.id, split_id=split_id, repeats=holder.repeats,
                message=f"Unmerged: the saying is memory {split_id} again; memory {holder.id} counts "
                        f"{holder.repeats} saying{'s' if holder.repeats != 1 else ''}."))

        reply = await self._write(call, cmd.memory_id, leave)
        assert reply is not None
        return reply

    async def merge(self, call: CommandCall, cmd: MergeMemory) -> MergeMemoryResult:
        """Merge ``memory_id`` into ``into`` (:func:`truth.absorbed`): ``into`` takes its sayings
        (``MemoryMerged``), then it is forgotten with a reason naming ``into``. Two writes on two
        memories; the command's outcome is recorded after the second, so a command stopped half-way is
        run again whole (the first write then appends nothing)."""
        if cmd.memory_id == cmd.into:
            raise Conflict("a memory cannot be merged into itself: name another memory as into", "into")
        dup = await visible(self.store, call, cmd.memory_id, "memory_id")
        found = await visible(self.store, call, cmd.into, "into")
        if found.project != dup.project:
            raise Conflict(f"memory {cmd.into} is in project {found.project}, memory {cmd.memory_id} in "
                           f"{dup.project}: only memories of one project are merged", "into")
        now = self.clock()

        def take(loaded: Loaded) -> Write[MemoryState] | Answer[MemoryState]:
            if loaded is None:
                raise NotFound(f"no memory with id {cmd.into}", "into")
            current = model.state_of(loaded[0])
            state = truth.absorbed(current, dup, now)
            if state is None:
                return Answer(current)  # (merged already: a retry, or the same request again)
            for name, memory in (("into", current), ("memory_id", dup)):
                if memory.status is not MemoryStatus.ACTIVE:
                    raise Conflict(f"memory {memory.id} is {memory.status.value}: only current memories are "
                                   "merged", name)
            return Write(_event(call, state, MemoryEventType.MERGED), model.state_of)

        holder = await self._write(call, cmd.into, take, outcome=False)
        assert holder is not None
        await self._repoint(call, dup, cmd.into)
        reason = (cmd.reason or "")[:900]
        reason = f"merged into memory {cmd.into}" + (f": {reason}" if reason else "")

        merged = await self._left_behind(call, cmd.memory_id, reason, cmd.client)
        repeats = holder.repeats
        return MergeMemoryResult(
            merged=merged, memory_id=cmd.into, merged_id=cmd.memory_id, repeats=repeats,
            message=(f"Merged: memory {cmd.memory_id} is now a saying of memory {cmd.into}, which counts {repeats} "
                     f"saying{'s' if repeats != 1 else ''} (unmerge_memory on its version {holder.version} undoes it)."
                     if merged else f"Memory {cmd.memory_id} had been merged into memory {cmd.into} already."))

    async def _repoint(self, call: CommandCall, dup: MemoryState, into: UUID) -> None:
        """The memories ``dup`` superseded, superseded by ``into`` now that ``dup`` is merged into it
        (:func:`truth.repointed`)."""
        await self._on_each(call, [w.memory_id for w in dup.supersedes],
                            lambda old: truth.repointed(old, dup.id, into, self.clock()), MemoryEventType.SUPERSEDED)

    async def _left_behind(self, call: CommandCall, memory_id: UUID, reason: str, client: str | None,
                           *, outcome: bool = True) -> bool:
        """The memory a merge or a move leaves behind, forgotten with ``reason`` (naming where it went);
        False when it already was (a retry, or the same request again). The command's outcome is
        recorded with this write (``outcome``), else by kit's runtime once the command is done."""

        def leave(loaded: Loaded) -> Write[bool] | Answer[bool]:
            if loaded is None:
                raise NotFound(f"no memory with id {memory_id}", "memory_id")
            current = model.state_of(loaded[0])
            if current.status is MemoryStatus.FORGOTTEN:
                return Answer(False)
            gone = model.forget(current, reason, self.clock(), client)
            return Write(model.event_for(gone, MemoryEventType.FORGOTTEN, command_id=call.command_id,
                                         correlation_id=call.correlation_id, now=gone.updated_at), lambda _: True)

        return bool(await self._write(call, memory_id, leave, what=f"memory {memory_id}", outcome=outcome))

    async def move(self, call: CommandCall, cmd: MoveMemory) -> MoveMemoryResult:
        """Move a memory to another project (:func:`model.moved`): the new one first (its identity
        derived from the old one, or its key there: a retry appends nothing), then the old one
        forgotten naming it, and what the old one superseded in its project current again (the moved
        memory has no relation to that project's memories; as a forget would); the outcome is
        recorded after all of them."""
        src = await visible(self.store, call, cmd.memory_id, "memory_id")
        call.require_project(cmd.to_project, "to_project")
        if src.project == cmd.to_project:
            raise Conflict(f"memory {src.id} is in project {src.project} already", "to_project")
        now = self.clock()
        target = model.moved(src, cmd.to_project, now)
        if src.status is MemoryStatus.ACTIVE:
            same = await self.store.find_active_by_hash(call.tenant, cmd.to_project, model.content_hash(src.content))
            if same is not None and same.id != target.id:
                raise Conflict(f"project {cmd.to_project} holds the same memory already ({same.id}): forget this "
                               "one instead", "to_project")

        def arrive(loaded: Loaded) -> Write[bool] | Answer[bool]:
            there = model.state_of(loaded[0]) if loaded is not None else None
            if there is not None and there.status is MemoryStatus.ACTIVE:
                if there.content == src.content:
                    return Answer(False)  # (it arrived already: a retry, or the same request again)
                raise Conflict(f"project {cmd.to_project} has a memory with memory_key {src.memory_key} already "
                               f"({there.id}): update or forget that one instead", "to_project")
            if src.status is not MemoryStatus.ACTIVE:
                raise Conflict(f"memory {src.id} is {src.status.value}: only a current memory is moved", "memory_id")
            if there is None:
                return Write(_event(call, target, MemoryEventType.SAVED), lambda _: True)
            # its key was used there before and forgotten: a new version of that memory
            revived = target.model_copy(update={"version": there.version + 1, "created_at": there.created_at})
            return Write(_event(call, revived, MemoryEventType.UPDATED), lambda _: True)

        arrived = await self._write(call, target.id, arrive, outcome=False)
        reason = f"moved to project {cmd.to_project} as memory {target.id}"

        left = await self._left_behind(call, cmd.memory_id, reason, cmd.client, outcome=not src.supersedes)
        back: list[MemoryState] = []
        if src.supersedes and (gone := await self.store.get(call.tenant, cmd.memory_id)) is not None \
                and gone.status is MemoryStatus.FORGOTTEN:  # (a retry too: what is back already stays)
            back = await self._reinstate(call, gone)
        moved = bool(arrived) or left
        said = _named(back)
        return MoveMemoryResult(
            moved=moved, memory_id=target.id, moved_from=src.id, project=cmd.to_project,
            reinstated=[m.id for m in back],
            message=(f"Moved to project {cmd.to_project}: it is memory {target.id} there; the one in project "
                     f"{src.project} is forgotten, naming it." if moved
                     else f"It had been moved to project {cmd.to_project} already: memory {target.id}.")
            + (f" What it had superseded in project {src.project} is current again there: {said}." if back else ""))

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
        gone: list[MemoryState] = []  # the memory as forgotten (by this command, or by an earlier try of it)

        def decide(loaded: Loaded) -> Write[ForgetMemoryResult] | Answer[ForgetMemoryResult]:
            if loaded is None:
                raise NotFound(f"memory {target.id} has no history", "memory_id")
            current = model.state_of(loaded[0])
            if current.status is MemoryStatus.FORGOTTEN:
                gone.append(current)
                return Answer(ForgetMemoryResult(
                    forgotten=False, match=match, memory_id=current.id, content=current.content,
                    message="That memory was already forgotten.",
                ))
            now = self.clock()
            new_state = model.forget(current, cmd.reason, now, cmd.client)
            gone.append(new_state)
            event = model.event_for(new_state, MemoryEventType.FORGOTTEN, command_id=call.command_id,
                                    correlation_id=call.correlation_id, now=now)
            return Write(event, lambda _: ForgetMemoryResult(
                forgotten=True, match=match, similarity=similarity, memory_id=new_state.id,
                content=new_state.content, message="Forgotten. It no longer appears in recall; its history remains.",
            ))

        # with memories it superseded, the outcome is recorded once they are reinstated (kit's runtime)
        reply = await self.writes.write(call, memory_subject(self.names, target.tenant, target.id), decide,
                                        what=f"memory {target.id}", outcome=not target.supersedes)
        assert reply is not None
        back = await self._reinstate(call, gone[-1]) if gone and gone[-1].supersedes else []
        if not back:
            return reply
        said = _named(back)
        return reply.model_copy(update={
            "reinstated": [m.id for m in back],
            "message": f"{reply.message} It had superseded {len(back)} memor{'y' if len(back) == 1 else 'ies'}, "
                       f"current again: {said}. Forget {'it' if len(back) == 1 else 'them'} too if not true either."})

    async def _reinstate(self, call: CommandCall, gone: MemoryState,
                         ids: Sequence[UUID] | None = None) -> list[MemoryState]:
        """The memories ``gone`` (just forgotten, or changed so that it no longer says what changed
        them) superseded, current again (:func:`truth.reinstated`; all it names, or ``ids``:
        ``MemoryReinstated``); one the caller may not see is left alone."""
        return await self._on_each(
            call, [w.memory_id for w in gone.supersedes] if ids is None else ids,
            lambda old: truth.reinstated(old, gone, self.clock()) if call.sees(old.project) else None,
            MemoryEventType.REINSTATED)

    async def _find_to_forget(
        self, call: CommandCall, cmd: ForgetMemory
    ) -> tuple[MemoryState, str, float | None] | None:
        tenant = call.tenant
        if cmd.memory_id is not None:
            state = await visible(self.store, call, cmd.memory_id, "memory_id")
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


def _judged_version(current: MemoryState, new_state: MemoryState, p: truth.Plan,
                    ) -> tuple[MemoryState, list[Supersession]]:
    """A new version of ``current`` with what plan ``p`` says its content changes: the memories it
    supersedes (those it had not already) and what it is flagged against; and the supersessions
    still to carry out."""
    if p.quiet:
        return new_state, []
    known = {w.memory_id for w in current.supersedes}
    fresh = [truth.note(d, d.candidate.ref) for d in p.supersede if d.candidate.ref not in known]  # type: ignore[arg-type]
    return new_state.model_copy(update={
        "supersedes": [*current.supersedes, *fresh],
        "conflicts": [truth.note(d, d.candidate.ref) for d in p.flags]}), fresh  # type: ignore[arg-type]


def _keepable(state: MemoryState | MemoryView) -> None:
    """Refused unless ``state`` is current: keeping a forgotten or superseded memory over the other
    would leave neither in recall."""
    if state.status is not MemoryStatus.ACTIVE:
        raise Conflict(f"memory {state.id} is {state.status.value}: only a current memory is kept; settle with keep "
                       "'both' to clear the flag", "keep")


def _event(call: CommandCall, state: MemoryState, event_type: MemoryEventType) -> EventEnvelope:
    return model.event_for(state, event_type, command_id=call.command_id, correlation_id=call.correlation_id,
                           now=state.updated_at)


def _named(memories: Sequence[MemoryState]) -> str:
    """The memories brought back, as an answer names them: “excerpt” (id); …"""
    return "; ".join(f"“{excerpt(m.content)}” ({m.id})" for m in memories)


def _saved(state: MemoryState, created: bool, merged: bool = False) -> SaveMemoryResult:
    return SaveMemoryResult(
        memory_id=state.id, project=state.project, version=state.version, memory_key=state.memory_key,
        created=created, updated=not created and not merged, merged=merged,
        supersedes=[w.memory_id for w in state.supersedes] if created else [],
        flagged=[c.memory_id for c in state.conflicts] if created else [],
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
        self._profiles: dict[tuple[str, str | None, int, int, datetime | None], tuple[int, Profile]] = {}

    async def get_by_key(self, call: Call, q: GetMemoryByKey) -> MemoryLookup:
        call.require_project(q.project)
        state = await self.store.get(call.tenant, model.keyed_memory_id(call.tenant, q.project, q.memory_key))
        if state is not None and state.status is MemoryStatus.ACTIVE:
            return MemoryLookup(found=True, memory=MemoryView.model_validate(state.model_dump()))
        return MemoryLookup(found=False)

    async def list_memories(self, call: Call, rm: RecallMemory) -> MemoryList:
        project = call.search_project(rm.project)
        category = rm.category.value if rm.category else None
        if rm.as_of is not None:
            if rm.cursor is not None:
                raise Conflict("paging (cursor) is not offered as of a moment: narrow the answer by created_from "
                               "and created_to instead", "cursor")
            if rm.status == "forgotten":  # never answered as of a moment: forgetting is the user's wish
                return MemoryList(memories=[])
            narrowed = rm.created_from or rm.created_to or rm.source or rm.sort != "importance"
            found = await self._standing(call.tenant, project, rm.as_of, "importance",
                                         MAX_RECALL_LIMIT if narrowed else rm.limit,
                                         category=category, keyword=rm.keyword, then=AS_OF_STATUSES[rm.status])
            found = [v for v in found if (rm.created_from is None or v.created_at >= rm.created_from)
                     and (rm.created_to is None or v.created_at < rm.created_to)
                     and (rm.source is None or v.origin == rm.source)]
            if rm.sort != "importance":
                found.sort(key=lambda v: (v.created_at, v.id), reverse=rm.sort == "newest")
            return MemoryList(memories=[abridged(v) for v in found[: rm.limit]])
        after = page_after(rm.sort, rm.cursor) if rm.cursor is not None else None
        found = await self.store.list_active(
            call.tenant, project, category, rm.keyword, rm.limit + 1, statuses=LISTED_STATUSES[rm.status],
            created_from=rm.created_from, created_before=rm.created_to, source=rm.source, sort=rm.sort, after=after)
        more = len(found) > rm.limit
        found = found[: rm.limit]
        return MemoryList(memories=[abridged(v) for v in found],
                          next_cursor=page_cursor(rm.sort, found[-1]) if more else None)

    async def _standing(
        self, tenant: str, project: str | None, moment: datetime, order: StandingOrder, limit: int, *,
        category: str | None = None, keyword: str | None = None, profile_facts: bool = False,
        then: frozenset[str] = frozenset({"standing"}),
    ) -> list[MemoryView]:
        """The memories as they stood at ``moment`` (each in the version that stood then, marked with
        what replaced it since), filtered on that version, in ``order``; at most ``limit``; with
        ``"superseded"`` in ``then``, also (or only) those superseded by then, as they are. The read
        model gives the candidates (``AS_OF_OVERFETCH`` times as many: some did not stand as they are)."""
        candidates = await self.store.standing(
            tenant, project, moment, order=order, limit=min(limit * AS_OF_OVERFETCH, AS_OF_MAX_CANDIDATES),
            category=category, keyword=keyword, profile_facts=profile_facts, then=then,
        )
        stood = await as_they_stood(tenant, candidates, moment, self.versions) if "standing" in then \
            else [None] * len(candidates)
        gone = [v if "superseded" in then and truth.superseded_then(v, moment) else None for v in candidates]
        then_views = [s or g for s, g in zip(stood, gone, strict=True)]
        found = [v for v in then_views if v is not None
                 and (category is None or (v.category is not None and v.category.value == category))
                 and (keyword is None or keyword.casefold() in v.content.casefold())
                 and (not profile_facts or model.profile_fact(v.category))]
        found.sort(key=_STANDING_KEYS[order](moment), reverse=True)
        found = found[:limit]
        newer = superseded_since(found, moment)
        return mark_superseded(found, moment, nameable(await self.store.views(tenant, list(newer)))) if newer else found

    async def get(self, call: Call, q: GetMemory) -> MemoryView:
        """A memory by id as it stands now (none outside the caller's project)."""
        found = (await self.store.views(call.tenant, [q.memory_id])).get(q.memory_id)  # (with its origin)
        if found is None or not call.sees(found.project):
            raise NotFound(f"no memory with id {q.memory_id}", "memory_id")
        return found

    async def history(self, call: Call, hq: MemoryHistoryQuery) -> MemoryHistory:
        """Every version of a memory from the event log (none outside the caller's project)."""
        events = await self.events.history(memory_subject(self.names, call.tenant, hq.memory_id))
        if not events or not call.sees(model.state_of(events[-1][0]).project):
            raise NotFound(f"no memory with id {hq.memory_id}", "memory_id")
        return MemoryHistory(memory_id=hq.memory_id, versions=model.fitting(model.history(events)),
                             sayings=truth.sayings(model.state_of(events[-1][0])))

    async def versions(self, tenant: str, memory_id: UUID) -> list[MemoryState]:
        """Every state of a memory, oldest first, from the event log (recall as_of a moment)."""
        return [model.state_of(e) for e, _ in await self.events.history(memory_subject(self.names, tenant, memory_id))]

    async def conflicts(self, call: Call, q: ListConflicts) -> ConflictList:
        """The open flags of the caller's memories (within its project), most confident first."""
        project = call.search_project(q.project)
        flagged = await self.store.conflicted(call.tenant, project, q.limit)
        # (a flag against a forgotten or superseded memory is moot)
        others = {i: v for i, v in (await self.store.views(call.tenant, list({c.memory_id for st in flagged
                                                                              for c in st.conflicts}))).items()
                  if v.status is MemoryStatus.ACTIVE}
        out = [ConflictView(memory=abridged(MemoryView.model_validate(st.model_dump())), other=abridged(others[c.memory_id]),
                            reason=c.reason, confidence=c.confidence)
               for st in flagged for c in st.conflicts if c.memory_id in others and call.sees(others[c.memory_id].project)]
        out.sort(key=lambda v: -v.confidence)
        return ConflictList(conflicts=out[: q.limit])

    async def projects(self, call: Call, _: ListProjects) -> ProjectList:
        found = [p for p in await self.store.projects(call.tenant) if call.sees(p.project)]  # (most recent first)
        if len(found) > MAX_LISTED_PROJECTS:
            return ProjectList(projects=found[:MAX_LISTED_PROJECTS], total=len(found))
        return ProjectList(projects=found)

    async def profile(self, call: Call, q: GetProfile) -> Profile:
        project = call.search_project(q.project)
        return await self.cached_profile(call.tenant, q if project == q.project else q.model_copy(update={"project": project}))

    async def cached_profile(self, tenant: str, query: GetProfile) -> Profile:
        """The profile from the read model, cached until this process projects a write of the
        tenant's (every write passes through the projection here: inline, by the projector or replay).
        A profile as of a moment (:meth:`_standing`) is cached the same way: a later write can change
        it too (a late extraction of an older log, a forget)."""
        key = (tenant, query.project, query.static_limit, query.dynamic_limit, query.as_of)
        writes = self._tenant_writes[tenant]
        cached = self._profiles.get(key)
        if cached is not None and cached[0] == writes:
            return cached[1]
        if query.as_of is not None:  # (as of a moment: both lists at once, the recent one without the stable facts)
            static, recent = await asyncio.gather(
                self._standing(tenant, query.project, query.as_of, "weight", query.static_limit, profile_facts=True),
                self._standing(tenant, query.project, query.as_of, "recent", query.dynamic_limit + query.static_limit))
            facts = {v.id for v in static}
            profile = Profile(static=static, dynamic=[v for v in recent if v.id not in facts][: query.dynamic_limit])
        else:
            profile = await self.store.profile(tenant, query.project, query.static_limit, query.dynamic_limit)
        whole = profile

        def cut(chars: int = LISTED_CONTENT_CHARS) -> Profile:
            return Profile(static=[abridged(v, chars) for v in whole.static],
                           dynamic=[abridged(v, chars) for v in whole.dynamic])

        listed = cut()
        profile = paging.shortened(listed, [v.content for v in (*listed.static, *listed.dynamic)], cut)
        if len(self._profiles) > HINTS_MAX:
            self._profiles.clear()
        self._profiles[key] = (writes, profile)
        return profile
