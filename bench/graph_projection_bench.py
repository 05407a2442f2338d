"""The graph's projection: replay events/s (event by event against in bulk) and where the time of
save → node visible goes, stage by stage.

In-process on the machine's servers (ENGRAM_NATS_URL / ENGRAM_DATABASE_URL), in a namespace and
schemas of its own, dropped afterwards:

1. **Replay** — ``--memories`` synthetic memories' events (``graph_bench.synthetic_events``: LoCoMo
   turns, 10 projects, key families, provenance, updates, forgets) are appended to the event log,
   then the graph is rebuilt from them ``--runs`` times each way: one transaction per event (the
   live projection's path, ``--per-event-memories`` of them: it is slow) and in bulk (a fetched
   batch a transaction). Figures: events/s (median of the runs) and this process's CPU seconds
   per 1,000 events (Postgres's own CPU is not in it).
2. **Save → visible** — the memory service (commands and queries) and the graph service run in
   this process; ``--visibility`` saves go through the bus one after another, each timed at every
   stage: the save sent → the event stamped by the memory service (``occurred_at``) → the graph's
   consumer hands it to the projection → the projection's transaction committed → the save's
   reply → the node on a page (the page after the newest node seen before, polled every 2 ms:
   a light query, unlike a poll of the last whole page).

    python bench/graph_projection_bench.py --memories 20000 --visibility 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt, percentiles, record
from graph_bench import publish, synthetic_events

from contracts.graph import MEMORY_AGGREGATE, GraphPage, GraphPageQuery
from contracts.memory import SaveMemory
from contracts.subjects import Names
from kit.bus import Bus
from kit.client import Client
from services.graph import main as graph_main
from services.graph.config import GraphSettings
from services.graph.domain.model import encode_cursor, filters_digest
from services.memory.config import MemorySettings
from services.memory.main import memory_app


async def replays(settings: GraphSettings, bulk: bool, runs: int, batch: int) -> tuple[float, float, int]:
    """Median events/s and CPU seconds (this process) per 1,000 events over ``runs`` replays."""
    rates, cpus, events = [], [], 0
    for _ in range(runs):
        cpu = time.process_time()
        report = await graph_main.replay(settings, batch=batch, bulk=bulk)
        cpus.append((time.process_time() - cpu) / max(1, report.events) * 1000)
        rates.append(report.rate)
        events = report.events
    return statistics.median(rates), statistics.median(cpus), events


async def replay_figures(args: argparse.Namespace, nats_url: str, database_url: str) -> list[str]:
    lines = []
    for label, memories, bulk, runs in (("event by event", args.per_event_memories, False, 1),
                                        ("in bulk", args.memories, True, args.runs)):
        if memories <= 0:
            continue
        ns = "gprojbench" + uuid.uuid4().hex[:6]
        settings = GraphSettings(nats_url=nats_url, database_url=database_url, namespace=ns,
                                 graph_schema=f"graph_{ns}", graph_similar=False)
        bus = await Bus.connect(nats_url, Names(ns), name="graph-projection-bench")
        try:
            await bus.ensure_streams()
            await publish(bus, synthetic_events("bench", memories))
            rate, cpu, events = await replays(settings, bulk, runs, args.batch)
            lines.append(f"graph replay {label} ({memories:,} synthetic memories, {events:,} events"
                         f"{f', batches of {args.batch}' if bulk else ''}, median of {runs}): {rate:,.0f} events/s, "
                         f"{cpu:.2f} CPU-s of the replaying process per 1,000 events")
            print(lines[-1])
        finally:
            async with graph_main.graph_app(settings) as app:
                await app.pool.execute(f"DROP SCHEMA IF EXISTS {settings.graph_schema} CASCADE")
            await bus.delete_streams()
            await bus.close()
    return lines


async def visibility_figures(args: argparse.Namespace, nats_url: str, database_url: str) -> list[str]:
    ns = "gvisbench" + uuid.uuid4().hex[:6]
    tenant = "bench"
    graph_settings = GraphSettings(nats_url=nats_url, database_url=database_url, namespace=ns,
                                   graph_schema=f"graph_{ns}", graph_similar=True)
    mem_settings = MemorySettings(home=Path(f"/tmp/{ns}"), nats_url=nats_url, database_url=database_url,
                                  namespace=ns, memory_schema=f"mem_{ns}", late_interaction="none", reranker="none")
    bus = await Bus.connect(nats_url, Names(ns), name="graph-visibility-bench")
    lines: list[str] = []
    try:
        await bus.ensure_streams()
        if args.visibility_memories:
            await publish(bus, synthetic_events(tenant, args.visibility_memories))
            await graph_main.replay(graph_settings)
        async with memory_app(mem_settings) as mem, graph_main.graph_app(graph_settings) as graph:
            await graph.pool.execute(f"TRUNCATE {graph_settings.graph_schema}.similar_queue")  # synthetic: no vectors
            stamps: dict[str, dict[str, float]] = {}
            projector = graph.projection.projector
            inner = projector._handlers[MEMORY_AGGREGATE]

            async def timed(event: Any, seq: int, checkpoint: str | None) -> bool:
                got = time.time()
                wrote = await inner(event, seq, checkpoint)
                stamps[event.aggregate_id] = {"received": got, "committed": time.time(),
                                              "stamped": event.occurred_at.timestamp()}
                return wrote

            projector.route(MEMORY_AGGREGATE, timed)
            bulk = getattr(graph.projection, "apply_batch", None)  # None: a checkout from before the bulk path

            async def timed_batch(batch: Any, checkpoint: str) -> int:
                got = time.time()
                wrote: int = await bulk(batch, checkpoint)
                done = time.time()
                for event, _ in batch:
                    if event.aggregate == MEMORY_AGGREGATE:
                        stamps[event.aggregate_id] = {"received": got, "committed": done,
                                                      "stamped": event.occurred_at.timestamp()}
                return wrote

            if bulk is not None:
                graph.projection.apply_batch = timed_batch  # type: ignore[method-assign]
            stop = asyncio.Event()
            tasks = [mem.service.runtime.start_commands(mem.bus, stop, prepare=mem.service.memories.prime_saves)]
            await mem.service.runtime.serve_queries(mem.bus)
            tasks += await graph_main.start(graph, stop)
            client = Client(mem.bus, command_timeout_s=60, query_timeout_s=30)
            stages: dict[str, list[float]] = {k: [] for k in
                                              ("stamped", "received", "committed", "replied", "visible")}
            try:
                warm = None
                for i in range(args.warmup):
                    warm = await client.send(tenant, SaveMemory(content=f"warm-up {uuid.uuid4().hex} #{i}"))
                caught_up = time.time()
                while warm is not None and str(warm.memory_id) not in stamps:  # the replay's hand-over backlog
                    if time.time() - caught_up > 900:
                        raise RuntimeError("the graph did not catch up in 15 minutes")
                    await asyncio.sleep(0.05)
                lines.append(f"the live consumer went through the replay's hand-over (every event again) and the "
                             f"warm-up saves in {time.time() - caught_up:.1f} s after the last warm-up save")
                # the poll asks for the nodes after the newest one seen so far (its cursor made here
                # from its order number): an empty page until the probe is there, then one node
                digest = filters_digest(GraphPageQuery(), None)

                async def end_cursor() -> str:
                    last = await graph.pool.fetchval(
                        f"SELECT coalesce(max(seq), 0) FROM {graph_settings.graph_schema}.nodes WHERE tenant = $1", tenant)
                    return encode_cursor(int(last), digest)

                async def on_page(node_id: str, after: str) -> bool:
                    page: GraphPage = await client.ask(tenant, GraphPageQuery(cursor=after, limit=1000))
                    return any(n.id == node_id for n in page.nodes)

                cursor = await end_cursor()
                for i in range(args.visibility):
                    t0 = time.time()
                    saved = await client.send(tenant, SaveMemory(content=f"visibility probe {uuid.uuid4().hex} #{i}"))
                    replied = time.time()
                    want = str(saved.memory_id)
                    while not await on_page(want, cursor):
                        await asyncio.sleep(0.002)
                    seen = time.time()
                    cursor = await end_cursor()
                    st = stamps.get(want)
                    if st is None:
                        continue
                    for k in ("stamped", "received", "committed"):
                        stages[k].append((st[k] - t0) * 1000)
                    stages["replied"].append((replied - t0) * 1000)
                    stages["visible"].append((seen - t0) * 1000)
                    await asyncio.sleep(args.gap_ms / 1000)
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
            nodes = await graph.pool.fetchval(f"SELECT count(*) FROM {graph_settings.graph_schema}.nodes")
            names = {"stamped": "the memory service stamped the event", "received": "the graph's consumer had it",
                     "committed": "the graph's transaction committed", "replied": "the save's reply arrived",
                     "visible": "the node was on a page"}
            lines.append(f"save → visible, {len(stages['visible'])} saves one after another ({args.gap_ms} ms apart) "
                         f"into a graph of {nodes:,} nodes; time since the save was sent until:")
            for k, label in names.items():
                lines.append(f"  {label}: {fmt(percentiles(stages[k]))}")
            gaps = [v - c for v, c in zip(stages["visible"], stages["committed"], strict=True)]
            lines.append(f"  (visible − committed: the page poll's own share: {fmt(percentiles(gaps))})")
            for line in lines:
                print(line)
            await graph.pool.execute(f"DROP SCHEMA IF EXISTS {graph_settings.graph_schema} CASCADE")
            await graph.pool.execute(f"DROP SCHEMA IF EXISTS {mem_settings.memory_schema} CASCADE")
    finally:
        await bus.delete_streams()
        await bus.close()
        shutil.rmtree(mem_settings.home, ignore_errors=True)
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    nats_url = os.environ.get("ENGRAM_NATS_URL", "nats://127.0.0.1:4222")
    database_url = os.environ.get("ENGRAM_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    lines = []
    if not args.no_replay:
        lines += await replay_figures(args, nats_url, database_url)
    if args.visibility:
        lines += await visibility_figures(args, nats_url, database_url)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=20_000, help="synthetic memories for the bulk replay")
    parser.add_argument("--per-event-memories", type=int, default=2_000,
                        help="synthetic memories for the event-by-event replay (0: skip)")
    parser.add_argument("--runs", type=int, default=3, help="bulk replays (the median is reported)")
    parser.add_argument("--batch", type=int, default=512, help="events a bulk transaction")
    parser.add_argument("--no-replay", action="store_true")
    parser.add_argument("--visibility", type=int, default=200, help="saves timed stage by stage (0: skip)")
    parser.add_argument("--visibility-memories", type=int, default=20_000,
                        help="synthetic memories in the graph before the saves")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--gap-ms", type=int, default=20, help="pause between two timed saves")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--note", default="", help="a line about the machine's load during the run")
    args = parser.parse_args()
    lines = asyncio.run(run(args))
    load = os.getloadavg()
    lines.append(f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}{'; ' + args.note if args.note else ''}")
    if not args.no_record:
        record("Graph projection (bench/graph_projection_bench.py)", lines)


if __name__ == "__main__":
    main()
