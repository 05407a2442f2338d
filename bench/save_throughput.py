"""Sustained save throughput against the embedder's own throughput on the same work, with a CPU
profile of where the rest goes.

The issue's bar: saves through the bus and storage reach at least 80% of what the embedder alone
does. "The embedder alone" here is exactly the encoding a save needs — ``embed_memories`` (each
memory's sentences, one call per batch of 64 memories, as the memory service primes a fetched
batch) and, with late interaction on (the default), the memory's token vectors
(``ColbertEncoder.encode_documents`` + ``pack``) — over the same texts, in the same run, before
and after the load. The sentence embedder's rate alone is printed too. The load publishes save
commands straight to the command stream (as the gateway does) and waits for every outcome, so
it measures the memory service, NATS and Postgres — not the MCP/HTTP layer (see mcp_bench.py).
"Sustained" is the rate between 10% and 90% of the load (the embedder's figure is a steady state
too); the rate over the whole load, start and drain included, is printed beside it.

While the load runs, the CPU seconds of every process involved are sampled (memory service,
gateway, auth, nats-server, postgres, this script), so the figure comes with where the time went.

    python bench/save_throughput.py --memories 5000            # print
    python bench/save_throughput.py --memories 5000 --record   # ... and append to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import cpu_profile, cpu_seconds, drop_shared_data, process_groups, record, stack_options
from mcp_bench import contents, preload, steady_rate

from contracts.memory import MemoryState
from deploy.stack import Stack
from services.memory.adapters.embedder import MiniLMEmbedder
from services.memory.adapters.late_encoder import LateEncoder, build_late_encoder
from services.memory.config import MemorySettings
from services.memory.search.indexing import embed_memories
from services.memory.search.late import document_matrix, late_document, pack

BATCH = 64  # memories per embed call: one fetched command batch of the memory service


def embedder_throughput(
    texts: list[str], late: LateEncoder | None, sample: int = 1536
) -> tuple[float, float]:
    """(memories/s, CPU ms per memory) of ``embed_memories`` (and, with ``late``, the memories'
    packed token vectors) alone over ``texts[:sample]``."""
    emb = MiniLMEmbedder()
    now = datetime.now(UTC)
    states = [
        MemoryState(id=uuid.uuid4(), tenant="t", project="bench", content=t, created_at=now, updated_at=now)  # type: ignore[call-arg]
        for t in texts[:sample]
    ]

    def encode(batch: list[MemoryState]) -> None:
        embed_memories(emb, batch)
        if late is not None:
            for tokens in late.encode_documents([late_document(s) for s in batch]):
                pack(document_matrix(tokens))

    encode(states[:BATCH])  # warm-up
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(states), BATCH):
        encode(states[i : i + BATCH])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return len(states) / wall, 1000 * cpu / len(states)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--record", action="store_true", help="append the results to docs/benchmarks.md")
    args = parser.parse_args()
    texts = contents(args.memories)

    late = build_late_encoder(MemorySettings().late_interaction)  # as the memory service would (env included)
    sentences_rate, _ = embedder_throughput(texts, None)
    before_rate, embed_cpu_ms = embedder_throughput(texts, late)
    options = stack_options("tput")
    try:
        with Stack(options) as stack:
            tenant = stack.create_key(None, "bench")["view"]["user_id"]
            groups = process_groups(stack, "this script (publisher)")
            cpu0, wall0 = cpu_seconds(groups), time.perf_counter()
            trace: list[tuple[float, int]] = []
            overall = asyncio.run(preload(stack, tenant, texts, trace=trace))
            cpu1, wall = cpu_seconds(groups), time.perf_counter() - wall0
    finally:
        drop_shared_data(options)
    after_rate, _ = embedder_throughput(texts, late)
    embed_rate = (before_rate + after_rate) / 2

    profile, total = cpu_profile(cpu0, cpu1, len(texts))
    rate = steady_rate(trace) or overall
    lines = [
        f"{len(texts):,} saves (LoCoMo turns) through the command stream: {rate:.1f} saves/s sustained "
        f"(from 10% to 90% of the load; {overall:.1f} over all of it, start and drain included)",
        f"encoders alone on the same work (embed_memories{' + late-interaction tokens' if late else ''}, "
        f"{BATCH} memories per call, same run): "
        f"{before_rate:.1f} before / {after_rate:.1f} after → saves reach "
        f"**{100 * rate / embed_rate:.0f}%** of the encoders sustained (target ≥ 80%); "
        f"{100 * overall / embed_rate:.0f}% over all of the load; the sentence embedder alone: "
        f"{sentences_rate:.1f} memories/s",
        f"CPU per save, by process (ms): {profile}; total {total:.1f} ms over {wall:.0f} s "
        f"({total * overall / 1000:.2f} of {os.cpu_count()} cores busy)",
        f"encoding alone costs {embed_cpu_ms:.1f} CPU-ms per memory → "
        f"{100 * embed_cpu_ms / total:.0f}% of the CPU a save takes; the rest is the bus, storage and services",
    ]
    print("\n".join(lines))
    if args.record:
        record(f"Save throughput, {len(texts):,} memories", lines)


if __name__ == "__main__":
    main()
