"""Recall at scale, in-process: how the embedded vector index grows to N memories in one tenant
and where the time of one recall goes (issue 33).

Builds N memories in one tenant in the embedded vector index (qdrant-edge) with the points the
memory service writes (:func:`point_for`: the dense vector, the keyword vector and the memory's
view as payload). The texts are LoCoMo's dialogue turns, embedded once; every copy is the turn's
vector with a small random perturbation, generated chunk by chunk, so every point is distinct and
no second copy of the vectors is held. At each checkpoint (default 100k, 250k, 500k, 1M, those not
above ``--memories``) it prints and records:

* insert throughput since the last checkpoint (the index's upserts alone: the encoders' cost of a
  save is bench/save_throughput.py's), the process's RSS, the index folder's size on disk and its
  segment count;
* recall's search before the optimiser has run over the new points (the new points are scanned),
  then the optimiser's time (HNSW build of the new segments, merges), then query embedding and
  hybrid search (dense + keyword, RRF, tenant filter) as the shipped recall runs it (its best 50
  for late interaction, each leg's best 100) and with keyword feedback at limit 10, p50/p95/p99.

``--stages-at 100000`` adds, at that checkpoint, the split of one recall into its in-process
stages, CPU and wall each: query embedding, late-interaction query encoding, hybrid search, the
hits' views from the payloads, reading the 50 candidates' stored token vectors from Postgres (a
scratch table filled with the real packed tokens of every point so far: needs
``ENGRAM_DATABASE_URL``, else the stage is left out) and scoring them (MaxSim, fusion). What a
recall costs beyond these (the bus, serialisation, the gateway) is bench/mcp_bench.py's figure
minus this split.

    nice -n 15 python bench/recall_scale.py --memories 1000000 --stages-at 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, locomo, locomo_turns, percentiles, record  # noqa: E402

from contracts.memory import MemoryState, RecallHit  # noqa: E402
from services.memory.adapters.embedder import MiniLMEmbedder  # noqa: E402
from services.memory.adapters.vectors_edge import EdgeVectorIndex  # noqa: E402
from services.memory.domain.keywords import query_vector  # noqa: E402
from services.memory.search.indexing import keyword_vector, point_for, reranked, view_of  # noqa: E402
from services.memory.search.late import (  # noqa: E402
    LATE_CANDIDATES,
    document_matrix,
    late_document,
    late_prefetch_limit,
    maxsim_packed,
    pack,
)
from services.memory.search.ports import SearchFilter, VectorPoint  # noqa: E402
from services.memory.search.recall import search  # noqa: E402

CHUNK = 1000
TENANT, PROJECT = "bench", "bench"
SCOPE = SearchFilter(tenant=TENANT, project=PROJECT)


def point_id(i: int) -> str:
    """The i-th point's id (deterministic, so the scratch token table can name the same ids)."""
    return str(uuid.UUID(int=(0xB5 << 120) | i))


