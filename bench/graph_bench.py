"""The memory graph's figures: graph replay events/s, a 200-node page through MCP and through the
bus p50/p95 at N memories, save → node visible in the graph p99, and the cost of 'similar' edges
per saved memory.

The memory and graph services run in this process; auth and the gateway as processes of their own
(``engram serve``), so MCP pages cross a real gateway. On the machine's servers (ENGRAM_NATS_URL /
ENGRAM_DATABASE_URL, default the local ones), in a namespace and schemas of its own, dropped
afterwards (kept with ``--state``). The graph's tenant is the user of an API key made first.

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
3. **Pages** — through MCP (the ``mcp`` SDK client with the API key, one session, against the
   gateway): every page from the start with ``fetch-graph-data`` by cursor (200 nodes each), and
   repeated first pages with ``memory-graph``; the same walk as the /graph page's host asks it
   (plain JSON-RPC POSTs, no schema check); then through the bus (``graph_page``: request-reply
   over NATS, as the gateway asks it), so the gateway's and the client's share shows. CPU per call
   by process next to each (the machine is shared: wall times there are upper bounds).
4. **Save → visible** — a save through the bus until a page after the last known cursor holds the
   new node.

A replay leaves the graph's durable consumer holding every event (the service would fetch them to
skip them): the bench acknowledges the replayed ones before measuring, and analyzes the tables.

    python bench/graph_bench.py --memories 100000 --state /var/tmp/engram-graph-100k --load-only  # build once
    python bench/graph_bench.py --memories 100000 --state /var/tmp/engram-graph-100k --vectors 2000 --visibility 100
    python bench/graph_bench.py --memories 100000 --state /var/tmp/engram-graph-100k --vectors 0   # pages again
    python bench/graph_bench.py --state /var/tmp/engram-graph-100k --drop-state                   # clean up
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BENCH_ENV, fmt, locomo_turns, percentiles, record

from contracts.daily_logs import DAILY_LOG_AGGREGATE, DailyLogState, ProcessingStatus, daily_log_id
from contracts.envelope import EventEnvelope
from contracts.graph import MEMORY_AGGREGATE, GraphPage, GraphPageQuery, SimilarMemoryList
from contracts.memory import Category, MemoryState, MemoryStatus, Provenance, SaveMemory
from contracts.subjects import Names
from deploy.client import admin_command
from deploy.embedded.ports import pick_port
from deploy.stack import ServiceProcess
from kit.bus import Bus, BusUnavailable
from kit.client import Client
from services.graph import main as graph_main
from services.graph.config import GraphSettings
from services.graph.entrypoints import nats as graph_nats
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
    """The similar-edge worker's port, timed: one memory-service round trip per batch of memories
    (``ms`` per round trip, ``sizes`` how many memories each asked for)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ms: list[float] = []
        self.sizes: list[int] = []

    async def similar(self, tasks: Any, limit: int, min_score: float) -> list[SimilarMemoryList]:
        t0 = time.perf_counter()
        try:
            return await self.inner.similar(tasks, limit, min_score)  # type: ignore[no-any-return]
        finally:
            self.ms.append((time.perf_counter() - t0) * 1000)
            self.sizes.append(len(tasks))


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


