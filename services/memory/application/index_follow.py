"""Several memory replicas on the embedded engine: each keeps its own vector index, following the log.

The embedded engine (Qdrant Edge) is a library: its shard belongs to one process. With a Qdrant
server every replica shares one collection; without one, each replica (``ENGRAM_MEMORY_REPLICA``)
holds a shard of its own under ``$ENGRAM_HOME`` and keeps it equal to the memories the event log
says, while the Postgres read model stays shared (projected once, by whichever replica).

* **Writes.** A command's replica projects its event inline (read-your-writes on that replica),
  as with one replica. Every replica also follows every memory event with a durable consumer of its
  own (``memory-index-<replica>``): for each memory the batch touches it waits until the shared read
  model has applied the event, then, if that event is still the memory's latest (a later one will
  come down the same stream), brings its own point to the event's state — written only if its
  fingerprint differs (:mod:`.index_sync`), so the replica that projected it inline usually writes
  nothing again; a memory no longer active loses its point. Events are followed in stream order and
  only once the read model has them, so each point ends at its memory's latest state (while a newer
  state of the same memory is being committed, an older one may be written for a moment, then the
  newer one again).
* **What no event says.** A purge deletes the user's events and rows: the replica that ran it
  broadcasts the user (``Names.broadcast("memory", "purged")``) and every replica deletes the user's
  points and cached content. A replica that was down then learns it from the read model: before it
  consumes anything, the sweep (:meth:`IndexFollower.sweep`) deletes the points of memories the read
  model does not hold as active (nothing of its own is being written yet, so nothing is mistaken).
* **A new shard** (a new replica, a lost volume) follows the log from its first event; a replay
  (``engram replay memory``) resets every follower the same way, so each replica's shard is checked
  point by point against the rebuilt read model when it starts again.

Replicas answer recall from their own shards, so a memory saved through one replica reaches the
others' recall a few milliseconds later (the follower's lag), never later than the shared read
model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from contracts.envelope import EventEnvelope
from contracts.events import Event
from contracts.memory import MemoryState
from services.memory.application.ports import ReadModel
from services.memory.application.projection import MemoryProjection, latest_states
from services.memory.domain import model
from services.memory.search.indexing import embedding_texts, point_for
from services.memory.search.ports import VectorIndex

__all__ = ["FOLLOW_WAIT_S", "IndexFollower", "ReadModelBehind"]

#: How long a follower waits for the shared read model to apply an event before it gives the event
#: back to be redelivered later.
FOLLOW_WAIT_S = 5.0


class ReadModelBehind(Exception):
    """The shared read model has not applied these events yet (retried: the message is redelivered)."""


class IndexFollower:
    """Brings this replica's vector index to the memories the log says, batch by batch (see the module)."""

    def __init__(self, projection: MemoryProjection, store: ReadModel, index: VectorIndex, *,
                 wait_s: float = FOLLOW_WAIT_S) -> None:
        self.projection = projection
        self.store = store
        self.index = index
        self.wait_s = wait_s
        self.written = 0  # points this follower wrote or deleted
        self.kept = 0  # points it found right

    async def _applied(self, last: dict[UUID, tuple[MemoryState, int]]) -> dict[UUID, int]:
        """The read model's sequence of each memory, once it has applied at least the batch's event."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            applied = await self.store.applied_sequences(list(last))
            behind = [mid for mid, (_, seq) in last.items() if applied.get(mid, 0) < seq]
            if not behind:
                return applied
            if loop.time() >= deadline:
                raise ReadModelBehind(f"the read model has not applied the events of {len(behind)} memories yet")
            await asyncio.sleep(0.02)

    async def follow(self, batch: Sequence[tuple[Event[Any] | EventEnvelope, int]]) -> int:
        """Apply a batch of events (any aggregate: only memories' matter); how many points changed."""
        last, _ = latest_states(batch)
        if not last:
            return 0
        applied = await self._applied(last)
        # an event a later one has overtaken in the read model is not applied: the later one follows
        current = [st for mid, (st, seq) in last.items() if applied[mid] == seq]
        active = [st for st in current if model.indexed(st)]
        gone = [str(st.id) for st in current if not model.indexed(st)]
        ids = [str(st.id) for st in active]
        fingerprints = [self.projection.encoders.fingerprint(st) for st in active]
        stored = await self.index.fingerprints(ids + gone)
        todo = [i for i, (pid, fp) in enumerate(zip(ids, fingerprints, strict=True)) if stored.get(pid, "") != fp]
        changed = [active[i] for i in todo]
        await self.projection.encoders.prime([t for st in changed for t in embedding_texts(st)], [])
        points = [point_for(st, await self.projection.encoders.memory_vector(st), fingerprint=fingerprints[i])
                  for i, st in zip(todo, changed, strict=True)]
        await self.index.upsert(points)
        doomed = [pid for pid in gone if pid in stored]
        await self.index.delete(doomed)
        for st in current:
            self.projection.tenant_writes[st.tenant] += 1  # cached profiles of this replica are stale
        self.kept += len(active) - len(todo)
        self.written += len(points) + len(doomed)
        return len(points) + len(doomed)

    async def sweep(self) -> int:
        """Delete the points of memories the read model does not hold as active (a purged user's);
        how many. Cheap when nothing is off: two counts. Run before the replica writes anything (a
        point its own command is projecting is in the index before its row commits)."""
        if await self.index.size() == await self.store.indexed_memory_count():
            return 0
        live = {str(mid) for mid in await self.store.indexed_memory_ids()}
        stale = [pid for pid in await self.index.point_ids() if pid not in live]
        await self.index.delete(stale)
        self.written += len(stale)
        return len(stale)