def disk_bytes(path: Path) -> int:
    """Bytes the folder takes on disk (allocated blocks, as du)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def segments(path: Path) -> int:
    folder = path / "segments"
    return sum(1 for p in folder.iterdir() if p.is_dir()) if folder.exists() else 0


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


class Stage:
    """Wall and CPU (the whole process's: the stages run one after another) samples of one stage."""

    def __init__(self, name: str) -> None:
        self.name, self.wall, self.cpu = name, [], []  # type: ignore[var-annotated]

    async def run(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        w, c = time.perf_counter(), time.process_time()
        out = await fn()
        self.cpu.append((time.process_time() - c) * 1000)
        self.wall.append((time.perf_counter() - w) * 1000)
        return out

    def line(self) -> str:
        w, c = percentiles(self.wall), percentiles(self.cpu)
        return (f"{self.name}: wall p50 {w['p50']:.2f} · p95 {w['p95']:.2f} ms; "
                f"CPU p50 {c['p50']:.2f} · p95 {c['p95']:.2f} · mean {statistics.fmean(self.cpu):.2f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--checkpoints", default="100000,250000,500000,1000000",
                        help="comma-separated sizes at which to measure (those above --memories are dropped; "
                             "--memories itself is always one)")
    parser.add_argument("--queries", type=int, default=300, help="questions timed at each checkpoint")
    parser.add_argument("--scan-queries", type=int, default=50, help="questions timed before the optimiser runs")
    parser.add_argument("--stages-at", type=int, default=0, help="checkpoint at which to split a recall into stages")
    parser.add_argument("--dir", type=Path, default=None, help="where the index goes (default: a temp folder)")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    checkpoints = sorted({c for c in (int(x) for x in args.checkpoints.split(",") if x) if c < args.memories}
                         | {args.memories})
    proc = psutil.Process()
    lines: list[str] = []
    started = time.perf_counter()

    def say(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    def finish(reason: str | None = None) -> None:
        if reason:
            say(f"stopped early ({reason}) after {time.perf_counter() - started:,.0f}s")
        if not args.no_record and lines:
            record(f"Recall at scale (in-process), {args.memories:,} memories, checkpoints", lines)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)

    turns = [t for _, _, t in locomo_turns()]
    questions = list(dict.fromkeys(qa["question"] for conv in locomo() for qa in conv["qa"]))
    measured, warm = questions[: args.queries], questions[-30:]
    embedder = MiniLMEmbedder(cache_size=0)
    cache = Path(tempfile.gettempdir()) / f"engram-recall-scale-{len(turns)}-minilm.npy"  # the turns' vectors
    t0 = time.perf_counter()
    if cache.exists():
        base = np.load(cache)
        embed_rate = float("nan")
    else:
        base = np.concatenate([embedder.embed(turns[i : i + 64]) for i in range(0, len(turns), 64)]).astype(np.float32)
        embed_rate = len(turns) / (time.perf_counter() - t0)
        np.save(cache, base)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    states = [MemoryState(id=uuid.UUID(int=i + 1), tenant=TENANT, project=PROJECT, content=text, created_at=now,
                          updated_at=now) for i, text in enumerate(turns)]
    # the payload and keyword vector each turn's points carry (the id is the point's, not the payload's)
    templates = [point_for(s, [0.0], keyword_vector(s)) for s in states]
    say(f"memories in one tenant: {args.memories:,} (LoCoMo's {len(turns):,} turns, perturbed copies); "
        f"points as the memory service writes them (view in the payload); embedder {embed_rate:.0f} texts/s "
        f"(batch 64); RSS before the index {mib(proc.memory_info().rss)}")

    folder = args.dir or Path(tempfile.mkdtemp(prefix="engram-scale-"))
    index = EdgeVectorIndex(folder / "shard", dim=embedder.dim)
    await index.ensure()
    rng = np.random.default_rng(7)
    done, load_total, optimise_total = 0, 0.0, 0.0
    stages_pool = None
    try:
        for target in checkpoints:
            t0 = time.perf_counter()
            first = done
            while done < target:
                n = min(CHUNK, target - done)
                idx = np.arange(done, done + n) % len(turns)
                vectors = base[idx] + rng.standard_normal((n, embedder.dim), dtype=np.float32) * 0.02
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                points = [VectorPoint(id=point_id(done + k), dense=vectors[k].tolist(), sparse=templates[t].sparse,
                                      payload=templates[t].payload) for k, t in enumerate(idx)]
                await index.upsert(points)
                done += n
                if done % 50_000 == 0 and done != target:
                    print(f"  … {done:,} points, {time.perf_counter() - started:,.0f}s", flush=True)
            load_s = time.perf_counter() - t0
            load_total += load_s
            rss_loaded, disk_loaded = proc.memory_info().rss, disk_bytes(folder)
            unindexed = index.unindexed_points()
            _, scan = await measure(embedder, index, measured[: args.scan_queries], late=True)
            t0 = time.perf_counter()
            await index.optimize()
            optimise_s = time.perf_counter() - t0
            optimise_total += optimise_s
            for q in warm:
                await measure(embedder, index, [q], late=True)
            embed_ms, late_search = await measure(embedder, index, measured, late=True)
            _, feedback = await measure(embedder, index, measured, late=False)
            say(f"**{done:,}**: inserted {done - first:,} at {(done - first) / load_s:,.0f} points/s "
                f"(cumulative {done / load_total:,.0f}/s; with the optimiser's time {done / (load_total + optimise_total):,.0f}/s); "
                f"RSS {mib(rss_loaded)} loaded, {mib(proc.memory_info().rss)} after optimise; index on disk "
                f"{mib(disk_loaded)} loaded, {mib(disk_bytes(folder))} after optimise, {segments(folder / 'shard')} segments; "
                f"optimise (HNSW of {unindexed:,} new points, merges) {optimise_s:.1f}s "
                f"(cumulative {optimise_total:.1f}s); elapsed {time.perf_counter() - started:,.0f}s")
            say(f"  {done:,}: recall's search before the optimiser (new points scanned): {fmt(percentiles(scan))}")
            say(f"  {done:,}: query embedding (MiniLM int8): {fmt(percentiles(embed_ms))}")
            say(f"  {done:,}: hybrid search as recall runs it (best {LATE_CANDIDATES}, each leg's best "
                f"{late_prefetch_limit(LATE_CANDIDATES)}): {fmt(percentiles(late_search))}")
            say(f"  {done:,}: hybrid search, limit 10 with keyword feedback: {fmt(percentiles(feedback))}")
            if args.stages_at and done == args.stages_at:
                stages_pool = await stage_split(embedder, index, turns, states, done, measured, warm, say)
    except KeyboardInterrupt as e:
        finish(str(e) or "interrupted")
        raise SystemExit(130) from None
    finally:
        if stages_pool is not None:
            await stages_pool.close()
        await index.close()
    say(f"total: {time.perf_counter() - started:,.0f}s wall; index folder {folder}")
    finish()


async def measure(embedder: MiniLMEmbedder, index: EdgeVectorIndex, queries: list[str], *, late: bool
                  ) -> tuple[list[float], list[float]]:
    """Query embedding and hybrid search times (ms) for each query: as recall searches for late
    interaction (``late``), else limit 10 with keyword feedback."""
    embed_ms, search_ms = [], []
    for q in queries:
        t = time.perf_counter()
        dense = embedder.embed_query(q).tolist()
        sparse = query_vector(q)
        embed_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        if late:
            await search(index, dense=dense, sparse=sparse, limit=LATE_CANDIDATES, mode="hybrid", filter=SCOPE,
                         prefetch_limit=late_prefetch_limit(LATE_CANDIDATES))
        else:
            await search(index, dense=dense, sparse=sparse, limit=10, mode="hybrid", filter=SCOPE,
                         keyword_feedback=True)
        search_ms.append((time.perf_counter() - t) * 1000)
    return embed_ms, search_ms


async def stage_split(embedder: MiniLMEmbedder, index: EdgeVectorIndex, turns: list[str], states: list[MemoryState],
                      count: int, measured: list[str], warm: list[str], say: Callable[[str], None]) -> Any:
    """One recall's in-process stages at ``count`` points, each timed alone (CPU and wall)."""
    from services.memory.adapters.late_encoder import ColbertEncoder

    late = ColbertEncoder()
    pool = None
    database_url = os.environ.get("ENGRAM_DATABASE_URL")
    schema = f"bench_scale_{uuid.uuid4().hex[:6]}"
    if database_url:
        import pickle

        from kit.pg import create_pool

        cache = Path(tempfile.gettempdir()) / f"engram-recall-scale-{len(states)}-colbert.pickle"
        t0 = time.perf_counter()
        if cache.exists():
            blobs = pickle.loads(cache.read_bytes())
        else:
            blobs = []
            for i in range(0, len(states), 64):
                encoded = late.encode_documents([late_document(s) for s in states[i : i + 64]])
                blobs.extend(pack(document_matrix(tokens)) for tokens in encoded)
            cache.write_bytes(pickle.dumps(blobs))
        encode_s = time.perf_counter() - t0
        pool = await create_pool(database_url, max_size=2)
        await pool.execute(f"CREATE SCHEMA {schema}")
        # the columns late_tokens() reads, with the memories table's key; the other columns are
        # left out (they live in the same heap row, while the tokens are TOASTed out of line)
        await pool.execute(f"""CREATE TABLE {schema}.memories (id uuid PRIMARY KEY, tenant text NOT NULL,
                               status text NOT NULL, late_tokens bytea)""")
        t0 = time.perf_counter()
        async with pool.acquire() as conn:
            for start in range(0, count, 10_000):
                await conn.copy_records_to_table(
                    "memories", schema_name=schema, columns=["id", "tenant", "status", "late_tokens"],
                    records=[(uuid.UUID(point_id(i)), TENANT, "active", blobs[i % len(blobs)])
                             for i in range(start, min(start + 10_000, count))])
        await pool.execute(f"ANALYZE {schema}.memories")
        table = await pool.fetchval(f"SELECT pg_total_relation_size('{schema}.memories')")
        say(f"  stages: late tokens packed for {len(blobs):,} turns in {encode_s:.0f}s "
            f"(mean {statistics.fmean(len(b) for b in blobs) / 1024:.1f} KiB a memory); {count:,} rows copied to "
            f"Postgres in {time.perf_counter() - t0:.0f}s, table {mib(table)}")

    names = ["query embedding (MiniLM int8)", "late-interaction query encoding (ColBERT-small int8)",
             "hybrid search (dense + keyword, RRF, tenant filter; best 50, legs 100)",
             "views from the hits' payloads (50)", "late tokens of the 50 candidates read from Postgres",
             "MaxSim over the candidates' tokens + fusion", "all of the above, one after another"]
    stages = [Stage(n) for n in names]

    async def one(q: str, timed: bool) -> None:
        s = stages if timed else [Stage("")] * len(stages)
        total_w, total_c = time.perf_counter(), time.process_time()
        dense = await s[0].run(lambda: asyncio.to_thread(embedder.embed_query, q))
        tokens = await s[1].run(lambda: asyncio.to_thread(late.encode_query, q))

        async def hybrid() -> Any:
            return await search(index, dense=dense.tolist(), sparse=query_vector(q), limit=LATE_CANDIDATES,
                                mode="hybrid", filter=SCOPE, prefetch_limit=late_prefetch_limit(LATE_CANDIDATES))

        hits = await s[2].run(hybrid)

        async def views() -> list[RecallHit]:
            return [RecallHit(memory=v, score=h.score) for h in hits if (v := view_of(h.id, h.payload)) is not None]

        found = await s[3].run(views)
        stored: dict[Any, bytes | None] = {}
        if pool is not None:
            async def read() -> dict[Any, bytes | None]:
                rows = await pool.fetch(f"""SELECT id, late_tokens FROM {schema}.memories WHERE tenant = $1
                                            AND id = ANY($2::uuid[]) AND status IN ('active', 'superseded')""",
                                        TENANT, [h.memory.id for h in found])
                return {r["id"]: r["late_tokens"] for r in rows}

            stored = await s[4].run(read)

        async def score() -> list[RecallHit]:
            scores = maxsim_packed(tokens, [stored.get(h.memory.id) for h in found], late.dim)
            return reranked(found, np.nan_to_num(scores).tolist())

        await s[5].run(score)
        if timed:
            stages[6].cpu.append((time.process_time() - total_c) * 1000)
            stages[6].wall.append((time.perf_counter() - total_w) * 1000)

    try:
        for q in warm:
            await one(q, timed=False)
        for q in measured:
            await one(q, timed=True)
        say(f"  stages of one recall at {count:,} memories, in process, {len(measured)} questions "
            "(CPU: the process's, stages run one after another):")
        for stage in stages:
            if stage.wall:
                say(f"    {stage.line()}")
    finally:
        if pool is not None:
            await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return pool


if __name__ == "__main__":
    asyncio.run(main())