class Front:
    """Auth and the gateway as processes (``engram serve``) on this run's namespace, auth in a schema
    of the run's own; the memory and graph services they reach run in the bench's process."""

    def __init__(self, ns: str, nats_url: str, database_url: str, home: Path) -> None:
        host = "127.0.0.1"
        port, auth_port = pick_port(0, host), pick_port(0, host)
        self.url = f"http://{host}:{port}"
        self.auth_schema = f"auth_{ns}"
        self.home = home
        self.env = {**os.environ, **BENCH_ENV, "ENGRAM_HOME": str(home), "ENGRAM_NATS_URL": nats_url,
                    "ENGRAM_DATABASE_URL": database_url, "ENGRAM_NAMESPACE": ns, "ENGRAM_AUTH_SCHEMA": self.auth_schema,
                    "ENGRAM_GATEWAY_HOST": host, "ENGRAM_GATEWAY_PORT": str(port), "ENGRAM_PUBLIC_URL": self.url,
                    "ENGRAM_AUTH_HOST": host, "ENGRAM_AUTH_PORT": str(auth_port),
                    "ENGRAM_AUTH_PUBLIC_URL": f"http://{host}:{auth_port}"}
        self.procs: list[ServiceProcess] = []

    def start(self, name: str) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.procs.append(ServiceProcess(name, self.env, self.home / "logs" / f"{name}.log"))

    def check(self) -> None:
        for proc in self.procs:
            if not proc.alive():
                sys.exit(f"the {proc.name} process exited; its log:\n{proc.tail()}")

    async def create_key(self, bus: Bus) -> tuple[str, str]:
        """A new user's API key, once auth answers: (its user id = the graph's tenant, the key)."""
        deadline = time.monotonic() + 60
        while True:
            self.check()
            try:
                reply = await admin_command(bus, "create_api_key", {"name": "graph-bench", "user_name": "bench"},
                                            timeout=2.0)
                if reply.ok:
                    return reply.result["view"]["user_id"], reply.result["key"]
            except (BusUnavailable, TimeoutError):
                pass
            if time.monotonic() > deadline:
                sys.exit("auth did not answer create_api_key within 60 s")
            await asyncio.sleep(0.2)

    async def ready(self) -> None:
        async with httpx2.AsyncClient(timeout=2.0) as http:
            for _ in range(300):
                self.check()
                try:
                    if (await http.get(self.url + "/healthz")).status_code == 200:
                        return
                except httpx2.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        sys.exit("the gateway did not answer /healthz within 60 s")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@asynccontextmanager
async def mcp_session(url: str, key: str) -> AsyncIterator[McpClient]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, McpClient(streamable_http_client(url + "/mcp", http_client=http)) as client:
        await client.list_tools()  # the client validates results against the tools' output schemas: list them once
        yield client


