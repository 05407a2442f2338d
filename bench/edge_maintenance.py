"""The embedded shard under steady writes, before and after issue 33's maintenance fixes: its
write-ahead log, a reopen after a crash, and searches while it is optimised.

Each policy runs in a child process that writes ``--memories`` points into a fresh shard in
chunks of 1,000 (the points bench/recall_scale.py writes: LoCoMo turns' MiniLM vectors, perturbed,
with their keyword vectors and views), times one hybrid search after every chunk (as recall
searches for late interaction, the question's vector a stored turn's), and then dies without
closing the shard (``os._exit``: a crash). The parent then measures the shard's WAL and its
reopen time (the WAL replay). Policies:

* ``before``: the shard is never flushed (the old adapter flushed only in ``close()``), and the
  memory service optimised only after 5 s without commands, which steady writes never give: one
  optimisation at the end, over every point;
* ``after``: the adapter's flush schedule (every :data:`FLUSH_EVERY_POINTS` points) and the
  maintenance loop's steady rule: optimise once :data:`STEADY_OPTIMIZE_POINTS` points wait;
* ``compacted``: ``after``, and, as the maintenance loop does, a compaction beside the writes
  whenever the shard has too many segments (``EdgeVectorIndex.compact``: a child process merges a
  copy; no optimisation meanwhile).

``--write-rate`` paces the writes (points a second; default: as fast as they go). A compaction
gives up if more than 50,000 points are written while it runs, which unpaced writes (~8,000 a
second) reach; the service's saves come at ~50 a second.

After the writes (and any compaction running then), 300 searches measure what one costs at rest
(CPU and wall), with the segments the policy left.

Every optimisation runs as the service runs it (``await index.optimize()``, a worker thread) while
a task on the event loop issues a search every 50 ms: each search's latency, counted from when it
was due, is what a recall arriving during the optimisation waits.

    nice -n 15 python bench/edge_maintenance.py --memories 100000
    python bench/edge_maintenance.py --memories 100000 --policies after,compacted --write-rate 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import percentiles, record  # noqa: E402
from recall_scale import CHUNK, PROJECT, SCOPE, TENANT, disk_bytes, point_id  # noqa: E402

from services.memory.adapters.vectors_edge import FLUSH_EVERY_POINTS, EdgeVectorIndex  # noqa: E402
from services.memory.main import STEADY_OPTIMIZE_POINTS  # noqa: E402
from services.memory.search.late import LATE_CANDIDATES, late_prefetch_limit  # noqa: E402
from services.memory.search.ports import VectorPoint  # noqa: E402

NEVER = 10**12


def vectors_and_templates() -> tuple[np.ndarray, list[Any]]:
    """LoCoMo turns' MiniLM vectors (cached in the temp folder, as bench/recall_scale.py does) and
    the payload and keyword vector of each turn's point."""
    from datetime import UTC, datetime
    from uuid import UUID

    from common import locomo_turns

    from contracts.memory import MemoryState
    from services.memory.adapters.embedder import MiniLMEmbedder
    from services.memory.search.indexing import keyword_vector, point_for

    turns = [t for _, _, t in locomo_turns()]
    cache = Path(tempfile.gettempdir()) / f"engram-recall-scale-{len(turns)}-minilm.npy"
    if cache.exists():
        base = np.load(cache)
    else:
        embedder = MiniLMEmbedder(cache_size=0)
        base = np.concatenate([embedder.embed(turns[i : i + 64]) for i in range(0, len(turns), 64)]).astype(np.float32)
        np.save(cache, base)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    states = [MemoryState(id=UUID(int=i + 1), tenant=TENANT, project=PROJECT, content=text, created_at=now,
                          updated_at=now) for i, text in enumerate(turns)]
    return base, [point_for(s, [0.0], keyword_vector(s)) for s in states]


