"""Recall latency at scale, in-process: where the time of one recall goes with N memories.

Builds N memories in one tenant in the embedded vector index (LoCoMo turns, embedded once, then
reused with a small per-copy perturbation so every point is distinct), and times the recall
path's two costly steps separately — query embedding and hybrid search (dense + keyword, RRF,
tenant filter) — before and after the index is optimised. Add the gateway's MCP/NATS overhead
measured by bench/mcp_bench.py to get the end-to-end figure.

    python bench/recall_scale.py --memories 100000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, locomo, locomo_turns, percentiles, record  # noqa: E402

from services.memory.adapters.embedder import MiniLMEmbedder  # noqa: E402
from services.memory.adapters.vectors_edge import EdgeVectorIndex  # noqa: E402
from services.memory.domain.keywords import document_vector, query_vector  # noqa: E402
from services.memory.search.ports import SearchFilter, VectorPoint  # noqa: E402
from services.memory.search.recall import search  # noqa: E402


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    texts = [t for _, _, t in locomo_turns()]
    questions = [qa["question"] for conv in locomo() for qa in conv["qa"]][: args.queries]
    embedder = MiniLMEmbedder()
    t0 = time.perf_counter()
    base = np.concatenate([embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    embed_rate = len(texts) / (time.perf_counter() - t0)

    index = EdgeVectorIndex(Path(tempfile.mkdtemp(prefix="engram-scale-")) / "shard", dim=embedder.dim)
    await index.ensure()
    rng = np.random.default_rng(7)
    t0 = time.perf_counter()
    with Progress() as progress:
        task = progress.add_task("indexing memories", total=args.memories)
        for start in range(0, args.memories, 1000):
            points = []
            for i in range(start, min(start + 1000, args.memories)):
                v = base[i % len(texts)] + rng.standard_normal(embedder.dim).astype(np.float32) * 0.02
                v /= np.linalg.norm(v)
                text = texts[i % len(texts)]
                points.append(VectorPoint(
                    id=str(uuid.uuid4()), dense=v.tolist(), sparse=document_vector(text),
                    payload={"tenant": "bench", "project": "bench", "status": "active"},
                ))
            await index.upsert(points)
            progress.advance(task, len(points))
    load_s = time.perf_counter() - t0

    keyword_feedback = True

    async def measure() -> tuple[list[float], list[float]]:
        embed_ms, search_ms = [], []
        for q in questions:
            t = time.perf_counter()
            dense = embedder.embed([q])[0].tolist()
            sparse = query_vector(q)
            embed_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await search(index, dense=dense, sparse=sparse, limit=10, mode="hybrid",
                         filter=SearchFilter(tenant="bench", project="bench"), keyword_feedback=keyword_feedback)
            search_ms.append((time.perf_counter() - t) * 1000)
        return embed_ms, search_ms

    embedder.cache_clear()
    _, unoptimised = await measure()
    t0 = time.perf_counter()
    await index.optimize()
    optimise_s = time.perf_counter() - t0
    embedder.cache_clear()
    embed_ms, optimised = await measure()
    total = [a + b for a, b in zip(embed_ms, optimised, strict=True)]
    keyword_feedback = False
    embedder.cache_clear()
    _, literal = await measure()
    await index.close()
    lines = [
        f"memories in one tenant: {args.memories:,}; indexing {args.memories / load_s:,.0f} points/s; "
        f"optimise (HNSW build, once) {optimise_s:.1f}s; embedder {embed_rate:.0f} texts/s (batch 64)",
        f"query embedding (MiniLM int8, one query): {fmt(percentiles(embed_ms))}",
        f"hybrid search before the index is optimised (full scan): {fmt(percentiles(unoptimised))}",
        f"hybrid search, optimised: {fmt(percentiles(optimised))}",
        f"hybrid search, optimised, without keyword feedback (ENGRAM_KEYWORD_FEEDBACK=false): "
        f"{fmt(percentiles(literal))}",
        f"embedding + search, in-process: {fmt(percentiles(total))}",
    ]
    print("\n".join(lines))
    if not args.no_record:
        record(f"Recall at scale (in-process), {args.memories:,} memories", lines)


if __name__ == "__main__":
    asyncio.run(main())