async def mcp_tool(client: McpClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{name}: {result.content}")
    return result.structured_content


async def mcp_latencies(url: str, key: str, repeats: int) -> dict[str, Any]:
    """Through MCP: every page from the start with ``fetch-graph-data`` by cursor (200 nodes), then
    ``repeats`` first pages with ``memory-graph``; latencies in ms, and a page's size."""
    walk, first, sizes = [], [], []
    nodes = edges = 0
    async with mcp_session(url, key) as client:
        cursor = None
        while True:
            t0 = time.perf_counter()
            page = await mcp_tool(client, "fetch-graph-data", {"limit": 200, **({"cursor": cursor} if cursor else {})})
            walk.append((time.perf_counter() - t0) * 1000)
            nodes += len(page["nodes"])
            edges += len(page["edges"])
            sizes.append(len(json.dumps(page)))
            cursor = page["next_cursor"]
            if cursor is None:
                break
        for _ in range(repeats):
            t0 = time.perf_counter()
            await mcp_tool(client, "memory-graph", {"limit": 200})
            first.append((time.perf_counter() - t0) * 1000)
    return {"walk": walk, "first": first, "nodes": nodes, "edges": edges, "bytes": sorted(sizes)[len(sizes) // 2]}


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


LOADS: list[str] = []  # the 1-minute load average as each measurement started


def note_load(what: str) -> None:
    LOADS.append(f"{what} {os.getloadavg()[0]:.1f}")


def cpu_ms(pid: int) -> float:
    """CPU time (user + system) a process has used so far, ms."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return (t.user + t.system) * 1000


def save_state(args: argparse.Namespace, state: dict[str, Any]) -> None:
    if args.state:
        args.state.mkdir(parents=True, exist_ok=True)
        path = args.state / "graph_bench.json"
        path.write_text(json.dumps(state))
        path.chmod(0o600)  # it holds the bench user's API key


async def drop_state(state_dir: Path) -> None:
    """Delete a kept state: its streams, its schemas (graph, memory, auth) and its folder."""
    state = json.loads((state_dir / "graph_bench.json").read_text())
    ns = state["namespace"]
    bus = await Bus.connect(os.environ.get("ENGRAM_NATS_URL", "nats://127.0.0.1:4222"), Names(ns), name="graph-bench")
    try:
        await bus.delete_streams()
    finally:
        await bus.close()
    conn = await asyncpg.connect(os.environ.get("ENGRAM_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    try:
        for schema in (f"graph_{ns}", f"mem_{ns}", f"auth_{ns}"):
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()
    shutil.rmtree(state_dir)
    print(f"dropped {state_dir} (namespace {ns}: streams and schemas)")


async def run(args: argparse.Namespace) -> list[str]:
    nats_url = os.environ.get("ENGRAM_NATS_URL", "nats://127.0.0.1:4222")
    database_url = os.environ.get("ENGRAM_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    state_file = args.state / "graph_bench.json" if args.state else None
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file and state_file.exists() else {}
    if state.get("loaded") and state["memories"] != args.memories:
        sys.exit(f"{args.state} holds {state['memories']} memories, not {args.memories}: use another --state")
    ns = state.get("namespace") or "graphbench" + uuid.uuid4().hex[:6]
    home = Path(state.get("home") or (args.state / "home" if args.state else Path(f"/tmp/{ns}")))
    graph_settings = GraphSettings(nats_url=nats_url, database_url=database_url, namespace=ns,
                                   graph_schema=f"graph_{ns}", graph_similar=True)
    mem_settings = MemorySettings(home=home, nats_url=nats_url, database_url=database_url, namespace=ns,
                                  memory_schema=f"mem_{ns}", late_interaction="none", reranker="none")
    lines: list[str] = []
    front = Front(ns, nats_url, database_url, home)
    bus = await Bus.connect(nats_url, Names(ns), name="graph-bench")
    try:
        await bus.ensure_streams()
        front.start("auth")
        if "key" not in state:
            tenant, key = await front.create_key(bus)
            state.update(namespace=ns, home=str(home), tenant=tenant, key=key)
            save_state(args, state)
        tenant, key = state["tenant"], state["key"]
        if not state.get("loaded"):
            if state.get("publishing"):  # an earlier load stopped half-way: start the log over
                await bus.delete_streams()
                await bus.ensure_streams()
            events = synthetic_events(tenant, args.memories)
            print(f"{len(events):,} events of {args.memories:,} memories")
            state.update(publishing=True)
            save_state(args, state)
            publish_s = await publish(bus, events)
            replayed = await graph_main.replay(graph_settings, lambda d, t: print(
                f"\rreplay {d:,}/{t:,}", end="", flush=True) if d % 5000 < 256 or d == t else None)
            print()
            await skip_replayed(bus, graph_settings)
            await analyze(graph_settings)
            state.update(memories=args.memories, loaded=True, publishing=False,
                         load=f"{len(events):,} events appended in {publish_s:.0f} s",
                         replay=f"graph replay (the graph service's own projection, from an empty schema): "
                                f"{replayed.events:,} events in {replayed.seconds:.1f} s = {replayed.rate:,.0f} events/s")
            save_state(args, state)
        elif args.replay:
            replayed = await graph_main.replay(graph_settings)
            await skip_replayed(bus, graph_settings)
            await analyze(graph_settings)
            state["replay"] = (f"graph replay (from an empty schema): {replayed.events:,} events in "
                               f"{replayed.seconds:.1f} s = {replayed.rate:,.0f} events/s")
            save_state(args, state)
        lines.append(f"memories in the graph: {args.memories:,} synthetic (one tenant; {state['load']}; "
                     "LoCoMo turns as contents, 10 projects, 30% in key families, 20% with provenance, one daily "
                     "log per 50 memories, 5% updated, 3% forgotten)")
        lines.append(state["replay"])
        if args.load_only:
            return lines
        front.start("gateway")
        await front.ready()
        time_pages()
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
                await caught_up(graph)
                if args.vectors:
                    lines.append(await similar_edges(args, state, client, tenant, graph, graph_settings,
                                                     mem_settings, timed))
                lines += await pages(args, front, client, tenant, key)
                save_ms: list[float] = []
                note_load("save → visible")
                vis = await visibility(client, tenant, args.visibility, save_ms)
                lines.append(f"save → node visible in the graph (save through the bus, then the page after the last "
                             f"cursor polled every 2 ms): {fmt(percentiles(vis))}; the save alone (the memory "
                             f"service's reply): {fmt(percentiles(save_ms))}")
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
            if not args.state:
                for schema in (graph_settings.graph_schema, mem_settings.memory_schema, front.auth_schema):
                    await graph.pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        front.stop()
        if not args.state:
            await bus.delete_streams()
            shutil.rmtree(home, ignore_errors=True)
        await bus.close()
    return lines


async def analyze(graph_settings: GraphSettings) -> None:
    """The graph's tables analyzed after the bulk load, as autovacuum would soon after (the machine's
    Postgres runs with autovacuum off, and a replay leaves the tables without statistics)."""
    from services.graph.adapters.pg_store import PgGraphStore

    pool = await asyncpg.create_pool(graph_settings.database_url, min_size=1, max_size=1)
    try:
        await PgGraphStore(pool, graph_settings.graph_schema).analyze()
    finally:
        await pool.close()


async def skip_replayed(bus: Bus, graph_settings: GraphSettings) -> None:
    """After a replay the graph's checkpoint is at the log's end, but its durable consumer still
    holds every event: the service would fetch them all to skip them (in batches of 256 since
    ed8c675; one at a time before, minutes at 100k). Acknowledge the replayed events on the
    consumer here, in fetches of 1,000, so the measurements start on a graph that is not catching up."""
    conn = await asyncpg.connect(graph_settings.database_url)
    try:
        upto = int(await conn.fetchval(f"SELECT coalesce(max(last_seq), 0) FROM {graph_settings.graph_schema}.checkpoints"
                                       " WHERE projection = 'graph-projector'"))
    finally:
        await conn.close()
    spec = graph_nats.consumer_spec(bus.names)
    await bus.ensure_consumer(spec)
    sub = await bus.js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
    try:
        while (info := await bus.js.consumer_info(spec.stream, spec.durable)).delivered.stream_seq < upto:
            for msg in await sub.fetch(min(1000, upto - info.delivered.stream_seq), timeout=5):
                await (msg.ack() if msg.metadata.sequence.stream <= upto else msg.nak())
    finally:
        await sub.unsubscribe()


async def caught_up(graph: Any) -> None:
    """Wait until the graph's consumer has every event of the log (after a replay it gets them all
    again and skips the projected ones): measurements start on a graph that is not catching up."""
    spec = graph_nats.consumer_spec(graph.bus.names)
    t0 = time.perf_counter()
    while (info := await graph.bus.js.consumer_info(spec.stream, spec.durable)).num_pending or info.num_ack_pending:
        print(f"\rthe graph's consumer is catching up: {info.num_pending:,} events to go", end="", flush=True)
        await asyncio.sleep(1)
    if time.perf_counter() - t0 > 1:
        print(f"\nthe graph's consumer caught up in {time.perf_counter() - t0:.0f} s")


async def similar_edges(args: argparse.Namespace, state: dict[str, Any], client: Client, tenant: str, graph: Any,
                        graph_settings: GraphSettings, mem_settings: MemorySettings, timed: TimedNeighbours) -> str:
    """Real saves (vectors): the similar-edge worker asks the memory service for each one's neighbours.
    A kept state's next run takes the next slice of turns (saved contents would dedupe)."""
    runs = int(state.get("runs", 0))
    turns = [t for _, _, t in locomo_turns()]
    texts = turns[len(turns) - (runs + 1) * args.vectors : len(turns) - runs * args.vectors]
    state["runs"] = runs + 1
    save_state(args, state)
    done = 0
    sem = asyncio.Semaphore(16)

    async def save(text: str) -> None:
        nonlocal done
        async with sem:
            await client.send(tenant, SaveMemory(content=text, project="default"))
            done += 1
            if done % 200 == 0:
                print(f"\rsaved {done:,}/{len(texts):,}", end="", flush=True)

    note_load("similar edges")
    t0 = time.perf_counter()
    await asyncio.gather(*(save(t) for t in texts))
    saved_s = time.perf_counter() - t0
    spec = graph_nats.consumer_spec(graph.bus.names)
    while True:  # every save projected (its event acknowledged by the graph), then its neighbours asked
        info = await graph.bus.js.consumer_info(spec.stream, spec.durable)
        if not (info.num_pending or info.num_ack_pending or await graph.store.similar_backlog()):
            break
        await asyncio.sleep(0.1)
    drained_s = time.perf_counter() - t0
    print()
    vectors = await graph.pool.fetchval(
        f"SELECT count(*) FROM {mem_settings.memory_schema}.memories WHERE status = 'active'")
    edges = await graph.pool.fetchval(
        f"SELECT count(*) FROM {graph_settings.graph_schema}.edges WHERE type = 'similar'")
    return (f"'similar' edges: {len(texts):,} real saves (LoCoMo turns, 16 at a time) through the bus in "
            f"{saved_s:.0f} s; the worker was done {drained_s - saved_s:.1f} s after the last save. "
            f"{len(timed.ms):,} SimilarMemories round trips to the memory service for "
            f"{sum(timed.sizes):,} memories (median {statistics.median(timed.sizes or [0]):.0f} a trip): "
            f"{fmt(percentiles(timed.ms))} (the memories' vectors from their points, one batch of dense "
            f"searches top-6 within the project, at "
            f"{vectors:,} vectors); {edges:,} edges ({edges / max(1, vectors):.1f} per memory, cosine ≥ "
            f"{graph_settings.graph_similar_min_score}, at most {graph_settings.graph_similar_limit})")


class Cpu:
    """CPU time per call, by where it is spent: the gateway process, the graph service's page
    handler (in this process: its CPU while it answers — nothing else runs meanwhile, calls are one
    at a time), and the rest of this process (the client: the MCP SDK or the bus client)."""

    def __init__(self, gateway_pid: int) -> None:
        self.gateway_pid = gateway_pid

    def start(self) -> None:
        self.t0 = (cpu_ms(self.gateway_pid), time.process_time() * 1000, sum(PAGE_CPU_MS))

    def per_call(self, calls: int) -> str:
        gateway, me, graph = (cpu_ms(self.gateway_pid), time.process_time() * 1000, sum(PAGE_CPU_MS))
        g, m, s = ((gateway - self.t0[0]) / calls, (me - self.t0[1]) / calls, (graph - self.t0[2]) / calls)
        return f"CPU per call: graph service {s:.1f} ms, gateway {g:.1f} ms, client {m - s:.1f} ms"


PAGE_CPU_MS: list[float] = []  # the graph service's CPU for each page it answered


def time_pages() -> None:
    """Count the CPU the graph service spends answering each page (before its app is built)."""
    from services.graph.application.pages import GraphPages

    answer = GraphPages.graph_page

    async def timed(self: GraphPages, call: Any, q: GraphPageQuery) -> GraphPage:
        t0 = time.process_time()
        try:
            return await answer(self, call, q)
        finally:
            PAGE_CPU_MS.append((time.process_time() - t0) * 1000)

    GraphPages.graph_page = timed  # type: ignore[method-assign]


async def jsonrpc_latencies(url: str, key: str) -> list[float]:
    """Every page from the start with ``fetch-graph-data`` as the /graph page's host calls it: one
    JSON-RPC POST to /mcp each, the answer parsed (no schema validation); latencies in ms."""
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    walk, cursor = [], None
    async with httpx2.AsyncClient(headers=headers, timeout=60.0) as http:
        for i in range(100_000):
            body = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                "name": "fetch-graph-data", "arguments": {"limit": 200, **({"cursor": cursor} if cursor else {})}}}
            t0 = time.perf_counter()
            reply = (await http.post(url + "/mcp", json=body)).json()
            walk.append((time.perf_counter() - t0) * 1000)
            if "result" not in reply or reply["result"].get("isError"):
                raise RuntimeError(f"fetch-graph-data: {reply}")
            cursor = reply["result"]["structuredContent"]["next_cursor"]
            if cursor is None:
                break
    return walk