async def optimise_under_searches(index: EdgeVectorIndex, base: np.ndarray, templates: list[Any],
                                  rng: np.random.Generator, *, flush: bool) -> tuple[float, list[float]]:
    """One ``optimize()`` as the service runs it, a search due every 50 ms meanwhile: its seconds
    and each search's latency (ms) from when it was due."""
    done = asyncio.Event()
    latencies: list[float] = []

    async def searches() -> None:
        due = time.perf_counter()
        while not done.is_set():
            await one_search(index, base, templates, rng)
            latencies.append((time.perf_counter() - due) * 1000)
            due += 0.05
            await asyncio.sleep(max(0.0, due - time.perf_counter()))

    task = asyncio.create_task(searches())
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    if flush:
        await index.optimize()  # (it flushes after optimising)
    else:  # the old adapter's optimize(): no flush after it
        await asyncio.to_thread(index._require().optimize)
    seconds = time.perf_counter() - t0
    done.set()
    await task
    return seconds, latencies


async def one_search(index: EdgeVectorIndex, base: np.ndarray, templates: list[Any], rng: np.random.Generator) -> None:
    k = int(rng.integers(len(base)))
    await index.search(dense=base[k].tolist(), sparse=templates[k].sparse, filter=SCOPE, limit=LATE_CANDIDATES,
                       mode="hybrid", prefetch_limit=late_prefetch_limit(LATE_CANDIDATES))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def at_rest(index: EdgeVectorIndex, base: np.ndarray, templates: list[Any], n: int = 300) -> dict[str, float]:
    """What a search costs once the writes stopped and the service's idle rule optimised what
    waited: CPU ms a search (this process) and wall p50."""
    if index.needs_optimize():
        await index.optimize()
    rng = np.random.default_rng(3)
    walls = []
    cpu0 = cpu_s()
    for _ in range(n):
        t = time.perf_counter()
        await one_search(index, base, templates, rng)
        walls.append((time.perf_counter() - t) * 1000)
    return {"cpu_ms": (cpu_s() - cpu0) / n * 1000, "wall_p50": float(np.percentile(walls, 50)),
            "segments": index.segments(), "unindexed": index.unindexed_points()}


async def child(policy: str, path: Path, memories: int, write_rate: float) -> None:
    base, templates = vectors_and_templates()
    after = policy in ("after", "compacted")
    index = EdgeVectorIndex(path, dim=base.shape[1], flush_every_points=FLUSH_EVERY_POINTS if after else NEVER,
                            flush_every_s=NEVER)
    await index.ensure()
    rng = np.random.default_rng(7)
    search_ms: list[float] = []
    optimisations: list[dict[str, Any]] = []
    compaction: asyncio.Task[Any] | None = None
    compactions: list[dict[str, Any]] = []
    during_compaction: list[float] = []

    def compaction_done(task: asyncio.Task[Any]) -> None:
        error = task.exception()
        compactions.append({"error": str(error)} if error else dict(task.result().__dict__))

    t_start, done = time.perf_counter(), 0
    while done < memories:
        n = min(CHUNK, memories - done)
        idx = np.arange(done, done + n) % len(base)
        vectors = base[idx] + rng.standard_normal((n, base.shape[1]), dtype=np.float32) * 0.02
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await index.upsert([VectorPoint(id=point_id(done + k), dense=vectors[k].tolist(), sparse=templates[t].sparse,
                                        payload=templates[t].payload) for k, t in enumerate(idx)])
        done += n
        t = time.perf_counter()
        await one_search(index, base, templates, rng)
        search_ms.append((time.perf_counter() - t) * 1000)
        if compaction is not None:
            during_compaction.append(search_ms[-1])
            if compaction.done():
                compaction_done(compaction)
                compaction = None
        if compaction is None and after and index.unindexed_points() >= STEADY_OPTIMIZE_POINTS:
            waiting = index.unindexed_points()
            seconds, during = await optimise_under_searches(index, base, templates, rng, flush=True)
            optimisations.append({"points": waiting, "s": seconds, "during": during})
        elif compaction is None and policy == "compacted" and index.needs_compaction():
            compaction = asyncio.create_task(index.compact())
        if write_rate:
            await asyncio.sleep(max(0.0, t_start + done / write_rate - time.perf_counter()))
    stream_s = time.perf_counter() - t_start
    if compaction is not None:
        with contextlib.suppress(Exception):
            await compaction
        compaction_done(compaction)
    wal_open = disk_bytes(path / "wal")
    if not after:  # the writes stop: 5 s later the old loop optimises everything at once
        waiting = index.unindexed_points()
        seconds, during = await optimise_under_searches(index, base, templates, rng, flush=False)
        optimisations.append({"points": waiting, "s": seconds, "during": during})
    rest = await at_rest(index, base, templates)
    print(json.dumps({"search_ms": search_ms, "optimisations": optimisations, "stream_s": stream_s,
                      "compactions": compactions, "during_compaction": during_compaction, "at_rest": rest,
                      "wal_open": wal_open, "flushes": index.flushes, "unflushed": index.unflushed_points,
                      "disk": disk_bytes(path), "wal_at_crash": disk_bytes(path / "wal")}), flush=True)
    os._exit(0)  # a crash: no close, no flush


