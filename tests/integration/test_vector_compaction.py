"""The embedded vector shard's compaction (services/memory/adapters/vectors_edge.py, ``compact``):
its segments are merged in a process of its own while the live shard keeps taking searches and
writes, the writes made meanwhile reach the merged shard, and a crash, a cancel or a failure at
any step leaves one whole shard."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest

import services.memory.adapters.vectors_edge as vectors_edge
from services.memory.adapters.vectors_edge import CompactionError, EdgeVectorIndex
from services.memory.domain.keywords import document_vector, query_vector
from services.memory.search.ports import SearchFilter, VectorPoint

pytestmark = pytest.mark.integration

DIM = 16
ROUNDS = 6
PER_ROUND = 400


def make_points(rng: np.random.Generator, n: int, tenant: str, word: str) -> list[VectorPoint]:
    return [VectorPoint(id=str(uuid.uuid4()), dense=rng.standard_normal(DIM).tolist(),
                        sparse=document_vector(f"{word} item{i}"), payload={"tenant": tenant, "status": "active"})
            for i in range(n)]


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each in-process optimisation of a few hundred points makes a segment of its own (the
    service's threshold is 10 MB of vectors), so a test shard has many segments quickly."""
    monkeypatch.setattr(vectors_edge, "INDEXING_THRESHOLD_KB", 10)
    monkeypatch.setattr(vectors_edge, "COMPACT_MIN_POINTS", 100)


async def segmented_shard(path: Path, rng: np.random.Generator) -> tuple[EdgeVectorIndex, list[VectorPoint]]:
    index = EdgeVectorIndex(path, DIM)
    await index.ensure()
    points: list[VectorPoint] = []
    for r in range(ROUNDS):
        batch = make_points(rng, PER_ROUND, "alice" if r % 2 else "bob", f"round{r}")
        await index.upsert(batch)
        await index.optimize()
        points += batch
    return index, points


async def state(index: EdgeVectorIndex) -> dict[str, tuple[str | None, str | None]]:
    """Every point's tenant and status (what a search filters on)."""
    ids = await index.point_ids()
    shard = index._require()
    records = shard.retrieve(ids, ["tenant", "status"], False)
    return {str(uuid.UUID(str(r.id))): (r.payload.get("tenant"), r.payload.get("status")) for r in records}


