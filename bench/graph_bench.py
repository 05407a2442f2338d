"""The memory graph's figures: graph replay events/s, a 200-node page through the bus p50/p95 at N
memories, save → node visible in the graph p99, and the cost of 'similar' edges per saved memory.

In-process on the machine's servers (ENGRAM_NATS_URL / ENGRAM_DATABASE_URL, default the local
ones), in a namespace and schemas of its own, dropped afterwards (kept with ``--state``):

1. **Load** — N memories of one tenant are written to the event log as the memory service writes
   them (``MemorySaved`` events carrying full state: LoCoMo turns as contents, 10 projects, 30% in
   key families, 20% with provenance from one daily log per 50 memories, 5% updated, 3% forgotten).
   They never pass through the memory service: building 100,000 real memories takes hours here
   (embedding), and the graph reads only events. The graph is then built by ``replay`` (the rate
   is the graph's replay rate); the similar-edge queue the replay fills is cleared (synthetic
   memories have no vectors).
2. **Real saves** — the memory service runs in-process (commands and queries; no projector
   consumers, which would embed the synthetic memories) and ``--vectors`` LoCoMo turns are saved
   through the bus while the graph service runs: its similar-edge worker asks the memory service
   for each one's neighbours; the per-memory cost is timed there.
3. **Pages** — every page of the graph from the start (200 nodes each) and repeated first pages,
   through the bus (``graph_page``: request-reply over NATS, as the gateway asks it).
4. **Save → visible** — a save through the bus until a page after the last known cursor holds the
   new node.

    python bench/graph_bench.py --memories 100000 --state /var/tmp/engram-graph-100k
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, locomo_turns, percentiles, record

from contracts.daily_logs import DAILY_LOG_AGGREGATE, DailyLogState, ProcessingStatus, daily_log_id
from contracts.envelope import EventEnvelope
from contracts.graph import MEMORY_AGGREGATE, GraphPage, GraphPageQuery, SimilarMemoryList
from contracts.memory import Category, MemoryState, MemoryStatus, Provenance, SaveMemory
from contracts.subjects import Names
from kit.bus import Bus
from kit.client import Client
from services.graph import main as graph_main
from services.graph.config import GraphSettings
from services.memory.config import MemorySettings
from services.memory.main import memory_app

PROJECTS = ["default"] * 5 + [f"p{i}" for i in range(1, 6)]
TOPICS = [f"t{i:03d}" for i in range(200)]


def synthetic_events(tenant: str, n: int, seed: int = 7) -> list[EventEnvelope]:
    """The events of ``n`` memories (and their daily logs) as the memory service writes them."""
    rng = random.Random(seed)
    turns = [t for _, _, t in locomo_turns()]
    start = datetime.now(UTC) - timedelta(days=90)
    events: list[EventEnvelope] = []
    later: list[EventEnvelope] = []

    def event(aggregate: str, aggregate_id: str, type_: str, data: dict[str, Any], at: datetime) -> EventEnvelope:
        return EventEnvelope(event_id=uuid.uuid4(), type=type_, occurred_at=at, tenant=tenant, aggregate=aggregate,
                             aggregate_id=aggregate_id, correlation_id="bench", causation_id="bench", data=data)

    log: DailyLogState | None = None
    for i in range(n):
        at = start + timedelta(seconds=i * 60)
        project = rng.choice(PROJECTS)
        if i % 50 == 0:
            day = (start + timedelta(days=i // 1200)).date()
            log = DailyLogState(id=daily_log_id(tenant, f"log{i}", day), tenant=tenant, project=project,
                                log_date=day, topics=[rng.choice(TOPICS)], processing_status=ProcessingStatus.PROCESSED,
                                processed_at=at, created_at=at, updated_at=at)
            events.append(event(DAILY_LOG_AGGREGATE, str(log.id), "DailyLogSaved", log.model_dump(mode="json"), at))
        keyed = rng.random() < 0.3
        state = MemoryState(
            id=uuid.uuid4(), tenant=tenant, project=log.project if log and rng.random() < 0.2 else project,
            content=f"{turns[i % len(turns)]} (#{i})", created_at=at, updated_at=at,
            category=Category.PREFERENCE if keyed else None,
            memory_key=f"preference.{rng.choice(TOPICS)}_{i}" if keyed else None,
        )
        if log is not None and state.project == log.project and rng.random() < 0.5:
            state = state.model_copy(update={"provenance": Provenance(log_id=log.id, task_id="bench", turns=[0],
                                                                      log_date=log.log_date)})
        events.append(event(MEMORY_AGGREGATE, str(state.id), "MemorySaved", state.model_dump(mode="json"), at))
        roll = rng.random()
        if roll < 0.05:
            upd = state.model_copy(update={"content": state.content + " (updated)", "version": 2,
                                           "updated_at": at + timedelta(days=1)})
            later.append(event(MEMORY_AGGREGATE, str(state.id), "MemoryUpdated", upd.model_dump(mode="json"), at))
        elif roll < 0.08:
            gone = state.model_copy(update={"status": MemoryStatus.FORGOTTEN, "version": 2,
                                            "updated_at": at + timedelta(days=1), "forget_reason": "bench"})
            later.append(event(MEMORY_AGGREGATE, str(state.id), "MemoryForgotten", gone.model_dump(mode="json"), at))
    return events + later


async def publish(bus: Bus, events: list[EventEnvelope], window: int = 512) -> float:
    """Append the events to the event log; returns the seconds it took."""
    t0 = time.perf_counter()
    for i in range(0, len(events), window):
        chunk = events[i : i + window]
        await asyncio.gather(*(bus.js.publish(bus.names.event(e.tenant, e.aggregate, e.aggregate_id),
                                              e.model_dump_json().encode(), stream=bus.names.events_stream)
                               for e in chunk))
        print(f"\rpublished {min(i + window, len(events)):,}/{len(events):,} events", end="", flush=True)
    print()
    return time.perf_counter() - t0


class TimedNeighbours:
    """The similar-edge worker's port, timed: one memory-service round trip per memory."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ms: list[float] = []

    async def similar(self, task: Any, limit: int, min_score: float) -> SimilarMemoryList:
        t0 = time.perf_counter()
        try:
            return await self.inner.similar(task, limit, min_score)  # type: ignore[no-any-return]
        finally:
            self.ms.append((time.perf_counter() - t0) * 1000)


