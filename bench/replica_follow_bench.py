"""Two memory replicas on the embedded engine: how long until a save taken by one is in the other's
vector index (its follower, services/memory/application/index_follow.py), and what following costs.

In-process on the machine's servers (ENGRAM_NATS_URL / ENGRAM_DATABASE_URL), in a namespace and a
schema of its own, dropped afterwards. Replica 1 serves the commands (its command consumer, inline
projection, shared projector) and follows the log like replica 2; each ``--saves`` save goes through
the bus one after another (``--gap-ms`` apart) and is timed from the send to: replica 1's reply, the
point in replica 2's shard (polled every 1 ms by id, ``VectorIndex.fingerprints``). Then a burst of
``--burst`` saves sent at once: the time until replica 2 holds them all (the follower's throughput).

    python bench/replica_follow_bench.py --saves 200 --burst 500
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from common import fmt, locomo, percentiles, record

from contracts.memory import SaveMemory
from contracts.subjects import Names
from kit.bus import Bus
from kit.client import Client
from services.memory.application.index_follow import IndexFollower
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as nats_entry
from services.memory.main import memory_app


def turns(n: int) -> list[str]:
    texts = [turn["text"] for conv in locomo() for session in conv["conversation"].values()
             if isinstance(session, list) for turn in session if turn.get("text")]
    return [f"{texts[i % len(texts)]} [{i}]" for i in range(n)]


async def run(args: argparse.Namespace) -> list[str]:
    nats_url = os.environ.get("ENGRAM_NATS_URL", "nats://127.0.0.1:4222")
    database_url = os.environ.get("ENGRAM_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    namespace = "follow" + uuid.uuid4().hex[:6]
    home = Path(tempfile.mkdtemp(prefix="engram-follow-"))
    base = dict(home=home, nats_url=nats_url, database_url=database_url, namespace=namespace,
                memory_schema=f"follow_{uuid.uuid4().hex[:8]}")
    texts = turns(args.saves + args.burst + args.warmup)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        async with memory_app(MemorySettings(**base, memory_replica="1")) as a, \
                memory_app(MemorySettings(**base, memory_replica="2")) as b:
            follow_a = IndexFollower(a.service.projection, a.store, a.index)
            follow_b = IndexFollower(b.service.projection, b.store, b.index)
            tasks += nats_entry.start(a.bus, a.service, stop)
            await nats_entry.serve_queries(a.bus, a.service)
            tasks += await nats_entry.start_index_follower(a.bus, a.service, follow_a, "1", stop, from_start=True)
            tasks += await nats_entry.start_index_follower(b.bus, b.service, follow_b, "2", stop, from_start=True)
            bus = await Bus.connect(nats_url, Names(namespace), name="bench-follow")
            client = Client(bus, command_timeout_s=30)
            tenant = "bench"

            async def save(text: str) -> str:
                result = await client.send(tenant, SaveMemory(content=text, project="follow"), key=uuid.uuid4().hex)
                return str(result.memory_id)

            async def on_b(memory_id: str, timeout: float = 30.0) -> None:
                deadline = time.perf_counter() + timeout
                while memory_id not in await b.index.fingerprints([memory_id]):
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"{memory_id} never reached replica 2")
                    await asyncio.sleep(0.001)

            for text in texts[:args.warmup]:
                await on_b(await save(text))
            replied, followed = [], []
            cpu_b = time.process_time()
            for text in texts[args.warmup:args.warmup + args.saves]:
                started = time.perf_counter()
                memory_id = await save(text)
                replied.append(1000 * (time.perf_counter() - started))
                await on_b(memory_id)
                followed.append(1000 * (time.perf_counter() - started))
                await asyncio.sleep(args.gap_ms / 1000)
            burst = texts[args.warmup + args.saves:]
            started = time.perf_counter()
            ids = await asyncio.gather(*(save(t) for t in burst))
            sent = time.perf_counter() - started
            for memory_id in ids:
                await on_b(memory_id, timeout=300.0)
            caught_up = time.perf_counter() - started
            cpu = time.process_time() - cpu_b
            same = len(await b.index.point_ids()) == len(await a.index.point_ids())
            await bus.close()
            lines = [
                f"save → reply (replica 1): {fmt(percentiles(replied))}",
                f"save → point in replica 2's shard (its follower): {fmt(percentiles(followed))}",
                f"a burst of {len(burst)} saves sent at once: replied in {sent:.1f} s ({len(burst) / sent:.0f} saves/s), "
                f"all in replica 2's shard {caught_up:.1f} s after the first was sent; points equal on both: {same}",
                f"follower 2 wrote {follow_b.written:,} points, found {follow_b.kept:,} right; follower 1 (the replica that "
                f"projected inline) wrote {follow_a.written:,}, found {follow_a.kept:,} right; this process's CPU over "
                f"the timed part {cpu:.1f} s (both replicas, the embedder included)",
            ]
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await a.bus.delete_streams()
            await a.store.pool.execute(f"DROP SCHEMA IF EXISTS {base['memory_schema']} CASCADE")
            return lines
    finally:
        stop.set()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--gap-ms", type=int, default=20)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    lines = asyncio.run(run(args))
    load = os.getloadavg()
    lines.append(f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print("\n".join(lines))
    if not args.no_record:
        record("Memory replicas on the embedded engine: the follower's lag (bench/replica_follow_bench.py)", lines)


if __name__ == "__main__":
    main()
