"""End-to-end benchmark through the MCP gateway: save throughput, save→recall visibility, and
recall latency (p50/p95/p99) with N memories in one tenant.

Starts its own stack (embedded NATS/Postgres unless ENGRAM_NATS_URL / ENGRAM_DATABASE_URL are
set), loads LoCoMo dialogue turns as memories, then measures. Prints the figures and appends them
to docs/benchmarks.md.

    python bench/mcp_bench.py --memories 10000 --queries 500
    python bench/mcp_bench.py --memories 100000 --preload --state /var/tmp/engram-100k   # resumable
    python bench/mcp_bench.py --memories 10000 --preload --as-of   # recall as_of a moment beside the default

With ``--state DIR`` the stack's data folder, namespace and key are kept in DIR: a second run
with the same DIR skips the (long) load and only measures. Before measuring, the vector index
is optimised as the memory service does after its first pause in writes (HNSW over every
point), with the stack stopped, so the figures are those of a settled index; then, with the stack
started again, it waits until the services are idle (the graph's neighbour rounds and the like
catch up after a load: recalls measured meanwhile were ~10 ms slower at 100k).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    cpu_profile,
    cpu_seconds,
    drop_shared_data,
    fmt,
    locomo,
    locomo_turns,
    log_sizes,
    memory_schema,
    percentiles,
    process_groups,
    record,
    settle,
    stack_options,
    stalls,
)

from deploy.stack import Stack


@asynccontextmanager
async def client(url: str, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(60.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as c:
        yield c


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def contents(n: int) -> list[str]:
    """LoCoMo's dialogue turns, then (beyond its 5,882) each turn joined to another one, a
    different partner every round: distinct texts that state no changed fact. (A turn with a
    counter appended reads to the truth rules as the same statement with a changed number, so
    each round superseded the last.)"""
    turns = [t for _, _, t in locomo_turns()]
    out, round_ = [], 0
    while len(out) < n:
        for i, t in enumerate(turns):
            out.append(t if round_ == 0 else f"{t} {turns[(i + round_ * 1237) % len(turns)]}")
            if len(out) == n:
                break
        round_ += 1
    return out


async def standing_counts(database_url: str, schema: str, tenant: str) -> dict[str, int]:
    """How many of the tenant's memories are current, superseded and forgotten after the load."""
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(f"SELECT status, count(*) AS n FROM {schema}.memories WHERE tenant = $1 GROUP BY status",
                                tenant)
    finally:
        await conn.close()
    return {r["status"]: r["n"] for r in rows}


async def save_all(url: str, key: str, texts: list[str], concurrency: int) -> tuple[float, list[float]]:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for t in texts:
        queue.put_nowait(t)
    latencies: list[float] = []
    with Progress() as progress:
        task = progress.add_task("saving memories", total=len(texts))

        async def worker() -> None:
            async with client(url, key) as c:
                while True:
                    try:
                        item = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    t0 = time.perf_counter()
                    r = await c.call_tool("memory", {"content": item, "containerTag": "bench"})
                    latencies.append((time.perf_counter() - t0) * 1000)
                    if r.is_error:
                        raise RuntimeError(text(r))
                    progress.advance(task)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return len(texts) / elapsed, latencies


async def visibility(url: str, key: str, samples: int) -> tuple[list[float], list[float], list[float]]:
    """Time from issuing a save until a recall returns it (read-your-writes: one round trip), and
    the two calls' own latencies, to tell which one a slow sample came from."""
    out, saves, recalls = [], [], []
    async with client(url, key) as c:
        for i in range(samples):
            token = uuid.uuid4().hex[:12]
            t0 = time.perf_counter()
            await c.call_tool("memory", {"content": f"Visibility probe {token} number {i}", "containerTag": "vis"})
            saves.append((time.perf_counter() - t0) * 1000)
            while True:
                t1 = time.perf_counter()
                found = token in text(await c.call_tool("recall", {"query": f"probe {token}", "containerTag": "vis", "limit": 3}))
                recalls.append((time.perf_counter() - t1) * 1000)
                if found:
                    break
                await asyncio.sleep(0.001)
            out.append((time.perf_counter() - t0) * 1000)
    return out, saves, recalls


async def recall_latency(url: str, key: str, queries: list[str], warmup: list[str]) -> list[float]:
    """Recall latency over distinct ``queries``, after ``warmup`` (other questions: the embedder
    caches single queries, so a repeated question would skip its embedding) has paged the index in."""
    out = []
    async with client(url, key) as c:
        for q in warmup:
            await c.call_tool("recall", {"query": q, "containerTag": "bench"})
        for q in queries:
            t0 = time.perf_counter()
            r = await c.call_tool("recall", {"query": q, "containerTag": "bench", "limit": 10})
            out.append((time.perf_counter() - t0) * 1000)
            assert not r.is_error, text(r)
    return out