def children_of_this_process_naming(path: Path) -> list[int]:
    """Pids of live processes whose command line names ``path`` (the compaction's child)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            status = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if str(path) in cmdline and status[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


async def test_compaction_merges_segments_and_keeps_every_write_made_meanwhile(
    tmp_path: Path, small_segments: None
) -> None:
    rng = np.random.default_rng(7)
    path = tmp_path / "vectors"
    index, points = await segmented_shard(path, rng)
    carol = make_points(rng, 30, "carol", "purged")  # a user purged while the copy is merged
    await index.upsert(carol)
    assert index.segments() > vectors_edge.COMPACT_ABOVE_SEGMENTS and index.needs_compaction()
    probe = points[5]
    flt = SearchFilter(tenant="bob")

    stop = asyncio.Event()
    written: list[VectorPoint] = []
    deleted: list[str] = []
    forgotten: list[str] = []
    searches: list[int] = []

    async def writes() -> None:
        i = 0
        while not stop.is_set():
            batch = make_points(rng, 3, "alice", f"during{i}")
            await index.upsert(batch)
            written.extend(batch)
            await index.delete([points[10 + i].id])
            deleted.append(points[10 + i].id)
            await index.set_payload([points[200 + i].id], {"status": "forgotten"})
            forgotten.append(points[200 + i].id)
            if i == 3:
                await index.delete_tenant("carol")
            i += 1
            await asyncio.sleep(0.005)

    async def reads() -> None:
        while not stop.is_set():  # the live shard answers all along
            hits = await index.search(dense=probe.dense, sparse=None, filter=flt, limit=3, mode="dense")
            searches.append(len(hits))
            await asyncio.sleep(0.005)

    tasks = [asyncio.create_task(writes()), asyncio.create_task(reads())]
    report = await index.compact()
    stop.set()
    await asyncio.gather(*tasks)

    assert report is not None
    assert report.segments_before > vectors_edge.COMPACT_ABOVE_SEGMENTS
    assert report.segments_after <= vectors_edge.COMPACT_SEGMENTS
    assert report.replayed_points > 0 and written and deleted and len(forgotten) > 3
    assert searches and all(n == 3 for n in searches)
    assert index.compactions == 1
    # at most the merged segments and the appendable one the replayed writes went to
    assert index.segments() <= vectors_edge.COMPACT_SEGMENTS + 1

    expected = {p.id: (p.payload["tenant"], "active") for p in points + written}
    for gone in deleted:
        expected.pop(gone, None)
    for id_ in forgotten:
        if id_ in expected:
            expected[id_] = (expected[id_][0], "forgotten")
    assert await state(index) == expected  # carol's points among them neither: her purge was replayed
    assert await index.count(SearchFilter(tenant="carol")) == 0
    hits = await index.search(dense=probe.dense, sparse=None, filter=flt, limit=1, mode="dense")
    assert hits[0].id == probe.id
    hits = await index.search(dense=None, sparse=query_vector("during0 item0"),
                              filter=SearchFilter(tenant="alice"), limit=3, mode="sparse")
    assert written[0].id in {h.id for h in hits}

    await index.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors", "vectors.lock"]
    reopened = EdgeVectorIndex(path, DIM)
    await reopened.ensure()
    assert await state(reopened) == expected
    await reopened.close()


async def test_a_compaction_with_too_many_writes_meanwhile_is_abandoned(
    tmp_path: Path, small_segments: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors_edge, "COMPACT_MAX_REPLAYED_POINTS", 20)
    rng = np.random.default_rng(8)
    path = tmp_path / "vectors"
    index, points = await segmented_shard(path, rng)
    segments = index.segments()
    stop = asyncio.Event()
    written: list[VectorPoint] = []

    async def writes() -> None:
        while not stop.is_set():
            batch = make_points(rng, 5, "alice", "flood")
            await index.upsert(batch)
            written.extend(batch)
            await asyncio.sleep(0.005)

    task = asyncio.create_task(writes())
    with pytest.raises(CompactionError, match="more than 20 points were written"):
        await index.compact()
    stop.set()
    await task
    assert index.segments() >= segments and index.compactions == 0
    assert await index.size() == len(points) + len(written)
    assert not index.needs_compaction()  # not tried again at once
    assert not (tmp_path / "vectors.compacting").exists()
    await index.close()


async def test_cancelling_a_compaction_stops_its_process_and_deletes_the_copy(
    tmp_path: Path, small_segments: None
) -> None:
    rng = np.random.default_rng(9)
    path = tmp_path / "vectors"
    index, points = await segmented_shard(path, rng)
    copy = tmp_path / "vectors.compacting"
    task = asyncio.create_task(index.compact())
    for _ in range(500):  # until the child runs
        await asyncio.sleep(0.01)
        if children_of_this_process_naming(copy):
            break
    assert children_of_this_process_naming(copy), "the compaction's process never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert children_of_this_process_naming(copy) == []
    assert not copy.exists()
    assert await index.size() == len(points) and index.compactions == 0
    # and the next one runs
    report = await index.compact()
    assert report is not None and report.segments_after <= vectors_edge.COMPACT_SEGMENTS
    await index.close()


async def test_a_failed_merge_leaves_the_live_shard_as_it_was(tmp_path: Path, small_segments: None) -> None:
    rng = np.random.default_rng(10)
    index, points = await segmented_shard(tmp_path / "vectors", rng)
    with pytest.raises(CompactionError, match="failed"):  # the child refuses 0 segments: exits 2
        await index.compact(segments=0)
    assert await index.size() == len(points)
    assert not (tmp_path / "vectors.compacting").exists()
    await index.close()


async def test_what_a_crash_during_a_compaction_leaves_is_cleaned_up_on_open(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    path = tmp_path / "vectors"
    index = EdgeVectorIndex(path, DIM)
    await index.ensure()
    points = make_points(rng, 50, "alice", "kept")
    await index.upsert(points)
    await index.close()

    async def reopen() -> tuple[int, bool]:
        """Open the shard as the service does after a crash: its size, and whether it was created."""
        index = EdgeVectorIndex(path, DIM)
        await index.ensure()
        try:
            return await index.size(), index.created
        finally:
            await index.close()

    # a crash while the copy was merged: the copy is left beside the shard
    shutil.copytree(path, tmp_path / "vectors.compacting")
    assert await reopen() == (50, False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors", "vectors.lock"]

    # a crash between the swap's two renames: the shard is at <path>.retired, the copy beside it
    os.rename(path, tmp_path / "vectors.retired")
    shutil.copytree(tmp_path / "vectors.retired", tmp_path / "vectors.compacting")
    assert await reopen() == (50, False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors", "vectors.lock"]

    # a crash after the swap: the old shard is still at <path>.retired
    shutil.copytree(path, tmp_path / "vectors.retired")
    assert await reopen() == (50, False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors", "vectors.lock"]
