"""Which points of the vector index are already what the event log says: fingerprints.

A memory's point (:func:`.indexing.point_for`) is a function of the memory's state, the embedder
(dense vector), the indexing recipe (sentence split, weights, keyword terms: :func:`.vector_cache.
recipe_fingerprint`) and the point's layout (which payload fields it carries). Each point carries a
fingerprint of all four (:data:`~.ports.FINGERPRINT_FIELD`), so a replay can rebuild the vector
index the way a build system rebuilds its outputs: every event is applied again and every point is
computed again *as a fingerprint*, and only a point whose fingerprint differs from the stored one
(or that is missing) is written; a point no memory of the log owns is deleted (the sweep). After
it the index holds exactly the points a rebuild from nothing would write — with their vectors
and HNSW graph kept where they were already right, so replaying an unchanged log costs no upsert
and no index build (the dominant cost at scale: docs/benchmarks-log.md, "Replay at scale").

A change of the embedder, the recipe or the layout changes every fingerprint, so every point is
rewritten; a point written before fingerprints existed has none and is rewritten once. What a
fingerprint cannot see is the engine's own files being damaged under an intact payload: for that
``engram replay memory --rebuild-index`` drops the index and writes every point.
"""

from __future__ import annotations

import functools
import hashlib
import json
from datetime import UTC, datetime
from uuid import UUID

from contracts.memory import MemoryState
from services.memory.domain.keywords import SparseVector
from services.memory.search.indexing import point_for
from services.memory.search.vector_cache import recipe_fingerprint

__all__ = ["fingerprint", "point_recipe"]

#: Bumped by hand for a change to what a point is made of that neither the state, the recipe nor
#: the probe of :func:`point_recipe` shows (e.g. how the engine is asked to store it).
POINT_VERSION = 1


@functools.cache
def point_recipe(embedder_model: str) -> str:
    """What every point of this process is made with: the embedder, the indexing recipe and the
    point's layout (the payload :func:`.indexing.point_for` builds for a probe memory), hashed."""
    when = datetime(2024, 3, 3, 12, 0, tzinfo=UTC)
    probe = MemoryState(id=UUID(int=1), tenant="probe", project="probe", importance=3, source="probe", version=1,
                        created_at=when, updated_at=when, content="probe", context="probe context")
    layout = point_for(probe, [0.0], SparseVector((1,), (1.0,))).payload
    recipe = [POINT_VERSION, embedder_model, recipe_fingerprint(), json.dumps(layout, sort_keys=True, default=str)]
    return hashlib.sha256(json.dumps(recipe).encode("utf-8")).hexdigest()[:16]


def fingerprint(recipe: str, state: MemoryState) -> str:
    """The fingerprint of ``state``'s point made with ``recipe`` (:func:`point_recipe`): equal
    fingerprints, equal points (vectors and payload)."""
    digest = hashlib.blake2b(recipe.encode("ascii"), digest_size=16)
    digest.update(state.model_dump_json().encode("utf-8"))
    return digest.hexdigest()


class ReplaySync:
    """What a replay knows of the vector index while it rebuilds it (no I/O: the projection asks
    the index and writes; this decides).

    ``keep``: the index was kept (only points whose fingerprint differs are written, a sweep
    removes points of no memory at the end); otherwise it was emptied and every point is written.
    The replay writes batch N while it reads and prepares batch N+1 (a pipeline one batch deep), so
    what the index answers for N+1 may predate N's writes: the fingerprints N is writing
    (``pending``, None for a delete) take precedence over what the index says.
    """

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.pending: dict[str, str | None] = {}
        self.live: set[str] = set()  # ids of memories active as of the events applied so far
        self.kept = 0  # points found right and left alone
        self.written = 0  # points written
        self.swept = 0  # points of no memory deleted at the end

    def to_write(self, ids: list[str], fingerprints: list[str], stored: dict[str, str | None]) -> list[int]:
        """Positions of the points to write, given the fingerprints the index holds for ``ids``."""
        if not self.keep:
            todo = list(range(len(ids)))
        else:
            pending = self.pending
            todo = [i for i, (pid, fp) in enumerate(zip(ids, fingerprints, strict=True))
                    if (pending[pid] if pid in pending else stored.get(pid)) != fp]
        self.kept += len(ids) - len(todo)
        self.written += len(todo)
        return todo

    def scheduled(self, active: dict[str, str], gone: list[str], written: dict[str, str]) -> None:
        """A batch's writes are under way: ``active`` (id → fingerprint) its active memories,
        ``gone`` the ids it deletes, ``written`` the points it writes."""
        self.live.update(active)
        self.live.difference_update(gone)
        self.pending = {**written, **dict.fromkeys(gone)}

    def stale(self, index_ids: list[str]) -> list[str]:
        """The points of ``index_ids`` no memory owns after the replay (to delete)."""
        out = [pid for pid in index_ids if pid not in self.live]
        self.swept += len(out)
        return out