async def pages(args: argparse.Namespace, front: Front, client: Client, tenant: str, key: str) -> list[str]:
    """200-node pages through MCP (the SDK client, then plain JSON-RPC), then through the bus; CPU
    per call by process."""
    cpu = Cpu(front.procs[-1].pid)
    note_load("MCP pages")
    cpu.start()
    mcp = await mcp_latencies(front.url, key, args.repeats)
    mcp_cpu = cpu.per_call(len(mcp["walk"]) + len(mcp["first"]))
    note_load("JSON-RPC pages")
    cpu.start()
    rpc = await jsonrpc_latencies(front.url, key)
    rpc_cpu = cpu.per_call(len(rpc))
    note_load("bus pages")
    cpu.start()
    walk, first, nodes, edge_count = await page_latencies(client, tenant, args.repeats)
    bus_cpu = cpu.per_call(len(walk) + len(first)).replace("gateway", "gateway (idle)")
    return [
        f"a 200-node page through MCP (the `mcp` SDK client with an API key, one session, against the gateway "
        f"process; {mcp['nodes']:,} nodes and {mcp['edges']:,} edges walked; a page's structuredContent "
        f"~{mcp['bytes'] / 1000:.0f} kB of JSON): `fetch-graph-data` every page from the start by cursor "
        f"{fmt(percentiles(mcp['walk']))}; `memory-graph` (the first page, {args.repeats} times) "
        f"{fmt(percentiles(mcp['first']))}; {mcp_cpu} (the SDK client checks each result against the tool's "
        f"outputSchema with `jsonschema`)",
        f"the same walk as the /graph page's host asks it (one JSON-RPC POST to /mcp per page, the answer "
        f"parsed, no schema check): {fmt(percentiles(rpc))}; {rpc_cpu}",
        f"the same pages through the bus (graph_page request-reply over NATS, as the gateway asks it; {nodes:,} "
        f"nodes and {edge_count:,} edges walked): every page from the start {fmt(percentiles(walk))}; the first "
        f"page ({args.repeats} times) {fmt(percentiles(first))}; {bus_cpu}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--vectors", type=int, default=2_000,
                        help="real saves (with vectors) for the similar edges (0: none)")
    parser.add_argument("--repeats", type=int, default=200, help="first pages asked again")
    parser.add_argument("--visibility", type=int, default=200)
    parser.add_argument("--state", type=Path, help="keep the loaded graph (namespace, schemas) and reuse it")
    parser.add_argument("--replay", action="store_true", help="with a kept state: replay the graph again")
    parser.add_argument("--load-only", action="store_true", help="build the graph (with --state) and stop")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--drop-state", action="store_true", help="delete the --state (streams, schemas, folder)")
    args = parser.parse_args()
    if args.drop_state:
        asyncio.run(drop_state(args.state))
        return
    lines = asyncio.run(run(args))
    lines.append("load average (1 min) at the start of each measurement: " + ", ".join(LOADS))
    for line in lines:
        print("-", line)
    if not args.no_record:
        record("Graph", lines)


if __name__ == "__main__":
    main()