async def reopen(path: Path, dim: int) -> float:
    t0 = time.perf_counter()
    index = EdgeVectorIndex(path, dim=dim)
    await index.ensure()
    seconds = time.perf_counter() - t0
    await index.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--policies", default="before,after", help="of before, after, compacted")
    parser.add_argument("--write-rate", type=float, default=0.0, help="points written a second (0: unpaced)")
    parser.add_argument("--child", default="")
    parser.add_argument("--path", type=Path, default=None)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.path, args.memories, args.write_rate))
        return
    lines = [f"{args.memories:,} points written in chunks of {CHUNK:,}, one hybrid search after each chunk, then a "
             f"crash; after: flush every {FLUSH_EVERY_POINTS:,} points, optimise once {STEADY_OPTIMIZE_POINTS:,} "
             "wait; before: never flushed, optimised once at the end; compacted: after, and segments merged in a "
             "child process when there are too many"
             + (f"; writes paced at {args.write_rate:,.0f} points/s" if args.write_rate else "")]
    for policy in args.policies.split(","):
        path = Path(tempfile.mkdtemp(prefix=f"engram-maint-{policy}-")) / "shard"
        out = subprocess.run([sys.executable, __file__, "--child", policy, "--path", str(path),
                              "--memories", str(args.memories), "--write-rate", str(args.write_rate)],
                             check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        reopen_s = asyncio.run(reopen(path, 384))
        shutil.rmtree(path.parent, ignore_errors=True)
        s = percentiles(r["search_ms"])
        opt = r["optimisations"]
        during = [ms for o in opt for ms in o["during"]]
        d = percentiles(during) if during else {"p50": 0.0, "p99": 0.0}
        sizes = ", ".join(f"{o['points']:,}" for o in opt)
        times = ", ".join(f"{o['s']:.1f}" for o in opt)
        lines.append(
            f"{policy}: {len(opt)} optimisation(s) of {sizes} points taking {times} s (longest {max((o['s'] for o in opt), default=0.0):.1f} s); "
            f"searches during them: {len(during)}, p50 {d['p50']:.0f} ms, longest {max(during, default=0):,.0f} ms; "
            f"search after each chunk p50 {s['p50']:.1f} · p95 {s['p95']:.1f} · max {max(r['search_ms']):.1f} ms; "
            f"writes + searches {r['stream_s']:.0f} s; flushes {r['flushes']}; WAL at the crash "
            f"{r['wal_at_crash'] / 2**20:,.0f} MiB ({r['unflushed']:,} points not flushed), shard "
            f"{r['disk'] / 2**20:,.0f} MiB; reopen after the crash {reopen_s:.2f} s; at rest "
            f"{r['at_rest']['segments']} segments ({r['at_rest']['unindexed']:,} points unindexed), a search "
            f"{r['at_rest']['cpu_ms']:.2f} CPU-ms, wall p50 {r['at_rest']['wall_p50']:.2f} ms")
        print(lines[-1], flush=True)
        for c in r["compactions"]:
            lines.append(f"  compaction: {c}")
            print(lines[-1], flush=True)
        if r["during_compaction"]:
            c = percentiles(r["during_compaction"])
            lines.append(f"  searches during compactions: {len(r['during_compaction'])}, p50 {c['p50']:.1f} · "
                         f"p95 {c['p95']:.1f} · max {max(r['during_compaction']):.1f} ms")
            print(lines[-1], flush=True)
    if not args.no_record:
        record(f"The embedded shard under steady writes (bench/edge_maintenance.py), {args.memories:,} points", lines)


if __name__ == "__main__":
    main()
