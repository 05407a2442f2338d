"""Vector index on Qdrant Edge - the embedded, in-process engine (default).

Operational notes (qdrant-edge-py 0.9.0, measured on a 2-core machine):

* **Calls are synchronous and hold the GIL.** Searches, counts and small
  updates take well under a millisecond, so they run directly on the event
  loop. Upserts of more than :data:`THREAD_THRESHOLD` points go through
  ``asyncio.to_thread`` in chunks of :data:`UPSERT_CHUNK`; because the engine
  does not release the GIL, chunking (not the thread) is what bounds how long
  the loop is stalled (measured: at most ~20 ms per 256-point chunk while
  upserting 10,000 points in ~1 s).
* **Durability.** The shard keeps its write-ahead log enabled (the engine's
  default), so every acknowledged update survives a process crash and is
  replayed on the next open. A ``flush()`` persists the segments and lets the
  engine truncate the WAL; without one the WAL grows with every write (~4 GiB
  at 1M points) and a reopen after a crash replays all of it. So the shard is
  flushed after :attr:`EdgeVectorIndex.flush_every_points` points written
  (inline, from a worker thread, holding the write mutex), when
  :meth:`EdgeVectorIndex.flush_if_due` finds :attr:`~EdgeVectorIndex.flush_every_s`
  passed since the last flush with writes pending (the memory service's
  maintenance loop asks every second), after each ``optimize()``, and on
  ``close()``. The index is a projection of the event log anyway: ``drop()`` +
  ``ensure()`` + a replay rebuilds it.
* **Single opener.** The engine itself refuses a second open of a shard's WAL
  (``Can't init WAL: WouldBlock``), in this or another process. On top of
  that this adapter holds an exclusive ``flock`` on a sibling file
  ``<path>.lock`` from ``ensure()`` to ``close()``, which also covers the
  window in which a fresh shard is being created, and turns a conflict into
  :class:`ShardLockedError` naming the path.
* **No optimisation on the hot path.** New points land in an appendable
  segment that is searched exactly (filtered by the payload index), which is
  sub-millisecond at 10,000 points. Building HNSW graphs / vacuuming is
  ``optimize()``, which blocks (seconds at tens of thousands of points) and
  is left to maintenance moments such as the end of a replay, or to the
  memory service's maintenance loop (``services/memory/main.py``,
  ``maintain_index``). ``optimize()`` runs in a worker thread but the engine
  holds the GIL for all of it (measured with qdrant-edge-py 0.9.0: a 50 ms
  ``time.sleep`` in the main thread did not return during a 33 s
  optimisation), so nothing else in the process runs meanwhile; what bounds
  the stall is how many new points one optimisation covers.
* **Compaction in a process of its own.** Bounded optimisations leave the shard in many small
  segments (eight at 100,000 points), and each segment is an HNSW graph searched on its own:
  recall's hybrid search at 100,000 points costs ~7 CPU-ms in eight segments and ~2.7 in two.
  Merging them in-process would stall every recall for the whole merge (~14-24 s at 100,000
  points, minutes at 1M). So :meth:`EdgeVectorIndex.compact` copies the flushed shard to
  ``<path>.compacting``, merges the copy's segments into :data:`COMPACT_SEGMENTS` in a child
  process (``services/memory/adapters/edge_compact.py``, niced, killed with its parent) while
  this one keeps searching and writing the live shard, records every update made meanwhile,
  applies those to the merged copy, and swaps the directories (``<path>`` becomes
  ``<path>.retired``, then is deleted). The only stalls are two shard loads (~0.2 s each at
  100,000 points). A crash at any point leaves a whole shard: ``ensure()`` puts
  ``<path>.retired`` back if ``<path>`` is missing and deletes what a compaction left behind.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import qdrant_edge as qe

from kit.process import die_with_parent
from services.memory.adapters.vectors import (
    DENSE_VECTOR,
    KEYWORD_FIELDS,
    RRF_K,
    SPARSE_VECTOR,
    TENANT_FIELD,
    as_float_list,
    default_prefetch_limit,
    validate_search,
)
from services.memory.search.ports import (
    FINGERPRINT_FIELD,
    SearchFilter,
    SearchHit,
    SearchMode,
    SparseVector,
    VectorIndex,
    VectorPoint,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX: rely on the engine's own WAL lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["COMPACT_ABOVE_SEGMENTS", "COMPACT_SEGMENTS", "FLUSH_EVERY_POINTS", "FLUSH_EVERY_S", "THREAD_THRESHOLD",
           "UPSERT_CHUNK", "CompactionError", "Compaction", "EdgeVectorIndex", "ShardLockedError", "compaction_config"]

#: Upserts larger than this run in a worker thread, chunked.
THREAD_THRESHOLD = 64
#: Points per engine update when upserting in a worker thread.
UPSERT_CHUNK = 256
#: Point ids per page when listing every point.
SCROLL_PAGE = 10_000
#: Flush (persist segments, truncate the WAL) after this many points written since the last flush.
FLUSH_EVERY_POINTS = 20_000
#: ... or this many seconds after the last flush, if anything was written since (``flush_if_due``).
FLUSH_EVERY_S = 60.0
#: Threads the engine searches a shard's segments with. One: a recall's search already runs beside
#: the query encoders on a second core, and the engine's pool of one thread per CPU cost more CPU for
#: the same latency (100k points, hybrid search as recall runs it: 2.0-2.2 vs 1.6 CPU-ms, wall within
#: noise; docs/benchmarks-log.md). ``ENGRAM_VECTOR_SEARCH_THREADS`` sets it.
SEARCH_THREADS = 1


#: A segment's dense vectors are indexed (HNSW) once they pass this many KB.
INDEXING_THRESHOLD_KB = 10_000
#: Compaction (see the module notes) merges the shard's segments into this many ...
COMPACT_SEGMENTS = 2
#: ... once it has more than this many segments ...
COMPACT_ABOVE_SEGMENTS = 4
#: ... and at least this many points (below it a search of every segment is cheap anyway).
COMPACT_MIN_POINTS = 20_000
#: A compaction is abandoned (the merged copy deleted, the live shard kept) if more points than
#: this were written while it ran: re-applying them would hold writes back too long.
COMPACT_MAX_REPLAYED_POINTS = 50_000
#: The largest segment a compaction may build, in KB (the engine's unit): no bound in practice.
COMPACT_MAX_SEGMENT_KB = 1_000_000_000
#: Updates a compaction applies to its merged copy before holding writes back for the rest.
COMPACT_CATCH_UP_UPDATES = 64
#: Seconds to wait before trying again after a compaction failed or was abandoned.
COMPACT_RETRY_S = 600.0


class ShardLockedError(RuntimeError):
    """The shard directory is already open by another process or instance."""


class CompactionError(RuntimeError):
    """A compaction failed; the live shard is untouched."""


@dataclass(frozen=True)
class Compaction:
    """What one :meth:`EdgeVectorIndex.compact` did."""

    segments_before: int
    segments_after: int
    points: int
    #: updates made while the copy was merged, applied to it before the swap
    replayed_points: int
    #: the child process's wall seconds (the merge)
    merge_s: float
    #: seconds writes waited at the end (applying the replayed updates, the swap)
    swap_s: float


#: Segments the service's own (in-process) optimisations aim at, and the size at which one stops
#: growing, in KB: bounded, so each optimisation covers the new points, not the whole shard.
SEGMENTS = 8
MAX_SEGMENT_KB = 50_000


def shard_config(dim: int, *, search_threads: int | None = SEARCH_THREADS, segments: int = SEGMENTS,
                 max_segment_kb: int = MAX_SEGMENT_KB) -> qe.EdgeConfig:
    """The shard's configuration: a cosine dense vector of ``dim``, an IDF keyword vector, and
    the optimiser's targets. The embedded engine only optimises when asked, and holds the GIL
    while it does: HNSW is built once a segment passes ~10 MB of vectors, and the service's
    segments stop growing at ~50 MB (see the module notes for how they are merged)."""
    return qe.EdgeConfig(
        vectors={DENSE_VECTOR: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=qe.EdgeOptimizersConfig(
            default_segment_number=segments, indexing_threshold=INDEXING_THRESHOLD_KB, max_segment_size=max_segment_kb
        ),
        max_search_threads=search_threads,
    )


def compaction_config(dim: int, segments: int = COMPACT_SEGMENTS) -> qe.EdgeConfig:
    """The configuration a compaction loads the shard's copy with: segments merged into
    ``segments`` of any size."""
    return shard_config(dim, search_threads=1, segments=segments, max_segment_kb=COMPACT_MAX_SEGMENT_KB)


def _point_id(raw: Any) -> str:
    return str(raw) if isinstance(raw, uuid.UUID) else str(uuid.UUID(str(raw)))


class EdgeVectorIndex(VectorIndex):
    """:class:`~services.memory.search.ports.VectorIndex` on an embedded
    Qdrant Edge shard stored in the directory ``path``.

    ``ensure()`` opens the shard (creating it if ``path`` holds none) and adds
    any missing payload index; it must be awaited first. Opening an existing
    shard created with a different ``dim`` fails. ``tenant_scoped_idf``
    computes keyword IDF over the searching tenant's points only.
    """

    optimizes_itself = False  # the engine optimises only when asked (see maintain_index)

    def __init__(
        self, path: Path, dim: int, *, tenant_scoped_idf: bool = True,
        flush_every_points: int = FLUSH_EVERY_POINTS, flush_every_s: float = FLUSH_EVERY_S,
        search_threads: int | None = SEARCH_THREADS,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        if flush_every_points <= 0 or flush_every_s <= 0:
            raise ValueError("flush_every_points and flush_every_s must be positive")
        if search_threads is not None and search_threads < 1:
            raise ValueError("search_threads must be at least 1 (None: one per CPU, the engine's default)")
        #: threads the engine searches a shard's segments with (None: the engine's default, one per CPU)
        self.search_threads = search_threads
        #: flush once this many points were written since the last flush (see the module notes)
        self.flush_every_points = flush_every_points
        #: ... or once this many seconds passed since the last flush with writes pending
        self.flush_every_s = flush_every_s
        self._unflushed = 0  # points written (upserted, deleted, payloads set) since the last flush
        self._flushed_at = time.monotonic()
        #: flushes done since the shard was opened (the scheduled ones and those after optimize)
        self.flushes = 0
        self.path = Path(path)
        self.dim = dim
        self.tenant_scoped_idf = tenant_scoped_idf
        self._shard: qe.EdgeShard | None = None
        # Tenant-scoped IDF makes the engine count, per query term, the tenant's points holding it:
        # ~2.5 ms of a 3.3 ms keyword search at 100k points. While every point belongs to one
        # tenant, collection-wide IDF is exactly that tenant's IDF, so the count is skipped.
        self._only_tenant: str | None = None  # the one tenant with points, while there is one
        self._many_tenants = False  # points of two tenants were seen (until the shard is reopened)
        self._lock_file: IO[bytes] | None = None
        self._closed = False
        #: ``ensure()`` created the shard (there was none at ``path``): it holds nothing yet
        self.created = False
        #: dense searches scan every point instead of walking the HNSW graph (to tell the graph's
        #: approximation apart from a change of the vectors, e.g. comparing recalls around a replay)
        self.exact_search = False
        # Serialises writes and structural changes (open/drop/close): writes
        # apply in call order even when a big upsert runs in a thread.
        self._mutex = asyncio.Lock()
        # While a compaction merges a copy: every update made to the live shard since the copy,
        # in order, with the points it touched (None: no compaction is recording).
        self._journal: list[qe.UpdateOperation] | None = None
        self._journal_points = 0
        self._generation = 0  # bumped by drop() and close(): a compaction begun before is void
        self._compact_not_before = 0.0  # monotonic time before which no compaction is tried again
        self._compacting = False
        #: compactions swapped in since the shard was opened
        self.compactions = 0

    # --- lifecycle ---------------------------------------------------------

    def _config(self) -> qe.EdgeConfig:
        return shard_config(self.dim, search_threads=self.search_threads)

    def _has_shard(self) -> bool:
        return (self.path / "edge_config.json").exists() or (self.path / "segments").exists()

    def _sibling(self, suffix: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{suffix}")

    def _recover_compaction(self) -> None:
        """Holding the directory lock, before opening: undo what a compaction interrupted by a crash
        left. Between its two renames the shard sits at ``<path>.retired`` (whole, with its WAL);
        anything else it left is a copy and is deleted."""
        retired = self._sibling("retired")
        if retired.exists() and not self._has_shard():
            if self.path.exists():
                shutil.rmtree(self.path)
            os.rename(retired, self.path)
        self._delete_leftovers()

    def _delete_leftovers(self) -> None:
        """Delete the directories a compaction works in (its copy, the shard it replaced)."""
        for leftover in (self._sibling("retired"), self._sibling("compacting")):
            if leftover.exists():
                shutil.rmtree(leftover)

    def _acquire_lock(self) -> None:
        if self._lock_file is not None or fcntl is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        handle = open(lock_path, "a+b")  # noqa: SIM115 - held open until close()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise ShardLockedError(
                    f"vector shard {self.path} is already open (lock {lock_path} is held by another "
                    "process or EdgeVectorIndex instance)"
                ) from exc
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n".encode())
        handle.flush()
        self._lock_file = handle

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            if fcntl is not None:
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def _open(self) -> qe.EdgeShard:
        self._acquire_lock()
        try:
            self._recover_compaction()
            if self._has_shard():
                shard = qe.EdgeShard.load(str(self.path), self._config())
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                shard = qe.EdgeShard.create(str(self.path), self._config())
                self.created = True
        except Exception as exc:
            self._release_lock()
            if "WouldBlock" in str(exc):
                raise ShardLockedError(f"vector shard {self.path} is already open: {exc}") from exc
            raise RuntimeError(
                f"cannot open vector shard {self.path}: {exc} "
                "(if the embedding model or its dimension changed, stop the memory service and run "
                "`engram replay memory --rebuild-index`)"
            ) from exc
        existing = set(shard.info().payload_schema)
        for name in KEYWORD_FIELDS:
            if name in existing:
                continue
            schema: Any = (
                qe.KeywordIndexParams(is_tenant=True)
                if name == TENANT_FIELD
                else qe.PayloadSchemaType.Keyword
            )
            shard.update(qe.UpdateOperation.create_field_index(name, schema))
        tenants = [h.value for h in shard.facet(qe.FacetRequest(key=TENANT_FIELD, limit=2, exact=True)).hits if h.count]
        self._only_tenant = str(tenants[0]) if len(tenants) == 1 else None
        self._many_tenants = len(tenants) > 1
        return shard

    def _note_tenants(self, tenants: Sequence[str]) -> None:
        """Called before points of ``tenants`` are written (so no search can see them first)."""
        for tenant in tenants:
            if self._many_tenants or tenant == self._only_tenant:
                continue
            if self._only_tenant is None:
                self._only_tenant = tenant
            else:
                self._only_tenant, self._many_tenants = None, True

    async def ensure(self) -> None:
        """Open (or create) the shard and its payload indexes. Idempotent."""
        if self._closed:
            raise RuntimeError("EdgeVectorIndex is closed")
        if self._shard is not None:
            return
        async with self._mutex:
            if self._shard is None:
                self._shard = self._open()

    async def drop(self) -> None:
        """Delete the shard's files; ``ensure()`` recreates an empty shard."""
        if self._closed:
            raise RuntimeError("EdgeVectorIndex is closed")
        async with self._mutex:
            self._acquire_lock()  # never delete a shard another process has open
            if self._shard is not None:
                self._shard.close()
                self._shard = None
            self._generation += 1
            self._journal = None
            if self.path.exists():
                shutil.rmtree(self.path)
            self._delete_leftovers()
            self._only_tenant, self._many_tenants = None, False
            self._unflushed = 0

    async def close(self) -> None:
        """Flush and close the shard, release the directory lock. Idempotent."""
        async with self._mutex:
            self._generation += 1
            self._journal = None
            if self._shard is not None:
                shard, self._shard = self._shard, None
                shard.flush()
                shard.close()
                self._unflushed = 0
            self._release_lock()
            self._closed = True

    async def optimize(self) -> bool:
        """Run the engine's segment optimisers (HNSW build, vacuum); blocking,
        run in a thread. Returns True if anything was optimised. Not on the hot
        path: call it after bulk loads such as a replay."""
        async with self._mutex:
            optimised = await asyncio.to_thread(self._require().optimize)
            await self._flush_locked()  # the optimised segments are persisted, the WAL truncated
            return optimised

    def unindexed_points(self) -> int:
        """Points whose dense vector no HNSW index covers yet (searched by full scan until optimised).

        The engine counts sparse vectors as indexed from the start, so this assumes one sparse
        vector per point (true unless a memory has no keyword at all).
        """
        info = self._require().info()
        return max(0, min(info.points_count, 2 * info.points_count - info.indexed_vectors_count))

    def needs_optimize(self) -> bool:
        """Enough unindexed points for an optimisation to build an index (past the threshold)."""
        return self.unindexed_points() * self.dim * 4 >= INDEXING_THRESHOLD_KB * 1024

    def segments(self) -> int:
        """How many segments the shard has (each is searched on its own)."""
        return int(self._require().info().segments_count)

    def needs_compaction(self) -> bool:
        """Whether :meth:`compact` is worth running now: more than :data:`COMPACT_ABOVE_SEGMENTS`
        segments, at least :data:`COMPACT_MIN_POINTS` points, and no failed or abandoned
        compaction in the last :data:`COMPACT_RETRY_S` seconds."""
        if self._shard is None or time.monotonic() < self._compact_not_before:
            return False
        info = self._shard.info()
        return info.segments_count > COMPACT_ABOVE_SEGMENTS and info.points_count >= COMPACT_MIN_POINTS

    async def compact(self, segments: int = COMPACT_SEGMENTS) -> Compaction | None:
        """Merge the shard's segments into ``segments`` without stalling searches and writes for
        the merge (see the module notes). Returns what it did, or ``None`` if the index was
        dropped or closed meanwhile. Raises :class:`CompactionError` if the merge failed or too
        much was written meanwhile; the live shard is untouched then. Cancelling it stops the
        child process and deletes the copy. One at a time."""
        if self._compacting:
            raise CompactionError(f"vector shard {self.path} is already being compacted")
        self._compacting, generation = True, self._generation
        compacting = self._sibling("compacting")
        replayed: qe.EdgeShard | None = None
        try:
            async with self._mutex:
                if self._generation != generation:
                    return None
                before = self._require().info()
                await self._flush_locked()
                await asyncio.to_thread(self._make_copy, compacting)
                self._journal, self._journal_points = [], 0
            started = time.monotonic()
            merged = await _merge_in_child(compacting, self.dim, segments)
            merge_s = time.monotonic() - started
            # Apply what the live shard took meanwhile, most of it without holding writes back,
            # one update per thread hop (the engine holds the GIL for each).
            replayed = await asyncio.to_thread(qe.EdgeShard.load, str(compacting), compaction_config(self.dim, segments))
            applied = 0
            while self._journal is not None and len(self._journal) - applied > COMPACT_CATCH_UP_UPDATES:
                for operation in self._journal[applied:]:
                    await asyncio.to_thread(replayed.update, operation)
                    applied += 1
            async with self._mutex:
                if self._generation != generation or self._shard is None:
                    return None
                journal, replayed_points = self._journal, self._journal_points
                if journal is None:
                    raise CompactionError(
                        f"more than {COMPACT_MAX_REPLAYED_POINTS} points were written while vector shard "
                        f"{self.path} was compacted; it stays as it was and is compacted later"
                    )
                swap_started = time.monotonic()
                for operation in journal[applied:]:
                    await asyncio.to_thread(replayed.update, operation)
                await asyncio.to_thread(replayed.flush)
                self._journal = None
                copy, replayed = replayed, None
                self._swap_in(compacting, copy)
                self.compactions += 1
                swap_s = time.monotonic() - swap_started
                if self.segments() > COMPACT_ABOVE_SEGMENTS:  # the engine merged less than asked: not at once again
                    self._compact_not_before = time.monotonic() + COMPACT_RETRY_S
            await asyncio.to_thread(shutil.rmtree, self._sibling("retired"), True)
            return Compaction(segments_before=before.segments_count, segments_after=merged,
                              points=before.points_count, replayed_points=replayed_points, merge_s=merge_s,
                              swap_s=swap_s)
        except CompactionError:
            self._compact_not_before = time.monotonic() + COMPACT_RETRY_S
            raise
        finally:
            self._compacting, self._journal = False, None
            if replayed is not None:
                replayed.close()
            if compacting.exists():
                await asyncio.to_thread(shutil.rmtree, compacting, True)

    def _make_copy(self, compacting: Path) -> None:
        """Copy the flushed shard (holding the mutex: nothing writes it meanwhile) to ``compacting``."""
        size = _disk_bytes(self.path)
        free = shutil.disk_usage(self.path.parent).free
        if free < 2 * size:
            raise CompactionError(
                f"not enough free disk to compact vector shard {self.path}: its copy needs {size >> 20} MiB "
                f"and {free >> 20} MiB are free (keep twice the shard's size free)"
            )
        if compacting.exists():
            shutil.rmtree(compacting)
        shutil.copytree(self.path, compacting)

    def _swap_in(self, compacting: Path, copy: qe.EdgeShard) -> None:
        """Holding the mutex, with no await from the old shard's close to the new one's open (so no
        search sees the index without a shard): the merged copy becomes the shard."""
        copy.close()
        retired = self._sibling("retired")
        old, self._shard = self._require(), None
        old.close()
        os.rename(self.path, retired)
        os.rename(compacting, self.path)
        try:
            self._shard = qe.EdgeShard.load(str(self.path), self._config())
        except Exception:  # the copy does not open: put the shard back as it was
            os.rename(self.path, compacting)
            os.rename(retired, self.path)
            self._shard = qe.EdgeShard.load(str(self.path), self._config())
            raise
        self._unflushed, self._flushed_at = 0, time.monotonic()

    async def flush(self) -> None:
        """Persist segments now and let the engine truncate its WAL (which already makes updates
        crash-safe); from a worker thread, writes waiting meanwhile."""
        async with self._mutex:
            await self._flush_locked()

    async def flush_if_due(self) -> bool:
        """Flush if points were written and :attr:`flush_every_s` passed since the last flush;
        whether it flushed. Called on a schedule (the memory service's maintenance loop)."""
        if self._shard is None or not self._unflushed:
            return False
        if time.monotonic() - self._flushed_at < self.flush_every_s:
            return False
        async with self._mutex:
            if self._shard is None or not self._unflushed:
                return False
            await self._flush_locked()
            return True

    @property
    def unflushed_points(self) -> int:
        """Points written since the last flush (what a reopen after a crash would replay)."""
        return self._unflushed

    async def _flush_locked(self) -> None:
        await asyncio.to_thread(self._require().flush)
        self._unflushed = 0
        self._flushed_at = time.monotonic()
        self.flushes += 1

    async def _wrote_locked(self, points: int) -> None:
        """Count ``points`` written (holding the mutex); flush once enough are pending."""
        self._unflushed += points
        if self._unflushed >= self.flush_every_points:
            await self._flush_locked()

    def _require(self) -> qe.EdgeShard:
        if self._shard is None:
            raise RuntimeError("EdgeVectorIndex is not open: await ensure() first")
        return self._shard

    # --- writes ------------------------------------------------------------

    def _check_dim(self, point: VectorPoint) -> None:
        if len(point.dense) != self.dim:
            raise ValueError(
                f"point {point.id}: dense vector has {len(point.dense)} dimensions, index has {self.dim}"
            )

    @staticmethod
    def _to_point(point: VectorPoint) -> qe.Point:
        vector: dict[str, Any] = {DENSE_VECTOR: as_float_list(point.dense)}
        if not point.sparse.is_empty:
            vector[SPARSE_VECTOR] = qe.SparseVector(list(point.sparse.indices), list(point.sparse.values))
        return qe.Point(point.id, vector, dict(point.payload))

    def _update(self, shard: qe.EdgeShard, operation: qe.UpdateOperation, points: int) -> None:
        """Apply one update to the live shard (holding the mutex), and journal it while a
        compaction runs (see :meth:`compact`)."""
        shard.update(operation)
        if self._journal is not None:
            self._journal.append(operation)
            self._journal_points += points
            if self._journal_points > COMPACT_MAX_REPLAYED_POINTS:
                self._journal = None  # overflowed: the compaction is abandoned

    def _apply_upsert(self, shard: qe.EdgeShard, points: Sequence[VectorPoint]) -> None:
        self._update(shard, qe.UpdateOperation.upsert_points([self._to_point(p) for p in points]), len(points))

    async def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Insert or replace points (same id -> replaced, vectors and payload).

        All points are validated before any is written; a large upsert is
        applied in chunks from a worker thread (see the module notes).
        """
        if not points:
            return
        for point in points:
            self._check_dim(point)
        async with self._mutex:
            shard = self._require()
            self._note_tenants([str(p.payload[TENANT_FIELD]) for p in points])
            if len(points) <= THREAD_THRESHOLD:
                self._apply_upsert(shard, points)
            else:
                for start in range(0, len(points), UPSERT_CHUNK):
                    await asyncio.to_thread(self._apply_upsert, shard, points[start : start + UPSERT_CHUNK])
            await self._wrote_locked(len(points))

    async def delete(self, ids: Sequence[str]) -> None:
        """Delete points by id; unknown ids are ignored."""
        if not ids:
            return
        point_ids: list[Any] = [str(uuid.UUID(i)) for i in ids]
        async with self._mutex:
            self._update(self._require(), qe.UpdateOperation.delete_points(point_ids), len(point_ids))
            await self._wrote_locked(len(point_ids))

    async def set_payload(self, ids: Sequence[str], payload: dict[str, Any]) -> None:
        """Merge ``payload`` into the points' payloads. Changing ``tenant`` is refused."""
        if TENANT_FIELD in payload:
            raise ValueError("set_payload cannot change a point's tenant; re-upsert it instead")
        if not ids or not payload:
            return
        point_ids: list[Any] = [str(uuid.UUID(i)) for i in ids]
        async with self._mutex:
            self._update(self._require(), qe.UpdateOperation.set_payload(point_ids, dict(payload)), len(point_ids))
            await self._wrote_locked(len(point_ids))

    # --- reads -------------------------------------------------------------

    @staticmethod
    def _filter(search_filter: SearchFilter) -> qe.Filter:
        return qe.Filter(
            must=[
                qe.FieldCondition(key, match=qe.MatchValue(value))
                for key, value in search_filter.conditions().items()
            ]
        )

    def _sparse_params(self, search_filter: SearchFilter) -> qe.SearchParams | None:
        if not self.tenant_scoped_idf:
            return None
        if not self._many_tenants and self._only_tenant == search_filter.tenant:
            return None  # the collection is this tenant's: the same IDF without the count
        tenant_only = qe.Filter(
            must=[qe.FieldCondition(TENANT_FIELD, match=qe.MatchValue(search_filter.tenant))]
        )
        return qe.SearchParams(idf=qe.IdfParams(corpus=tenant_only))

    async def search(
        self,
        *,
        dense: Sequence[float] | None,
        sparse: SparseVector | None,
        filter: SearchFilter,
        limit: int,
        mode: SearchMode = "hybrid",
        prefetch_limit: int | None = None,
        with_keywords: bool = False,
        with_payload: bool = True,
    ) -> list[SearchHit]:
        """Search within ``filter`` (tenant always applied); see the port docs."""
        validate_search(dense=dense, sparse=sparse, filter=filter, limit=limit, mode=mode, dim=self.dim)
        shard = self._require()
        flt = self._filter(filter)
        dense_query = (
            qe.Query.Nearest(as_float_list(dense), using=DENSE_VECTOR) if dense is not None else None
        )
        pl = prefetch_limit if prefetch_limit is not None else default_prefetch_limit(limit)

        def request(keywords: SparseVector | None, size: int, with_keywords: bool) -> qe.QueryRequest:
            sparse_query = (
                qe.Query.Nearest(
                    qe.SparseVector(list(keywords.indices), list(keywords.values)), using=SPARSE_VECTOR
                )
                if keywords is not None and not keywords.is_empty
                else None
            )
            vectors = [SPARSE_VECTOR] if with_keywords else None
            exact = qe.SearchParams(exact=True) if self.exact_search else None
            if mode == "dense":
                return qe.QueryRequest(limit=size, query=dense_query, filter=flt, with_payload=with_payload,
                                       params=exact)
            if mode == "sparse":
                return qe.QueryRequest(
                    limit=size, query=sparse_query, filter=flt, with_payload=True,
                    params=self._sparse_params(filter),
                )
            prefetches = [qe.Prefetch(limit=pl, query=dense_query, filter=flt, params=exact)]
            if sparse_query is not None:
                prefetches.append(
                    qe.Prefetch(limit=pl, query=sparse_query, filter=flt, params=self._sparse_params(filter))
                )
            return qe.QueryRequest(
                limit=size,
                prefetches=prefetches,
                query=qe.Fusion.Rrf(k=RRF_K),  # type: ignore[arg-type]  # the stub's union omits Fusion.Rrf
                filter=flt,
                with_payload=True,
                with_vector=vectors,
            )

        if mode == "sparse" and (sparse is None or sparse.is_empty):
            return []
        with_keywords = with_keywords and mode == "hybrid"
        points = shard.query(request(sparse, limit, with_keywords))
        return [
            SearchHit(id=_point_id(p.id), score=float(p.score), payload=dict(p.payload or {}),
                      keywords=self._keywords_of(p) if with_keywords else None)
            for p in points
        ]

    @staticmethod
    def _keywords_of(point: qe.ScoredPoint) -> SparseVector:
        """The stored keyword vector of a hit read with ``with_vector`` (empty if it has none)."""
        vectors = point.vector if isinstance(point.vector, dict) else {}
        stored = vectors.get(SPARSE_VECTOR)
        if stored is None:
            return SparseVector((), ())
        return SparseVector(tuple(stored.indices), tuple(stored.values))

    async def count(self, filter: SearchFilter) -> int:
        """Exact number of points matching ``filter``."""
        return int(self._require().count(qe.CountRequest(exact=True, filter=self._filter(filter))))

    async def stored_dense(self, ids: Sequence[str], fields: Sequence[str]) -> dict[str, tuple[list[float], dict[str, Any]]]:
        """Each point's stored dense vector and payload ``fields`` (one retrieve)."""
        if not ids:
            return {}
        records = self._require().retrieve([_point_id(i) for i in ids], list(fields), [DENSE_VECTOR])
        return {_point_id(r.id): (list(r.vector[DENSE_VECTOR]), dict(r.payload or {}))
                for r in records if isinstance(r.vector, dict) and DENSE_VECTOR in r.vector}

    async def nearest(self, queries: Sequence[tuple[Sequence[float], SearchFilter]], limit: int) -> list[list[SearchHit]]:
        """Dense searches without payloads as one ``query_batch`` (see the port docs)."""
        if not queries:
            return []
        for dense, flt in queries:
            validate_search(dense=dense, sparse=None, filter=flt, limit=limit, mode="dense", dim=self.dim)
        exact = qe.SearchParams(exact=True) if self.exact_search else None
        batch = qe.QueryBatchRequest([
            qe.QueryRequest(limit=limit, query=qe.Query.Nearest(as_float_list(dense), using=DENSE_VECTOR),
                            filter=self._filter(flt), with_payload=False, params=exact)
            for dense, flt in queries
        ])
        return [[SearchHit(id=_point_id(p.id), score=float(p.score), payload={}) for p in points]
                for points in self._require().query_batch(batch)]

    async def fingerprints(self, ids: Sequence[str]) -> dict[str, str | None]:
        """The stored fingerprint of each of ``ids`` the shard holds (one retrieve, ~5 µs a point)."""
        if not ids:
            return {}
        records = self._require().retrieve([_point_id(i) for i in ids], [FINGERPRINT_FIELD], False)
        out: dict[str, str | None] = {}
        for record in records:
            value = (record.payload or {}).get(FINGERPRINT_FIELD)
            out[_point_id(record.id)] = str(value) if value is not None else None
        return out

    async def delete_tenant(self, tenant: str) -> None:
        """Delete every point of ``tenant`` (one filtered delete)."""
        flt = qe.Filter(must=[qe.FieldCondition(TENANT_FIELD, match=qe.MatchValue(tenant))])
        async with self._mutex:
            self._update(self._require(), qe.UpdateOperation.delete_points_by_filter(flt), 1)
            await self._wrote_locked(1)  # (a filtered delete: at least one WAL record)

    async def size(self) -> int:
        """How many points the shard holds (every tenant)."""
        return int(self._require().count(qe.CountRequest(exact=True)))

    async def point_ids(self) -> list[str]:
        """Every point's id, scrolled in pages of :data:`SCROLL_PAGE` without payloads or vectors."""
        shard, out = self._require(), []
        offset: Any = None
        while True:
            page, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, with_payload=False,
                                                         with_vector=False))
            out += [_point_id(record.id) for record in page]
            if offset is None:
                return out


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def _merge_in_child(compacting: Path, dim: int, segments: int) -> int:
    """Run ``services.memory.adapters.edge_compact`` on the copy; the segments it ended with."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.memory.adapters.edge_compact", str(compacting), "--dim", str(dim),
        "--segments", str(segments),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True, preexec_fn=die_with_parent(signal.SIGKILL),
    )
    try:
        out, err = await process.communicate()
    except BaseException:  # cancelled (the service stops): the child goes with it
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        raise
    if process.returncode != 0:
        tail = err.decode(errors="replace").strip()[-600:]
        raise CompactionError(f"compacting vector shard copy {compacting} failed (exit {process.returncode}): {tail}")
    return int(json.loads(out.decode().strip().splitlines()[-1])["segments"])