async def recall_latency_pair(url: str, key: str, queries: list[str], warmup: list[str],
                              other: dict[str, Any], distinct_moments: bool = False) -> tuple[list[float], list[float]]:
    """Recall latency of the default recall and of one with ``other``'s arguments (``deep: true``,
    ``as_of``), interleaved (one question each way in turn, distinct questions: the embedder caches
    single queries), after ``warmup``. ``distinct_moments``: each ``as_of`` call a moment of its own
    (a second earlier each time), so no answer computed for an earlier moment (the profile) is reused."""
    default: list[float] = []
    changed: list[float] = []
    async with client(url, key) as c:
        for q in warmup:
            await c.call_tool("recall", {"query": q, "containerTag": "bench"})
        for i, q in enumerate(queries):
            changed_args = dict(other)
            if distinct_moments and "as_of" in other:
                changed_args["as_of"] = (datetime.fromisoformat(other["as_of"]) - timedelta(seconds=i)).isoformat()
            t0 = time.perf_counter()
            r = await c.call_tool("recall", {"query": q, "containerTag": "bench", "limit": 10,
                                             **(changed_args if i % 2 else {})})
            (changed if i % 2 else default).append((time.perf_counter() - t0) * 1000)
            assert not r.is_error, text(r)
    return default, changed


async def preload(
    stack: Stack, tenant: str, texts: list[str], window: int = 2000, trace: list[tuple[float, int]] | None = None
) -> float:
    """Publish save commands straight to the command stream (as the gateway does, without waiting
    for each reply), keeping at most ``window`` in flight; return saves/s over the whole load.
    ``trace`` receives (seconds since the start, commands handled) at every poll (see steady_rate)."""
    from contracts.envelope import CommandEnvelope
    from contracts.subjects import MEMORY, Names
    from kit.bus import Bus

    bus = await Bus.connect(stack.nats_url, Names(stack.o.namespace), name="bench-preload")

    spec = bus.names.command_consumer(MEMORY)

    async def handled(sent: int) -> int:
        """Commands the memory service has finished (identical contents dedupe, so count commands)."""
        state = await bus.consumer_state(spec.stream, spec.durable)
        if state is None:
            return 0
        return sent - state.pending - state.ack_pending

    try:
        start = time.perf_counter()
        with Progress() as progress:
            task = progress.add_task("preloading memories", total=len(texts))
            sent = 0
            while True:
                done = await handled(sent)
                progress.update(task, completed=done)
                if trace is not None:
                    trace.append((time.perf_counter() - start, done))
                if sent == len(texts) and done >= sent:
                    break
                while sent < len(texts) and sent - done < window:
                    env = CommandEnvelope(command_id=f"bench-{sent:08d}-{uuid.uuid4().hex[:8]}", type="save_memory",
                                          tenant=tenant, payload={"content": texts[sent], "project": "bench"})
                    await bus.js.publish(bus.names.command(MEMORY, "save_memory"), env.model_dump_json().encode(),
                                         headers={"Nats-Msg-Id": env.command_id})
                    sent += 1
                await asyncio.sleep(0.5)
        return len(texts) / (time.perf_counter() - start)
    finally:
        await bus.close()


def steady_rate(trace: list[tuple[float, int]], low: float = 0.1, high: float = 0.9) -> float | None:
    """Saves/s between the polls where ``low`` and ``high`` of the load were handled: the sustained
    rate, without the start (first batch not yet overlapped) and the drain (last batch alone, and
    up to one poll interval of waiting for it to be seen)."""
    total = trace[-1][1] if trace else 0
    inside = [(t, n) for t, n in trace if low * total <= n <= high * total]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / (t1 - t0)


def embedder_batch_throughput(texts: list[str]) -> float:
    """Texts/s of the embedder alone over whole texts in batches of 32 (replay_bench's baseline)."""
    from services.memory.adapters.embedder import MiniLMEmbedder

    emb = MiniLMEmbedder()
    emb.embed(texts[:32])
    sample = texts[:2048]
    t0 = time.perf_counter()
    for i in range(0, len(sample), 32):
        emb.embed(sample[i : i + 32])
    return len(sample) / (time.perf_counter() - t0)


