"""Memory service use cases: save, forget, recall, and the projection of memory events.

Command handling appends an event (optimistic concurrency on the aggregate subject) and projects
it inline before replying, so the caller reads its own write at once. The projector consumer
applies the same events again; every projection step is idempotent by stream sequence.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from pydantic import BaseModel

from contracts.envelope import CommandEnvelope, EventEnvelope, QueryEnvelope, Reply, utcnow
from contracts.memory import (
    MAX_RECALL_LIMIT,
    ForgetMemory,
    ForgetMemoryResult,
    GetMemoryByKey,
    GetProfile,
    GetSharedMemories,
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
    Recall,
    RecallHit,
    RecallMemory,
    RecallResult,
    SaveMemory,
    SaveMemoryResult,
    SaveSharedMemory,
    SaveSharedMemoryResult,
    SharedMemoryList,
    SharedMemoryState,
    UpdateMemory,
)
from contracts.subjects import Names
from kit.bus import ConcurrencyConflict
from kit.command_log import OutcomeRecord
from kit.service import Call, CommandCall, ServiceRuntime
from services.memory.adapters.embedder import Embedder
from services.memory.adapters.late_encoder import LateEncoder
from services.memory.adapters.pg_store import MemoryStore, Tx
from services.memory.adapters.reranker import Reranker
from services.memory.adapters.vectors import VectorIndex
from services.memory.application.indexing import (
    SEARCH_MODES,
    active_filter,
    content_vector,
    embedding_texts,
    memory_passages,
    point_for,
    rerank_text,
    reranked,
    state_vector,
    view_of,
)
from services.memory.application.late import (
    LATE_CANDIDATES,
    document_matrix,
    late_document,
    late_prefetch_limit,
    maxsim,
    maxsim_packed,
    pack,
)
from services.memory.domain import model, shared
from services.memory.domain.errors import InvalidArgument, NotFound, PermissionDenied
from services.memory.domain.keywords import query_vector

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("engram.memory")

PROJECTOR = "memory-projector"
_MAX_RACES = 8
#: The command path projects its own events inline (read-your-writes). The projector exists for
#: events nobody projected (a crash between append and projection, another writer), so it waits
#: up to this long for this process's in-flight inline projections of the same memories before
#: doing the work itself; otherwise, under load, it would embed most new memories a second time.
PROJECTOR_GRACE_S = 5.0
_HINTS_MAX = 16_384


class EventLog(Protocol):
    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int: ...
    async def last_event(self, subject: str) -> tuple[EventEnvelope, int] | None: ...
    async def history(self, subject: str) -> list[tuple[EventEnvelope, int]]: ...


class MemoryService:
    """The application layer of the memory service."""

    def __init__(
        self,
        store: MemoryStore,
        index: VectorIndex,
        embedder: Embedder,
        events: EventLog,
        names: Names,
        clock: Callable[[], datetime] = utcnow,
        reranker: Reranker | None = None,
        rerank_candidates: int = 30,
        late_encoder: LateEncoder | None = None,
        late_candidates: int = LATE_CANDIDATES,
    ) -> None:
        for name, value in (("rerank_candidates", rerank_candidates), ("late_candidates", late_candidates)):
            if not 1 <= value <= MAX_RECALL_LIMIT:
                raise ValueError(f"{name} must be within 1-{MAX_RECALL_LIMIT}, got {value}")
        self.store = store
        self.index = index
        self.embedder = embedder
        self.reranker = reranker
        self.rerank_candidates = rerank_candidates
        self.late_encoder = late_encoder
        self.late_candidates = late_candidates
        self._late_missing_warned = False
        self.events = events
        self.names = names
        self.clock = clock
        self._content_locks = [asyncio.Lock() for _ in range(64)]  # striped by content hash
        self.last_activity = 0.0  # event-loop time of the last command (reads do not count)
        # memory id -> a sequence already projected into it, read per projector batch; read-model
        # sequences only grow, so "applied >= seq" stays true and the event needs no transaction
        self._applied_hint: dict[UUID, int] = {}
        self._pending_checkpoints: dict[str, int] = {}
        self._inflight: Counter[UUID] = Counter()  # memories being appended + projected inline here
        # Read once per fetched command batch (prime_saves) instead of once per command: contents
        # known to be in no active memory.
        self._absent_contents: set[tuple[str, str, str]] = set()
        self._content_writes = 0  # counts writes of memory contents, see prime_saves
        self._content_written: dict[tuple[str, str, str], int] = {}
        # Profiles are asked with most recalls and change only when the tenant's memories do:
        # cached per question, valid while the tenant's write count is what it was.
        self._tenant_writes: Counter[str] = Counter()
        self._profiles: dict[tuple[str, str | None, int, int], tuple[int, Profile]] = {}

    # the handler tables --------------------------------------------------------------------
    def command_handlers(self) -> dict[type[BaseModel], Any]:
        return {SaveMemory: self.save, UpdateMemory: self.update, ForgetMemory: self.forget,
                SaveSharedMemory: self.save_shared}

    def query_handlers(self) -> dict[type[BaseModel], Any]:
        return {Recall: self.recall_query, GetMemoryByKey: self.get_by_key, RecallMemory: self.list_memories,
                MemoryHistoryQuery: self.history, GetSharedMemories: self.shared_memories,
                ListProjects: self.projects, GetProfile: self.profile}

    def bind(self, runtime: ServiceRuntime) -> None:
        self.runtime = runtime

    async def handle_command(self, env: CommandEnvelope) -> Reply[Any]:
        """Run one command exactly once per (tenant, operation, idempotency key) (kit's skeleton)."""
        self._touch()
        return await self.runtime.handle_command(env)

    async def handle_query(self, query: QueryEnvelope) -> Reply[Any]:
        return await self.runtime.handle_query(query)

    # commands -----------------------------------------------------------------------------
    async def save(self, env: CommandCall, cmd: SaveMemory) -> SaveMemoryResult:
        """Save a memory: by content (the same content again is not duplicated) or by memory_key."""
        self._touch()
        env.require_project(cmd.project)
        key = model.resolve_key(cmd)
        if key is not None:
            return await self._save_keyed(env, cmd, key)
        digest = model.content_hash(cmd.content)
        lock = self._content_locks[int(digest[:8], 16) % len(self._content_locks)]
        async with lock:  # identical contents saved concurrently here still make one memory
            content = (env.tenant, cmd.project, digest)
            if content in self._absent_contents:
                self._absent_contents.discard(content)
                existing = None
            else:
                existing = await self.store.find_active_by_hash(env.tenant, cmd.project, digest)
            if existing is not None:
                return self._unchanged(existing)
            state = model.new_memory(env.tenant, env.command_id, cmd, self.clock())
            return await self._write(env, state, MemoryEventType.SAVED, expected_last_seq=0, created=True)

    async def _save_keyed(self, env: CommandCall, cmd: SaveMemory, key: str) -> SaveMemoryResult:
        """Save by memory_key: the first save creates, every later save writes a new version."""
        memory_id = model.keyed_memory_id(env.tenant, cmd.project, key)
        for _ in range(_MAX_RACES):
            loaded = await self.events.last_event(self._subject_of(env.tenant, memory_id))
            now = self.clock()
            if loaded is None:
                state = model.new_memory(env.tenant, env.command_id, cmd, now, memory_key=key)
                event_type, expected, created = MemoryEventType.SAVED, 0, True
            else:
                current = model.state_of(loaded[0])
                new_state = model.save_over(current, cmd, now)
                if new_state is None:
                    return self._unchanged(current)
                state, event_type, expected, created = new_state, MemoryEventType.UPDATED, loaded[1], False
            try:
                return await self._write(env, state, event_type, expected_last_seq=expected, created=created)
            except ConcurrencyConflict:
                continue
        raise ConcurrencyConflict(f"memory_key {key} kept changing while being saved; retry")

    async def update(self, env: CommandCall, cmd: UpdateMemory) -> SaveMemoryResult:
        """A new version of an existing memory, addressed by id or memory_key."""
        self._touch()
        if cmd.id is not None:
            found = await self.store.get(env.tenant, cmd.id)
            if found is None or not env.sees(found.project):
                raise NotFound(f"no memory with id {cmd.id}", "id")
            memory_id = found.id
        else:
            assert cmd.memory_key is not None
            env.require_project(cmd.project)
            memory_id = model.keyed_memory_id(env.tenant, cmd.project, cmd.memory_key)
        for _ in range(_MAX_RACES):
            loaded = await self.events.last_event(self._subject_of(env.tenant, memory_id))
            if loaded is None:
                raise NotFound(f"no memory with memory_key {cmd.memory_key} in project {cmd.project}", "memory_key")
            current = model.state_of(loaded[0])
            new_state = model.update(current, cmd, self.clock())
            if new_state is None:
                return self._unchanged(current)
            try:
                return await self._write(env, new_state, MemoryEventType.UPDATED, expected_last_seq=loaded[1])
            except ConcurrencyConflict:
                continue
        raise ConcurrencyConflict(f"memory {memory_id} kept changing while being updated; retry")

    async def _write(
        self, env: CommandCall, state: MemoryState, event_type: MemoryEventType, *,
        expected_last_seq: int, created: bool = False,
    ) -> SaveMemoryResult:
        """Append the event, project it, record and return the outcome."""
        event = model.event_for(
            state, event_type, command_id=env.command_id, correlation_id=env.correlation_id, now=state.updated_at
        )
        async with self._projecting_inline(state.id):
            seq = await self.events.append_event(self._subject(state), event, expected_last_seq=expected_last_seq)
            reply = self._saved(state, created)
            await self.apply(event, seq, outcome=env.outcome(reply))
            env.recorded = True
        self._content_writes += 1
        content = (state.tenant, state.project, model.content_hash(state.content))
        self._content_written[content] = self._content_writes
        self._absent_contents.discard(content)
        return reply

    @staticmethod
    def _saved(state: MemoryState, created: bool) -> SaveMemoryResult:
        return SaveMemoryResult(
            memory_id=state.id, project=state.project, version=state.version, memory_key=state.memory_key,
            created=created, updated=not created,
        )

    @staticmethod
    def _unchanged(current: MemoryState) -> SaveMemoryResult:
        return SaveMemoryResult(
            memory_id=current.id, project=current.project, version=current.version,
            memory_key=current.memory_key, created=False, updated=False,
        )

    async def forget(self, env: CommandCall, cmd: ForgetMemory) -> ForgetMemoryResult:
        """Forget by id, or by content: an exact match first, then the closest memory above the
        semantic threshold; says so when nothing matches."""
        self._touch()
        if (cmd.memory_id is None) == (cmd.content is None):
            raise InvalidArgument("give exactly one of memory_id or content", "content")
        found = await self._find_to_forget(env, cmd)
        if found is None:
            return ForgetMemoryResult(
                forgotten=False,
                message="No memory matches that content closely enough; nothing was forgotten. "
                "Recall first to see what is stored, then forget with the exact text.",
            )
        target, match, similarity = found
        for _ in range(_MAX_RACES):
            loaded = await self.events.last_event(self._subject(target))
            if loaded is None:
                raise NotFound(f"memory {target.id} has no history", "memory_id")
            current, last_seq = model.state_of(loaded[0]), loaded[1]
            if current.status is MemoryStatus.FORGOTTEN:
                return ForgetMemoryResult(
                    forgotten=False, match=match, memory_id=current.id, content=current.content,
                    message="That memory was already forgotten.",
                )
            now = self.clock()
            new_state = model.forget(current, cmd.reason, now)
            event = model.event_for(
                new_state, MemoryEventType.FORGOTTEN, command_id=env.command_id,
                correlation_id=env.correlation_id, now=now,
            )
            async with self._projecting_inline(new_state.id):
                try:
                    seq = await self.events.append_event(self._subject(new_state), event, expected_last_seq=last_seq)
                except ConcurrencyConflict:
                    continue
                result = ForgetMemoryResult(
                    forgotten=True, match=match, similarity=similarity, memory_id=new_state.id,
                    content=new_state.content, message="Forgotten. It no longer appears in recall; its history remains.",
                )
                await self.apply(event, seq, outcome=env.outcome(result))
                env.recorded = True
                return result
        raise ConcurrencyConflict(f"memory {target.id} kept changing while being forgotten; retry")

    async def save_shared(self, env: CommandCall, cmd: SaveSharedMemory) -> SaveSharedMemoryResult:
        """Save a shared experience; the same title again writes a new version, never a duplicate."""
        self._touch()
        _tenant_wide(env)
        sid = shared.shared_id(env.tenant, cmd.title)
        subject = self.names.event(env.tenant, shared.AGGREGATE, str(sid))
        for _ in range(_MAX_RACES):
            loaded = await self.events.last_event(subject)
            current = SharedMemoryState.model_validate(loaded[0].data) if loaded else None
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
                seq = await self.events.append_event(subject, event, expected_last_seq=loaded[1] if loaded else 0)
            except ConcurrencyConflict:
                continue
            result = SaveSharedMemoryResult(
                shared_memory_id=state.id, title=state.title, version=state.version,
                created=state.version == 1, updated=state.version > 1,
            )
            await self.apply_shared(event, seq, outcome=env.outcome(result))
            env.recorded = True
            return result
        raise ConcurrencyConflict(f"shared memory {cmd.title!r} kept changing while being saved; retry")

    async def apply_shared(
        self, event: EventEnvelope, seq: int, *, outcome: OutcomeRecord | None = None,
        checkpoint: str | None = None,
    ) -> bool:
        """Project one shared-memory event, once per sequence."""
        state = SharedMemoryState.model_validate(event.data)

        async def write(tx: Tx, outcome: OutcomeRecord | None) -> bool:
            await tx.upsert_shared(state, seq)
            return False

        return await self._project_once(tx_lock=lambda tx: tx.lock_shared(state.id), write=write,
                                        seq=seq, outcome=outcome, checkpoint=checkpoint)

    async def project_event(self, event: EventEnvelope, seq: int, checkpoint: str) -> bool:
        """The projector's entry: route an event of any aggregate this service owns."""
        if event.aggregate == model.AGGREGATE:
            return await self.apply(event, seq, checkpoint=checkpoint)
        if event.aggregate == shared.AGGREGATE:
            return await self.apply_shared(event, seq, checkpoint=checkpoint)
        return False

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
        dense = await asyncio.to_thread(content_vector, self.embedder, model.normalize_content(cmd.content))
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

    # projection ---------------------------------------------------------------------------
    async def apply(
        self,
        event: EventEnvelope,
        seq: int,
        *,
        outcome: OutcomeRecord | None = None,
        checkpoint: str | None = None,
    ) -> bool:
        """Project one memory event into Postgres and the vector index, once per sequence.

        Returns False when the memory already reflects this or a later sequence.
        """
        state = model.state_of(event)
        if checkpoint is not None and self._applied_hint.get(state.id, 0) >= seq:
            # already projected (inline, by the command that wrote it): nothing to write; the
            # checkpoint moves once per batch (flush_checkpoints)
            self._pending_checkpoints[checkpoint] = max(seq, self._pending_checkpoints.get(checkpoint, 0))
            return False

        async def write(tx: Tx, outcome: OutcomeRecord | None) -> bool:
            # the vector write happens under the row lock, before the row commits
            late_tokens = None
            if state.status is MemoryStatus.ACTIVE:
                vector, late_tokens = await asyncio.gather(self._memory_vector(state), self._late_tokens(state))
                await self.index.upsert([point_for(state, vector)])
            else:
                await self.index.delete([str(state.id)])
            await tx.upsert(state, model.content_hash(state.content), seq, outcome, late_tokens)
            return True

        try:
            return await self._project_once(tx_lock=lambda tx: tx.lock(state.id), write=write,
                                            seq=seq, outcome=outcome, checkpoint=checkpoint)
        finally:
            self._tenant_writes[state.tenant] += 1  # whatever happened, cached profiles are stale

    async def _project_once(
        self,
        *,
        tx_lock: Callable[[Tx], Awaitable[int | None]],
        write: Callable[[Tx, OutcomeRecord | None], Awaitable[bool]],
        seq: int,
        outcome: OutcomeRecord | None,
        checkpoint: str | None,
    ) -> bool:
        """One projection step in one transaction: lock the aggregate, write only if this sequence
        is newer than what it reflects, record the command outcome and the checkpoint. ``write``
        returns whether it recorded the outcome itself (in the same statement as its row)."""
        async with self.store.transaction() as tx:
            applied = await tx_lock(tx)
            fresh = applied is None or applied < seq
            recorded = await write(tx, outcome) if fresh else False
            if outcome is not None and not recorded:
                await tx.record_outcome(outcome)
            if checkpoint is not None:
                await tx.advance_checkpoint(checkpoint, seq)
        return fresh

    # queries ------------------------------------------------------------------------------
    async def recall(self, tenant: str, query: Recall) -> RecallResult:
        """Hybrid (dense + keyword, RRF) search within the tenant, optionally one project; in
        hybrid mode the best ``max(limit, late_candidates)`` are re-ordered by late interaction
        (when an encoder is configured); with ``rerank``, the best ``max(limit,
        rerank_candidates)`` are then re-ordered by the cross-encoder."""
        if query.rerank and self.reranker is None:
            raise InvalidArgument(
                "rerank is not available: this server runs without a reranker (ENGRAM_RERANKER=none); "
                "recall without rerank, or ask the operator to enable it", "rerank",
            )
        mode = SEARCH_MODES[query.mode]
        late = self.late_encoder if mode == "hybrid" else None
        loop = asyncio.get_running_loop()
        # the embeddings start on worker threads now; the keyword vector is computed meanwhile
        embedding = self._start_embedding(query.query) if mode != "sparse" else None
        query_tokens = loop.run_in_executor(None, late.encode_query, query.query) if late is not None else None
        sparse = query_vector(query.query) if mode != "dense" else None
        dense = [float(x) for x in (await embedding)[0]] if embedding is not None else None
        candidates = max(
            query.limit,
            self.late_candidates if late is not None else 0,
            self.rerank_candidates if query.rerank else 0,
        )
        hits = await self.index.search(
            dense=dense, sparse=sparse, mode=mode, limit=candidates, filter=active_filter(tenant, query.project),
            # each leg's best 2 × candidates are enough for a second stage to choose from; the default
            # (4 × limit) would read 200 per leg for 50 candidates (2.2 vs 1.1 ms at 100k, same LoCoMo recall)
            prefetch_limit=late_prefetch_limit(candidates) if late is not None else None,
        )
        ids = [UUID(h.id) for h in hits]
        views = {i: view for i, h in zip(ids, hits, strict=True) if (view := view_of(h.id, h.payload)) is not None}
        if len(views) < len(hits):  # points indexed before payloads carried the view
            views.update(await self.store.active_views(tenant, [i for i in ids if i not in views]))
        found = [RecallHit(memory=views[i], score=h.score) for i, h in zip(ids, hits, strict=True) if i in views]
        if query_tokens is not None:
            if len(found) > 1:  # the candidates' stored tokens are read while the query's are computed
                tokens, stored = await asyncio.gather(
                    query_tokens, self.store.late_tokens(tenant, [h.memory.id for h in found])
                )
                found = reranked(found, await self._late_scores(tokens, found, stored))
            else:
                await query_tokens
        if query.rerank and found:
            assert self.reranker is not None
            found = found[: max(query.limit, self.rerank_candidates)]
            texts = [rerank_text(h.memory) for h in found]
            relevance = await asyncio.to_thread(self.reranker.score, query.query, texts)
            found = reranked(found, relevance.tolist())
        return RecallResult(hits=found[: query.limit])

    async def _late_scores(
        self, query_tokens: np.ndarray, found: list[RecallHit], stored: dict[UUID, bytes | None]
    ) -> list[float]:
        """MaxSim of the query's token vectors against each hit's ``stored`` ones. A memory stored
        without them (written before late interaction was on, or by another encoder) is encoded
        now, and a warning says how to store them for good."""
        assert self.late_encoder is not None
        scores = maxsim_packed(query_tokens, [stored.get(h.memory.id) for h in found], self.late_encoder.dim)
        missing = [i for i, score in enumerate(scores) if score != score]  # NaN: nothing usable stored
        if missing:
            if not self._late_missing_warned:
                self._late_missing_warned = True
                log.warning(
                    "%d of %d recall candidates have no stored late-interaction tokens; they are encoded "
                    "per recall (slower) until `engram replay memory` stores them", len(missing), len(found),
                )
            encoded = await asyncio.to_thread(
                self.late_encoder.encode_documents, [late_document(found[i].memory) for i in missing]
            )
            scores[missing] = maxsim(query_tokens, [document_matrix(tokens) for tokens in encoded])
        return scores.tolist()

    async def recall_query(self, call: Call, rq: Recall) -> RecallResult:
        """Recall within the caller's reach, with the profile of the same scope when asked."""
        project = call.search_project(rq.project)
        if project != rq.project:
            rq = rq.model_copy(update={"project": project})
        if not rq.include_profile:
            return await self.recall(call.tenant, rq)
        found, profile = await asyncio.gather(
            self.recall(call.tenant, rq), self._profile(call.tenant, GetProfile(project=project))
        )
        return found.model_copy(update={"profile": profile})

    async def get_by_key(self, call: Call, q: GetMemoryByKey) -> MemoryLookup:
        call.require_project(q.project)
        state = await self.store.get(call.tenant, model.keyed_memory_id(call.tenant, q.project, q.memory_key))
        if state is not None and state.status is MemoryStatus.ACTIVE:
            return MemoryLookup(found=True, memory=MemoryView.model_validate(state.model_dump()))
        return MemoryLookup(found=False)

    async def list_memories(self, call: Call, rm: RecallMemory) -> MemoryList:
        project = call.search_project(rm.project)
        return MemoryList(memories=await self.store.list_active(call.tenant, project, rm.category, rm.keyword, rm.limit))

    async def history(self, call: Call, hq: MemoryHistoryQuery) -> MemoryHistory:
        """Every version of a memory from the event log (none outside the caller's project)."""
        events = await self.events.history(self._subject_of(call.tenant, hq.memory_id))
        if not events or not call.sees(model.state_of(events[-1][0]).project):
            raise NotFound(f"no memory with id {hq.memory_id}", "memory_id")
        return MemoryHistory(memory_id=hq.memory_id, versions=model.history(events))

    async def shared_memories(self, call: Call, gq: GetSharedMemories) -> SharedMemoryList:
        _tenant_wide(call)
        title = shared.normalize_title(gq.title) if gq.title else None
        return SharedMemoryList(shared_memories=await self.store.shared_memories(call.tenant, title, gq.keyword, gq.limit))

    async def projects(self, call: Call, _: ListProjects) -> ProjectList:
        found = await self.store.projects(call.tenant)
        return ProjectList(projects=[p for p in found if call.sees(p.project)])

    async def profile(self, call: Call, q: GetProfile) -> Profile:
        project = call.search_project(q.project)
        return await self._profile(call.tenant, q if project == q.project else q.model_copy(update={"project": project}))

    async def _profile(self, tenant: str, query: GetProfile) -> Profile:
        """The profile from the read model, cached until this process projects a write of the
        tenant's (every write passes through ``apply`` here: inline, by the projector or replay)."""
        key = (tenant, query.project, query.static_limit, query.dynamic_limit)
        writes = self._tenant_writes[tenant]
        cached = self._profiles.get(key)
        if cached is not None and cached[0] == writes:
            return cached[1]
        profile = await self.store.profile(tenant, query.project, query.static_limit, query.dynamic_limit)
        if len(self._profiles) > _HINTS_MAX:
            self._profiles.clear()
        self._profiles[key] = (writes, profile)
        return profile

    # batching -----------------------------------------------------------------------------
    async def prime_commands(self, envs: Sequence[CommandEnvelope]) -> None:
        """Prepare a batch of commands as the consumer does (kit's skeleton, then ``prime_saves``)."""
        await self.runtime.prime([(("direct", i), env) for i, env in enumerate(envs)], self.prime_saves)

    async def prime_saves(self, batch: Sequence[tuple[CommandCall, BaseModel]]) -> None:
        """Prepare a fetched batch of commands (those with no outcome yet): embed every save's
        sentences in one call, and find with one query which contents are already saved, so each
        save skips that lookup.

        A content written by this process after the lookup started is left out (the write
        counter), so the hint never claims a content is new when a write may have raced it."""
        to_embed: list[tuple[tuple[str, str, str] | None, list[str]]] = []  # (unkeyed content, texts)
        documents: list[tuple[tuple[str, str, str] | None, tuple[str | None, str]]] = []  # late interaction's
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
        if len(self._absent_contents) > _HINTS_MAX or len(self._content_written) > _HINTS_MAX:
            self._absent_contents.clear()
            self._content_written.clear()  # (and forget the hints the counter guarded)
        self._absent_contents.update(
            c for c in contents if c not in present and self._content_written.get(c, 0) <= written_before
        )
        # a content already saved is answered "unchanged" without embedding (idempotent re-imports)
        # both encoders at once: each one's last, part-filled chunk leaves a core to the other
        await asyncio.gather(
            self._prime([t for content, texts in to_embed if content not in present for t in texts]),
            self._prime_late([d for content, d in documents if content not in present]),
        )

    async def prime_events(self, batch: list[tuple[EventEnvelope, int]]) -> None:
        """Prepare a projector batch: find which events are already projected (one query), let
        this process's inline projections of the same memories finish, and embed what is left in
        one call."""
        states: dict[UUID, tuple[MemoryState, int]] = {}
        for event, seq in batch:
            if event.aggregate == model.AGGREGATE:
                st = model.state_of(event)
                states[st.id] = (st, seq)
        if not states:
            return
        applied = await self.store.applied_sequences(list(states))
        pending = [mid for mid, (_, seq) in states.items() if applied.get(mid, 0) < seq]
        if any(mid in self._inflight for mid in pending):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + PROJECTOR_GRACE_S
            while any(mid in self._inflight for mid in pending) and loop.time() < deadline:
                await asyncio.sleep(0.005)
            applied.update(await self.store.applied_sequences(pending))
        if len(self._applied_hint) > _HINTS_MAX:
            self._applied_hint.clear()
        self._applied_hint.update(applied)
        fresh = [st for mid, (st, seq) in states.items()
                 if st.status is MemoryStatus.ACTIVE and applied.get(mid, 0) < seq]
        await asyncio.gather(self._prime([text for st in fresh for text in embedding_texts(st)]),
                             self._prime_late([late_document(st) for st in fresh]))

    async def flush_checkpoints(self) -> None:
        """Record how far the projector got through events that needed no write."""
        pending, self._pending_checkpoints = self._pending_checkpoints, {}
        for projection, seq in pending.items():
            async with self.store.transaction() as tx:
                await tx.advance_checkpoint(projection, seq)

    async def _prime(self, texts: list[str]) -> None:
        prime = getattr(self.embedder, "prime", None)
        if prime is not None and len(texts) > 1:
            await asyncio.to_thread(prime, texts)

    async def _prime_late(self, documents: list[tuple[str | None, str]]) -> None:
        prime = getattr(self.late_encoder, "prime", None)
        if prime is not None and len(documents) > 1:
            await asyncio.to_thread(prime, documents)

    # helpers ------------------------------------------------------------------------------
    @asynccontextmanager
    async def _projecting_inline(self, memory_id: UUID) -> AsyncIterator[None]:
        """Mark a memory as being appended to and projected by this process (see prime_events)."""
        self._inflight[memory_id] += 1
        try:
            yield
        finally:
            self._inflight[memory_id] -= 1
            if self._inflight[memory_id] <= 0:
                del self._inflight[memory_id]

    def _touch(self) -> None:
        self.last_activity = asyncio.get_running_loop().time()

    async def _memory_vector(self, state: MemoryState) -> list[float]:
        """The memory's dense vector; from primed sentence vectors without leaving the event loop
        when the batch was primed, else embedded in a worker thread."""
        texts = embedding_texts(state)
        cached = getattr(self.embedder, "cached", None)
        vectors = cached(texts) if cached is not None else None
        if vectors is None:
            vectors = await asyncio.to_thread(self.embedder.embed, texts)
        return state_vector(state, vectors)

    async def _late_tokens(self, state: MemoryState) -> bytes | None:
        """The memory's packed late-interaction token vectors (None without an encoder)."""
        if self.late_encoder is None:
            return None
        document = late_document(state)
        cached = getattr(self.late_encoder, "cached", None)
        primed = cached([document]) if cached is not None else None  # a primed batch: no thread hop
        (tokens,) = primed or await asyncio.to_thread(self.late_encoder.encode_documents, [document])
        return pack(document_matrix(tokens))

    def _start_embedding(self, text: str) -> asyncio.Future[np.ndarray]:
        """The embedding of ``text``, already submitted to a worker thread (asyncio.to_thread would
        start only when awaited)."""
        return asyncio.get_running_loop().run_in_executor(None, self.embedder.embed, [text])

    def _subject(self, state: MemoryState) -> str:
        return self._subject_of(state.tenant, state.id)

    def _subject_of(self, tenant: str, memory_id: UUID) -> str:
        return self.names.event(tenant, model.AGGREGATE, str(memory_id))


def _tenant_wide(call: Call) -> None:
    """Shared memories belong to the user, not to a project: a credential or connection restricted
    to one project neither reads nor changes them."""
    if call.project_scope is not None:
        raise PermissionDenied(
            f"shared memories belong to no project; this credential or connection is restricted to project "
            f"'{call.project_scope}'. Use an unrestricted key, without X-Engram-Project, for shared memories",
            "project",
        )
