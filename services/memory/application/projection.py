"""The projection of the memory service's events into its read models: Postgres rows and vectors.

Built on kit's :class:`~kit.projector.CheckpointedProjector` (one transaction per event: the
aggregate's row lock, the write only if the event is newer than what the row reflects, the
checkpoint and any command outcome in the same transaction). A command projects its own event
inline before replying (read-your-writes); the projector consumer applies the same events again
and skips what is already there, usually without a transaction (:meth:`MemoryProjection.prepare`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any
from uuid import UUID

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    EXTRACTION_RESULT_AGGREGATE,
    EXTRACTION_TASK_AGGREGATE,
    DailyLogState,
    ExtractionResultState,
    ExtractionTaskState,
)
from contracts.envelope import EventEnvelope
from contracts.events import Event
from contracts.memory import MemoryState, SharedMemoryState
from kit.command_log import OutcomeRecord
from kit.events import typed
from kit.projector import CheckpointedProjector
from services.memory.application.ports import LogRecord, ReadModel, ReadModelTx
from services.memory.domain import model, shared
from services.memory.domain.keywords import SparseVector
from services.memory.search.encoders import Encoders, owned_by
from services.memory.search.index_sync import ReplaySync
from services.memory.search.indexing import embedding_texts, keyword_vector, point_for
from services.memory.search.late import late_document
from services.memory.search.ports import VectorIndex
from services.memory.search.vector_cache import MemoryKeys, late_cache_model

#: The projector consumer's checkpoint.
PROJECTOR = "memory-projector"
#: The command path projects its own events inline (read-your-writes). The projector exists for
#: events nobody projected (a crash between append and projection, another writer), so it waits
#: up to this long for this process's in-flight inline projections of the same memories before
#: doing the work itself; otherwise, under load, it would embed most new memories a second time.
PROJECTOR_GRACE_S = 5.0


#: an event as the projection takes it: typed by kit (a consumer's, a replay's, a command's own
#: event read back), or an envelope a writer built (typed here, by ``kit.events``)
AnyEvent = Event[Any] | EventEnvelope


def latest_states(
    batch: Sequence[tuple[AnyEvent, int]],
) -> tuple[dict[UUID, tuple[MemoryState, int]], list[tuple[AnyEvent, int]]]:
    """Each memory's state after ``batch`` with its sequence (events carry the whole state), and
    the batch's events of other aggregates, in order."""
    last_events: dict[str, tuple[AnyEvent, int]] = {}
    others: list[tuple[AnyEvent, int]] = []
    for event, seq in batch:
        if event.aggregate == model.AGGREGATE:
            last_events[event.aggregate_id] = (event, seq)
        else:
            others.append((event, seq))
    last: dict[UUID, tuple[MemoryState, int]] = {}
    for event, seq in last_events.values():
        state = model.state_of(typed(event))
        if state.id not in last or last[state.id][1] < seq:
            last[state.id] = (state, seq)
    return last, others