async def page_latencies(client: Client, tenant: str, repeats: int) -> tuple[list[float], list[float], int, int]:
    """Every page from the start (200 nodes), then ``repeats`` first pages; latencies in ms."""
    walk, first = [], []
    cursor, nodes, edges = None, 0, 0
    while True:
        t0 = time.perf_counter()
        page: GraphPage = await client.ask(tenant, GraphPageQuery(cursor=cursor, limit=200))
        walk.append((time.perf_counter() - t0) * 1000)
        nodes += len(page.nodes)
        edges += len(page.edges)
        cursor = page.next_cursor
        if cursor is None:
            break
    for _ in range(repeats):
        t0 = time.perf_counter()
        await client.ask(tenant, GraphPageQuery(limit=200))
        first.append((time.perf_counter() - t0) * 1000)
    return walk, first, nodes, edges


async def last_cursor(client: Client, tenant: str) -> str | None:
    cursor = None
    while True:
        page: GraphPage = await client.ask(tenant, GraphPageQuery(cursor=cursor, limit=1000))
        if page.next_cursor is None:
            return cursor
        cursor = page.next_cursor


async def visibility(client: Client, tenant: str, samples: int, saves: list[float]) -> list[float]:
    """Save → the node on the page after the last known cursor (moved on as pages fill), polled
    every 2 ms."""
    out = []
    cursor = await last_cursor(client, tenant)
    for i in range(samples):
        t0 = time.perf_counter()
        saved = await client.send(tenant, SaveMemory(content=f"visibility probe {uuid.uuid4().hex} #{i}"))
        saves.append((time.perf_counter() - t0) * 1000)
        want = str(saved.memory_id)
        while True:
            page: GraphPage = await client.ask(tenant, GraphPageQuery(cursor=cursor, limit=1000))
            if any(n.id == want for n in page.nodes):
                break
            if page.next_cursor is not None:
                cursor = page.next_cursor
                continue
            await asyncio.sleep(0.002)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def run(args: argparse.Namespace) -> list[str]:
    nats_url = os.environ.get("ENGRAM_NATS_URL", "nats://127.0.0.1:4222")
    database_url = os.environ.get("ENGRAM_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    state_file = args.state / "graph_bench.json" if args.state else None
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file and state_file.exists() else {}
    if state and state["memories"] != args.memories:
        sys.exit(f"{args.state} holds {state['memories']} memories, not {args.memories}: use another --state")
    ns = state.get("namespace") or "graphbench" + uuid.uuid4().hex[:6]
    tenant = "bench"
    home = Path(state.get("home") or (args.state / "home" if args.state else Path(f"/tmp/{ns}")))
    graph_settings = GraphSettings(nats_url=nats_url, database_url=database_url, namespace=ns,
                                   graph_schema=f"graph_{ns}", graph_similar=True)
    mem_settings = MemorySettings(home=home, nats_url=nats_url, database_url=database_url, namespace=ns,
                                  memory_schema=f"mem_{ns}", late_interaction="none", reranker="none")
    lines: list[str] = []
    bus = await Bus.connect(nats_url, Names(ns), name="graph-bench")
    try:
        await bus.ensure_streams()
        if not state.get("loaded"):
            events = synthetic_events(tenant, args.memories)
            print(f"{len(events):,} events of {args.memories:,} memories")
            publish_s = await publish(bus, events)
            replayed = await graph_main.replay(graph_settings, lambda d, t: print(
                f"\rreplay {d:,}/{t:,}", end="", flush=True) if d % 5000 < 256 or d == t else None)
            print()
            state.update(namespace=ns, memories=args.memories, home=str(home), loaded=True,
                         load=f"{len(events):,} events appended in {publish_s:.0f} s",
                         replay=f"graph replay (the graph service's own projection, from an empty schema): "
                                f"{replayed.events:,} events in {replayed.seconds:.1f} s = {replayed.rate:,.0f} events/s")
            if state_file:
                args.state.mkdir(parents=True, exist_ok=True)
                state_file.write_text(json.dumps(state))
        elif args.replay:
            replayed = await graph_main.replay(graph_settings)
            state["replay"] = (f"graph replay (from an empty schema): {replayed.events:,} events in "
                               f"{replayed.seconds:.1f} s = {replayed.rate:,.0f} events/s")
            if state_file:
                state_file.write_text(json.dumps(state))
        lines.append(f"memories in the graph: {args.memories:,} synthetic (one tenant; {state['load']}; "
                     "LoCoMo turns as contents, 10 projects, 30% in key families, 20% with provenance, one daily "
                     "log per 50 memories, 5% updated, 3% forgotten)")
        lines.append(state["replay"])
        async with memory_app(mem_settings) as mem, graph_main.graph_app(graph_settings) as graph:
            await graph.pool.execute(f"TRUNCATE {graph_settings.graph_schema}.similar_queue")  # synthetic: no vectors
            stop = asyncio.Event()
            timed = TimedNeighbours(graph.similar.neighbours)
            graph.similar.neighbours = timed
            tasks = [mem.service.runtime.start_commands(mem.bus, stop, prepare=mem.service.memories.prime_saves)]
            await mem.service.runtime.serve_queries(mem.bus)
            tasks += await graph_main.start(graph, stop)
            client = Client(mem.bus, command_timeout_s=60, query_timeout_s=30)
            try:
                # real saves: vectors for the similar edges (the worker asks as they arrive)
                # a kept state's next run takes the next slice of turns (saved contents would dedupe)
                runs = int(state.get("runs", 0))
                turns = [t for _, _, t in locomo_turns()]
                texts = turns[len(turns) - (runs + 1) * args.vectors : len(turns) - runs * args.vectors]
                state["runs"] = runs + 1
                if state_file:
                    state_file.write_text(json.dumps(state))
                done = 0
                sem = asyncio.Semaphore(16)

                async def save(text: str) -> None:
                    nonlocal done
                    async with sem:
                        await client.send(tenant, SaveMemory(content=text, project="default"))
                        done += 1
                        if done % 200 == 0:
                            print(f"\rsaved {done:,}/{len(texts):,}", end="", flush=True)

                t0 = time.perf_counter()
                await asyncio.gather(*(save(t) for t in texts))
                saved_s = time.perf_counter() - t0
                while await graph.store.similar_backlog():
                    await asyncio.sleep(0.1)
                drained_s = time.perf_counter() - t0
                print()
                vectors = await graph.pool.fetchval(
                    f"SELECT count(*) FROM {mem_settings.memory_schema}.memories WHERE status = 'active'")
                edges = await graph.pool.fetchval(
                    f"SELECT count(*) FROM {graph_settings.graph_schema}.edges WHERE type = 'similar'")
                lines.append(
                    f"'similar' edges: {len(texts):,} real saves (LoCoMo turns, 16 at a time) through the bus in "
                    f"{saved_s:.0f} s; the worker was done {drained_s - saved_s:.1f} s after the last save. Per saved "
                    f"memory one SimilarMemories round trip to the memory service: {fmt(percentiles(timed.ms))} "
                    f"(its vector from the embedding cache, one dense search top-6 within the project, at "
                    f"{vectors:,} vectors); {edges:,} edges ({edges / max(1, vectors):.1f} per memory, cosine ≥ "
                    f"{graph_settings.graph_similar_min_score}, at most {graph_settings.graph_similar_limit})")
                walk, first, nodes, edge_count = await page_latencies(client, tenant, args.repeats)
                lines.append(f"a 200-node page through the bus (graph_page request-reply over NATS, {nodes:,} nodes and "
                             f"{edge_count:,} edges walked): every page from the start {fmt(percentiles(walk))}; "
                             f"the first page ({args.repeats} times) {fmt(percentiles(first))}")
                save_ms: list[float] = []
                vis = await visibility(client, tenant, args.visibility, save_ms)
                lines.append(f"save → node visible in the graph (save through the bus, then the page after the last "
                             f"cursor polled every 2 ms): {fmt(percentiles(vis))}; the save alone (the memory "
                             f"service's reply): {fmt(percentiles(save_ms))}")
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
            if not args.state:
                await graph.pool.execute(f"DROP SCHEMA IF EXISTS {graph_settings.graph_schema} CASCADE")
                await graph.pool.execute(f"DROP SCHEMA IF EXISTS {mem_settings.memory_schema} CASCADE")
    finally:
        if not args.state:
            await bus.delete_streams()
        await bus.close()
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--vectors", type=int, default=2_000, help="real saves (with vectors) for the similar edges")
    parser.add_argument("--repeats", type=int, default=200, help="first pages asked again")
    parser.add_argument("--visibility", type=int, default=200)
    parser.add_argument("--state", type=Path, help="keep the loaded graph (namespace, schemas) and reuse it")
    parser.add_argument("--replay", action="store_true", help="with a kept state: replay the graph again")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    lines = asyncio.run(run(args))
    lines.append("the machine was shared with other work (six other sessions' tests and benchmarks) during the run")
    for line in lines:
        print("-", line)
    if not args.no_record:
        record("Graph", lines)


if __name__ == "__main__":
    main()