def optimise_index(home: Path) -> float:
    """Build the HNSW index over every point of the stopped stack's shard, and merge its segments
    if the memory service would (``needs_compaction``); return the seconds."""
    from services.memory.adapters.embedder import MiniLMEmbedder
    from services.memory.adapters.vector_factory import build_vector_index

    async def go() -> float:
        index = build_vector_index(qdrant_url=None, path=home / "qdrant", dim=MiniLMEmbedder.dim)
        await index.ensure()
        t0 = time.perf_counter()
        try:
            while index.needs_optimize():
                await index.optimize()
            if index.needs_compaction():
                await index.compact()
        finally:
            await index.close()
        return time.perf_counter() - t0

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--visibility", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--preload", action="store_true",
                        help="load memories through the command stream (bulk) instead of MCP calls")
    parser.add_argument("--state", type=Path, help="keep the loaded stack in this folder and reuse it next time")
    parser.add_argument("--deep", action="store_true",
                        help="measure recall with deep: true beside the default, on alternate questions")
    parser.add_argument("--as-of", action="store_true",
                        help="measure recall as of a moment (the start of the measurement: every memory stood "
                        "then) beside the default, on alternate questions")
    parser.add_argument("--distinct-moments", action="store_true",
                        help="with --as-of: every call a moment of its own (nothing computed for one is reused)")
    args = parser.parse_args()

    texts = contents(args.memories)
    distinct = list(dict.fromkeys(qa["question"] for conv in locomo() for qa in conv["qa"]))
    questions, warmup = distinct[: args.queries], distinct[-300:]
    if args.queries + 300 > len(distinct):
        sys.exit(f"--queries at most {len(distinct) - 300}: the last 300 of LoCoMo's questions warm the index up")
    state_file = args.state / "bench.json" if args.state else None
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file and state_file.exists() else {}
    if state and state.get("memories") != args.memories:
        sys.exit(f"{args.state} holds {state.get('memories')} memories, not {args.memories}: use another --state")
    options = stack_options("bench", args.state / "home" if args.state else None, state.get("namespace"))
    home = options.home
    try:
        load_line = f"(loaded earlier: {state.get('load_line', '')})"
        if not state.get("loaded"):
            with Stack(options) as stack:
                if "key" not in state:  # else an interrupted load resumes: saved contents dedupe
                    created = stack.create_key(None, "bench")
                    state.update(namespace=options.namespace, key=created["key"], tenant=created["view"]["user_id"],
                                 memories=args.memories)
                    if state_file:
                        state_file.write_text(json.dumps(state))
                url = stack.gateway_url + "/mcp"
                if args.preload:
                    rate = asyncio.run(preload(stack, state["tenant"], texts))
                    load_line = f"sustained save throughput through the command stream (bulk preload): {rate:.1f} saves/s"
                else:
                    rate, save_ms = asyncio.run(save_all(url, state["key"], texts, args.concurrency))
                    load_line = (f"save throughput through MCP ({args.concurrency} clients): {rate:.1f} saves/s; "
                                 f"per-save latency {fmt(percentiles(save_ms))}")
            state.update(loaded=True, load_line=load_line)
            if state_file:
                state_file.write_text(json.dumps(state))
        optimise_s = optimise_index(home)
        with Stack(options) as stack:
            url = stack.gateway_url + "/mcp"
            standing = asyncio.run(standing_counts(stack.database_url, memory_schema(options), state["tenant"]))
            groups = process_groups(stack, "MCP client (this script)")
            settled_s = settle(groups, "MCP client (this script)")
            logs = log_sizes(stack)
            cpu0 = cpu_seconds(groups)
            other: dict[str, Any] = ({"deep": True} if args.deep else {}) | (
                {"as_of": datetime.now(UTC).isoformat()} if args.as_of else {})
            if other:
                default_ms, other_ms = asyncio.run(recall_latency_pair(url, state["key"], questions, warmup, other,
                                                                       args.distinct_moments))
                rec, rec_other = percentiles(default_ms), percentiles(other_ms)
                ratio = statistics.median(other_ms) / statistics.median(default_ms)
            else:
                rec = percentiles(asyncio.run(recall_latency(url, state["key"], questions, warmup)))
            cpu1 = cpu_seconds(groups)
            vis, vis_saves, vis_recalls = (percentiles(x) for x in asyncio.run(visibility(url, state["key"], args.visibility)))
            stalled = stalls(stack, logs)
    finally:
        if not args.state:  # a kept state is measured again later
            drop_shared_data(options)
    n_recalls = len(questions) + len(warmup)
    lines = [
        f"memories in one tenant: {len(texts):,} saved (LoCoMo dialogue turns, then pairs of them); by status: "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(standing.items())),
        load_line,
        f"vector index optimised and compacted before measuring (as the service does once writes pause): "
        f"{optimise_s:.0f} s",
        f"then waited for the started stack to settle (its services under 5% of a core for 6 s): {settled_s:.0f} s",
        f"recall through MCP (query embedding included, includeProfile, top 10, {len(questions)} distinct "
        f"LoCoMo questions after 300 others as warm-up; keyword feedback "
        f"{os.environ.get('ENGRAM_KEYWORD_FEEDBACK', 'false (default)')}): {fmt(rec)}",
        *([f"recall with {', '.join(sorted(other))}{' (a moment of its own each call)' if args.distinct_moments else ''} "
           f"through MCP, on the other half of the same questions, "
           f"interleaved with the default ({len(questions) - len(questions) // 2} default, {len(questions) // 2} "
           f"with it): default {fmt(rec)}; with {', '.join(sorted(other))} {fmt(rec_other)}; "
           f"ratio of medians {ratio:.2f}"] if other else []),
        f"save → visible to recall: {fmt(vis)} (the save alone: {fmt(vis_saves)}; each recall: {fmt(vis_recalls)})",
        f"event-loop stalls over 30 ms during the recall and visibility runs: {stalled}",
        "CPU per recall by process (ms, mean over warm-up and measured recalls): {}; total {:.1f}".format(
            *cpu_profile(cpu0, cpu1, n_recalls)),
    ]
    print("\n".join(lines))
    if not args.no_record:
        record(f"MCP end-to-end, {len(texts):,} memories", lines)


if __name__ == "__main__":
    main()