class MemoryProjection:
    """Applies memory and shared-memory events to the read model and the vector index."""

    def __init__(self, store: ReadModel, index: VectorIndex, encoders: Encoders) -> None:
        self.store = store
        self.index = index
        self.encoders = encoders
        self.projector: CheckpointedProjector[ReadModelTx] = CheckpointedProjector(store, prepare=self.prepare)
        self.projector.route(model.AGGREGATE, self._apply_routed)
        self.projector.route(shared.AGGREGATE, self._apply_shared_routed)
        self.projector.route(DAILY_LOG_AGGREGATE, self._apply_record_routed)
        self.projector.route(EXTRACTION_TASK_AGGREGATE, self._apply_record_routed)
        self.projector.route(EXTRACTION_RESULT_AGGREGATE, self._apply_record_routed)
        self._inflight: Counter[UUID] = Counter()  # memories being appended + projected inline here
        #: writes projected per tenant by this process (inline, by the projector or replay): cached
        #: profiles are valid while their tenant's count is unchanged
        self.tenant_writes: Counter[str] = Counter()
        self._replay_writes: asyncio.Future[None] | None = None  # the last replayed batch's writes
        self.replay_sync = ReplaySync(keep=False)  # the running (or last) replay's view of the index

    # one event ---------------------------------------------------------------------------
    async def apply(
        self, event: AnyEvent, seq: int, *, outcome: OutcomeRecord | None = None, checkpoint: str | None = None,
    ) -> bool:
        """Project one memory event into Postgres and the vector index, once per sequence.

        Returns False when the memory already reflects this or a later sequence.
        """
        state = model.state_of(typed(event))
        restored = event.origin == "import"
        if self.projector.known_applied(state.id, seq, checkpoint):
            # already projected (inline, by the command that wrote it): nothing to write; the
            # checkpoint moves once per batch (flush_checkpoints)
            return False

        # Embedded before the transaction, not in it: embedding may read and fill the embedding cache
        # through the pool, and a transaction waiting for a second connection of a pool that its
        # peers hold whole would wait forever (and it holds no row lock while it computes).
        point, late_tokens, owned = await self.encoders.indexed(state, restored)

        async def write(tx: ReadModelTx, outcome: OutcomeRecord | None) -> bool:
            # the row first: it refuses a row of another tenant (ForeignRow) before the vector index,
            # whose points are keyed by memory id alone, is touched; the vector write then happens
            # under the row lock, before the row commits (a failed index write rolls the row back)
            await tx.upsert(state, model.content_hash(state.content), seq, outcome, late_tokens, imported=restored)
            if point is not None:
                await self.index.upsert([point])
                if owned:  # what the embedding cache now holds of this version's text
                    await tx.note_cache_owners(owned)
            else:
                await self.index.delete([str(state.id)])
            return True

        try:
            return await self.projector.apply_once(lock=lambda tx: tx.lock(state.id), write=write,
                                                   seq=seq, outcome=outcome, checkpoint=checkpoint)
        finally:
            self.tenant_writes[state.tenant] += 1  # whatever happened, cached profiles are stale

    async def apply_shared(
        self, event: AnyEvent, seq: int, *, outcome: OutcomeRecord | None = None, checkpoint: str | None = None,
    ) -> bool:
        """Project one shared-memory event, once per sequence."""
        state = typed(event).data
        if not isinstance(state, SharedMemoryState):
            raise TypeError(f"not a shared-memory event: {event.aggregate} {event.type}")

        async def write(tx: ReadModelTx, outcome: OutcomeRecord | None) -> bool:
            await tx.upsert_shared(state, seq)
            return False

        return await self.projector.apply_once(lock=lambda tx: tx.lock_shared(state.id), write=write,
                                               seq=seq, outcome=outcome, checkpoint=checkpoint)

    async def apply_record(
        self, event: AnyEvent, seq: int, *, outcome: OutcomeRecord | None = None, checkpoint: str | None = None,
    ) -> bool:
        """Project one daily-log, extraction-task or extraction-result event, once per sequence."""
        write: Callable[[ReadModelTx, OutcomeRecord | None], Awaitable[bool]]
        record = typed(event).data
        if isinstance(record, DailyLogState):
            log = record
            kind: LogRecord = "log"
            record_id = log.id

            async def write(tx: ReadModelTx, _: OutcomeRecord | None) -> bool:
                await tx.upsert_log(log, seq)
                return False
        elif isinstance(record, ExtractionTaskState):
            task = record
            kind, record_id = "task", task.id

            async def write(tx: ReadModelTx, _: OutcomeRecord | None) -> bool:
                await tx.upsert_task(task, seq)
                return False
        elif isinstance(record, ExtractionResultState):
            result = record
            kind, record_id = "result", result.id

            async def write(tx: ReadModelTx, _: OutcomeRecord | None) -> bool:
                await tx.upsert_result(result, seq)
                return False
        else:
            raise TypeError(f"not a daily-log, extraction-task or extraction-result event: {event.aggregate} {event.type}")

        return await self.projector.apply_once(lock=lambda tx: tx.lock_record(kind, record_id), write=write,
                                               seq=seq, outcome=outcome, checkpoint=checkpoint)

    async def _apply_record_routed(self, event: Event[Any], seq: int, checkpoint: str | None) -> bool:
        return await self.apply_record(event, seq, checkpoint=checkpoint)

    async def _apply_routed(self, event: Event[Any], seq: int, checkpoint: str | None) -> bool:
        return await self.apply(event, seq, checkpoint=checkpoint)

    async def _apply_shared_routed(self, event: Event[Any], seq: int, checkpoint: str | None) -> bool:
        return await self.apply_shared(event, seq, checkpoint=checkpoint)

    async def project_event(self, event: AnyEvent, seq: int, checkpoint: str) -> bool:
        """The projector's entry: route an event of any aggregate this service owns."""
        return await self.projector.project(event, seq, checkpoint)

    # batches -----------------------------------------------------------------------------
    async def prepare(self, batch: Sequence[tuple[AnyEvent, int]]) -> None:
        """Prepare a projector batch: find which events are already projected (one query), let
        this process's inline projections of the same memories finish, and embed what is left in
        one call."""
        states, _ = latest_states(batch)
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
        self.projector.note_applied(applied)
        fresh = [st for mid, (st, seq) in states.items()
                 if model.indexed(st) and applied.get(mid, 0) < seq]
        await self.encoders.prime([text for st in fresh for text in embedding_texts(st)],
                    [late_document(st) for st in fresh])

    def begin_replay(self, *, keep_index: bool) -> ReplaySync:
        """Start a replay's view of the vector index (:class:`.index_sync.ReplaySync`): with
        ``keep_index`` the index was kept and only points whose fingerprint differs are written."""
        self.replay_sync = ReplaySync(keep=keep_index)
        return self.replay_sync

    async def replay_batch(self, batch: Sequence[tuple[AnyEvent, int]], checkpoint: str) -> int:
        """A replay's batch in bulk (:func:`kit.replay.rebuild`): the read model was emptied and
        nothing else writes, so each memory's last event in the batch is its state after it (events
        carry the whole state). Their points go to the vector index in one
        upsert while their rows and the checkpoint are written in one transaction (bulk: see
        ``ReadModelTx.replay_memories``); rows still only move forward (``last_seq``), across
        batches too. With an embedding cache nothing is recomputed that a replay computed before:
        each memory's dense and keyword vectors are read from it (:meth:`indexed_vectors`) and its
        late tokens copied from it inside Postgres. When the replay kept the vector index
        (:meth:`begin_replay`), a point whose stored fingerprint is already the one it would get is
        neither computed nor written. Other aggregates go event by event. Returns how many events
        were written."""
        last, others = latest_states(batch)
        active = [st for st, _ in last.values() if model.indexed(st)]  # (and superseded: as_of)
        sync = self.replay_sync
        ids = [str(st.id) for st in active]
        fingerprints = [self.encoders.fingerprint(st) for st in active]
        stored = await self.index.fingerprints(ids) if sync.keep else {}
        todo = sync.to_write(ids, fingerprints, stored)
        changed = [active[i] for i in todo]
        cache, encoder = self.encoders.cache, self.encoders.late_encoder
        keys = [MemoryKeys(st) for st in active] if cache is not None else []
        late: dict[UUID, bytes | None] = {}
        digests: dict[UUID, bytes] = {}
        owned: list[tuple[str, bytes]] = []  # what this batch puts in the cache, by user (see apply)
        if cache is None:  # everything computed: both models at once, as a live batch
            await self.encoders.prime([text for st in changed for text in embedding_texts(st)],
                        [late_document(st) for st in active])
            vectors = [(await self.encoders.memory_vector(st), None) for st in changed]
            late = {st.id: await self.encoders.late_tokens(st) for st in active}
        else:
            vectors, computed = await self.indexed_vectors(changed, [keys[i] for i in todo])
            owned += [pair for st in computed for pair in owned_by(st)]
            if encoder is not None:
                digests = {st.id: k.document for st, k in zip(active, keys, strict=True)}
        restored = {UUID(e.aggregate_id): e.origin == "import" for e, _ in batch if e.aggregate == model.AGGREGATE}
        points = [point_for(st, dense, sparse, fingerprints[i], restored.get(st.id, False))
                  for i, st, (dense, sparse) in zip(todo, changed, vectors, strict=True)]
        rows = [(st, model.content_hash(st.content), seq, late.get(st.id), digests.get(st.id), restored.get(st.id, False))
                for st, seq in last.values()]
        gone = [str(mid) for mid, (st, _) in last.items() if not model.indexed(st)]

        last_seq = max(seq for _, seq in batch) if batch else None

        async def write_rows() -> None:
            async with self.store.transaction() as tx:
                unfilled = await tx.replay_memories(rows, late_cache_model(encoder.model_id) if encoder else "")
                await tx.note_cache_owners(owned)
                if not unfilled and last_seq is not None:
                    await tx.advance_checkpoint(checkpoint, last_seq)
            if cache is not None:
                cache.hits += len(digests) - len(unfilled)
            if unfilled:
                # not in the cache: computed (and stored there) now, outside any transaction, since
                # computing reads and fills the cache through the pool; the checkpoint moves with them
                states = [last[mid][0] for mid in unfilled]
                await self.encoders.prime([], [late_document(st) for st in states])
                tokens = [(st.id, packed) for st in states if (packed := await self.encoders.late_tokens(st)) is not None]
                async with self.store.transaction() as tx:
                    await tx.set_late_tokens(tokens)
                    if cache is not None:
                        await tx.note_cache_owners([pair for st in states for pair in owned_by(st)])
                    if last_seq is not None:
                        await tx.advance_checkpoint(checkpoint, last_seq)

        async def write() -> None:
            # Postgres writes in its own process while the index takes the points (in a thread)
            await asyncio.gather(self.index.upsert(points), write_rows())
            await self.index.delete(gone)

        # a pipeline one batch deep: this batch is written while the next one is read and prepared
        await self.replay_flush()
        sync.scheduled(dict(zip(ids, fingerprints, strict=True)), gone,
                       {p.id: fingerprints[i] for i, p in zip(todo, points, strict=True)})
        self._replay_writes = asyncio.ensure_future(write())
        for st, _ in last.values():
            self.tenant_writes[st.tenant] += 1
        written = len(last)
        if others:
            await self.replay_flush()
            for event, seq in others:
                written += await self.projector.project(event, seq, checkpoint)
        return written

    async def replay_flush(self) -> None:
        """Wait for the writes of the last :meth:`replay_batch` (after a replay's last batch)."""
        task, self._replay_writes = self._replay_writes, None
        if task is not None:
            await task

    async def indexed_vectors(
        self, states: Sequence[MemoryState], keys: Sequence[MemoryKeys],
    ) -> tuple[list[tuple[Sequence[float], SparseVector]], list[MemoryState]]:
        """Each memory's dense and keyword vectors: from the embedding cache (one query), else
        computed from its sentence vectors (primed through the cache, one query) and stored there
        for the next replay; and the memories whose vectors were computed (and stored)."""
        cache = self.encoders.cache
        assert cache is not None
        found: list[tuple[Sequence[float], SparseVector] | None] = list(await cache.memory_vectors(self.encoders, keys))
        todo = [i for i, f in enumerate(found) if f is None]
        if todo:
            await self.encoders.prime([text for i in todo for text in embedding_texts(states[i])], [])
            computed = []
            for i in todo:
                dense, sparse = await self.encoders.memory_vector(states[i]), keyword_vector(states[i])
                found[i] = (dense, sparse)
                computed.append((keys[i], dense, sparse))
            await cache.store_memory_vectors(self.encoders, computed)
        return [f for f in found if f is not None], [states[i] for i in todo]

    async def flush_checkpoints(self) -> None:
        """Record how far the projector got through events that needed no write."""
        await self.projector.flush_checkpoints()

    async def project_inline(self, event: AnyEvent, seq: int, outcome: OutcomeRecord | None) -> bool:
        """A command's own event (any aggregate of the service), projected before the command
        replies, with the command's outcome in the same transaction (kit's write path)."""
        if event.aggregate == model.AGGREGATE:
            return await self.apply(event, seq, outcome=outcome)
        if event.aggregate == shared.AGGREGATE:
            return await self.apply_shared(event, seq, outcome=outcome)
        return await self.apply_record(event, seq, outcome=outcome)

    def inline(self, event: AnyEvent) -> AbstractAsyncContextManager[None]:
        """Held by kit's write path from before an append until its projection committed: a
        memory's event marks the memory (:meth:`projecting_inline`); the others need no mark."""
        if event.aggregate == model.AGGREGATE:
            return self.projecting_inline(UUID(event.aggregate_id))
        return nullcontext()

    @asynccontextmanager
    async def projecting_inline(self, memory_id: UUID) -> AsyncIterator[None]:
        """Mark a memory as being appended to and projected by this process (see ``prepare``)."""
        self._inflight[memory_id] += 1
        try:
            yield
        finally:
            self._inflight[memory_id] -= 1
            if self._inflight[memory_id] <= 0:
                del self._inflight[memory_id]
