"""The checkpointed projector: apply each event to a read model once per stream sequence.

A service's projection says, per aggregate, how to lock an aggregate's row (returning the
sequence it already reflects) and how to write it; ``kit`` does the rest, the same way for every
service (pyeventsourcing's tracking records):

* one transaction per event: the aggregate's row lock, the write only if the event's sequence is
  newer than what the row reflects, a command outcome recorded with it (when a command projects
  its own event inline), and the consumer's checkpoint advanced — all committed together;
* a batch-preparation hook: before a fetched batch is handled the service may learn with one
  query which events are already applied (:meth:`CheckpointedProjector.note_applied`) and prepare
  the rest (embed every text at once); an event known to be applied then costs no transaction,
  and the checkpoint moves once per batch (:meth:`CheckpointedProjector.flush_checkpoints`);
* the consumer itself (:meth:`CheckpointedProjector.start`), and a replay (:mod:`kit.replay`).

Events reach the projection typed (:mod:`kit.events`: ``data`` is the aggregate's declared model,
parsed once here, for the aggregates the projection routes — others are not its read model's and
are never parsed); an event of an aggregate no contract declares is skipped.

No SQL here: the unit of work and its transaction are the service's (ports below).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, Protocol, TypeVar

from nats.aio.msg import Msg

from contracts.envelope import EventEnvelope
from contracts.events import Event
from contracts.subjects import ConsumerSpec
from kit.bus import Bus
from kit.command_log import OutcomeRecord
from kit.events import UnknownEvent, known, skipped, typed

log = logging.getLogger("engram.projector")

_HINTS_MAX = 16_384


class CheckpointTx(Protocol):
    """One projection transaction (the service's adapter implements it)."""

    async def advance_checkpoint(self, projection: str, seq: int) -> None: ...

    async def record_outcome(self, outcome: OutcomeRecord) -> None: ...


TxT = TypeVar("TxT", bound=CheckpointTx)
TxT_co = TypeVar("TxT_co", bound=CheckpointTx, covariant=True)


class ProjectionStore(Protocol[TxT_co]):
    """The unit of work of a read model: transactions, and where each projection got to."""

    def transaction(self) -> AbstractAsyncContextManager[TxT_co]: ...

    async def checkpoint(self, projection: str) -> int: ...


Events = Sequence[tuple[Event[Any], int]]
#: An aggregate's projection step: (event, stream sequence, checkpoint or None) -> whether it wrote.
Apply = Callable[[Event[Any], int, "str | None"], Awaitable[bool]]
Prepare = Callable[[Events], Awaitable[None]]


class CheckpointedProjector(Generic[TxT]):
    """Projects events into one read model, each once per stream sequence."""

    def __init__(self, store: ProjectionStore[TxT], *, prepare: Prepare | None = None) -> None:
        self.store = store
        self._prepare = prepare
        self._handlers: dict[str, Apply] = {}
        # aggregate key -> a sequence already projected into it, learnt per batch; read-model
        # sequences only grow, so "applied >= seq" stays true and the event needs no transaction
        self._applied_hint: dict[Hashable, int] = {}
        self._pending_checkpoints: dict[str, int] = {}

    def route(self, aggregate: str, apply: Apply) -> None:
        """Project the events of ``aggregate`` with ``apply``."""
        self._handlers[aggregate] = apply

    async def project(self, event: Event[Any] | EventEnvelope, seq: int, checkpoint: str) -> bool:
        """The consumer's entry: route an event by its aggregate (others are not this read model's)."""
        apply = self._handlers.get(event.aggregate)
        if apply is None:
            return False
        try:
            return await apply(typed(event), seq, checkpoint)
        except UnknownEvent as exc:
            skipped(exc, event.aggregate)
            return False

    def routed(self, raws: Iterable[tuple[bytes, int]]) -> list[tuple[Event[Any], int]]:
        """The messages (bytes, stream sequence) of aggregates this projection routes, parsed once
        into typed events; the others are dropped unparsed (a replay reads every aggregate)."""
        out = []
        for raw, seq in raws:
            envelope = EventEnvelope.model_validate_json(raw)
            if envelope.aggregate in self._handlers:
                out.extend((event, seq) for event, _ in known(((envelope, seq),)))
        return out

    # one event ---------------------------------------------------------------------------
    def known_applied(self, key: Hashable, seq: int, checkpoint: str | None) -> bool:
        """Whether a consumer's event is known (from its batch's preparation) to be applied
        already; its checkpoint then moves with the batch's (:meth:`flush_checkpoints`)."""
        if checkpoint is None or self._applied_hint.get(key, 0) < seq:
            return False
        self._pending_checkpoints[checkpoint] = max(seq, self._pending_checkpoints.get(checkpoint, 0))
        return True

    async def apply_once(
        self,
        *,
        lock: Callable[[TxT], Awaitable[int | None]],
        write: Callable[[TxT, OutcomeRecord | None], Awaitable[bool]],
        seq: int,
        outcome: OutcomeRecord | None = None,
        checkpoint: str | None = None,
    ) -> bool:
        """One projection step in one transaction: ``lock`` the aggregate (it returns the sequence
        the read model reflects), ``write`` only if ``seq`` is newer, record the command
        ``outcome`` and advance the ``checkpoint``. ``write`` returns whether it recorded the
        outcome itself (e.g. in the same statement as its row). Returns whether it wrote."""
        async with self.store.transaction() as tx:
            applied = await lock(tx)
            fresh = applied is None or applied < seq
            recorded = await write(tx, outcome) if fresh else False
            if outcome is not None and not recorded:
                await tx.record_outcome(outcome)
            if checkpoint is not None:
                await tx.advance_checkpoint(checkpoint, seq)
        return fresh

    # batches -----------------------------------------------------------------------------
    async def prepare(self, batch: Events) -> None:
        """Prepare a fetched batch (the service's hook), before its events are handled one by one."""
        if self._prepare is not None:
            await self._prepare(batch)

    def note_applied(self, applied: Mapping[Hashable, int]) -> None:
        """Remember sequences already projected into these aggregates (see :meth:`known_applied`)."""
        if len(self._applied_hint) > _HINTS_MAX:
            self._applied_hint.clear()
        self._applied_hint.update(applied)

    async def flush_checkpoints(self) -> None:
        """Record how far the consumers got through events that needed no write."""
        pending, self._pending_checkpoints = self._pending_checkpoints, {}
        for projection, seq in pending.items():
            async with self.store.transaction() as tx:
                await tx.advance_checkpoint(projection, seq)

    async def move_checkpoint(self, source: str, target: str) -> None:
        """Advance ``target`` to where ``source`` got (a replay hands over to the live consumer).
        ``source`` is read before the transaction opens, not in it: the store reads it through the
        pool, and a transaction waiting for a second connection of a pool its peers hold whole
        would wait forever (the read was never in the transaction's snapshot anyway)."""
        last = await self.store.checkpoint(source)
        async with self.store.transaction() as tx:
            await tx.advance_checkpoint(target, last)

    # the consumer ------------------------------------------------------------------------
    def start(
        self, bus: Bus, spec: ConsumerSpec, checkpoint: str, stop: asyncio.Event, *, batched: bool = True,
        fetch: int = 64, apply_batch: Callable[[Events, str], Awaitable[int]] | None = None,
    ) -> asyncio.Task[None]:
        """Consume ``spec`` until ``stop`` is set, recording progress as ``checkpoint``, up to
        ``fetch`` events a fetch. ``batched`` runs the preparation hook per fetched batch and
        flushes checkpoints after it. ``apply_batch`` (the service's bulk path, as in
        :func:`kit.replay.rebuild`) applies a fetched batch of several events at once (a backlog);
        if it fails, its events go one by one."""

        async def on_event(msg: Msg) -> None:
            for event, seq in self.routed(((msg.data, msg.metadata.sequence.stream),)):
                await self.project(event, seq, checkpoint)

        async def prepare(msgs: list[Msg]) -> None:
            batch = []
            for msg in msgs:
                try:
                    batch.extend(self.routed(((msg.data, msg.metadata.sequence.stream),)))
                except ValueError:  # (handled, and dead-lettered, on its own)
                    continue
            await self.prepare(batch)

        async def handle_batch(msgs: list[Msg]) -> None:
            assert apply_batch is not None
            await apply_batch(self.routed((m.data, m.metadata.sequence.stream) for m in msgs), checkpoint)

        return asyncio.create_task(bus.consume(
            spec, on_event, stop, batch=fetch,
            prepare=prepare if batched else None, after_batch=self.flush_checkpoints if batched else None,
            handle_batch=handle_batch if apply_batch is not None else None,
        ))
