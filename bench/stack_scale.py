"""What a running stack holds and costs as memories are saved through the command stream (issue 33):
the end-to-end half of the scale measurements, beside bench/recall_scale.py's in-process one.

Saves LoCoMo turns (``mcp_bench.contents``) straight to the command stream, as the gateway does,
and at each checkpoint prints and records: the save rate since the last checkpoint, the RSS of each
service process, the bytes of every table of the stack's schemas (heap + TOAST + indexes), the
JetStream streams (messages, bytes), the embedded vector shard on disk, each divided by the
memories, and the size of one real memory event as the log holds it. The bytes per memory are
what docs/scaling.md multiplies out to 10M and 100M memories.

Runs against the servers named by ENGRAM_NATS_URL / ENGRAM_DATABASE_URL (the stack gets a schema
and streams of its own, dropped at the end), so the sizes are the stack's alone.

    nice -n 15 python bench/stack_scale.py --memories 10000 --checkpoints 2000,5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import drop_shared_data, memory_schema, record, stack_options  # noqa: E402
from mcp_bench import contents, preload, steady_rate  # noqa: E402
from recall_scale import disk_bytes, mib  # noqa: E402

from deploy.stack import Stack  # noqa: E402


def rss_by_service(stack: Stack) -> dict[str, int]:
    out = {}
    for name, svc in stack.services.items():
        try:
            proc = psutil.Process(svc.proc.pid)
            out[name] = sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
        except psutil.NoSuchProcess:
            continue
    return out


async def storage(stack: Stack, options: Any) -> tuple[dict[str, int], dict[str, tuple[int, int]], int | None]:
    """(bytes per schema.table, (messages, bytes) per stream, bytes of the newest memory event)."""
    from contracts.subjects import Names
    from kit.bus import Bus
    from kit.pg import create_pool

    schemas = [v for k, v in options.extra_env.items() if k.endswith("_SCHEMA")]
    pool = await create_pool(stack.database_url, max_size=1)
    try:
        rows = await pool.fetch(
            """SELECT n.nspname || '.' || c.relname AS name, pg_total_relation_size(c.oid) AS bytes
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE c.relkind = 'r' AND n.nspname = ANY($1::text[])""", schemas)
    finally:
        await pool.close()
    tables = {r["name"]: int(r["bytes"]) for r in rows}
    bus = await Bus.connect(stack.nats_url, Names(options.namespace), name="bench-stack-scale")
    try:
        streams = {}
        for spec in bus.names.streams():
            info = await bus.js.stream_info(spec.name)
            streams[spec.name] = (info.state.messages, info.state.bytes)
        event = None
        try:
            last = await bus.js.get_last_msg(bus.names.events_stream, bus.names.events_of("memory"))
            event = len(last.data or b"") + sum(len(k) + len(v) for k, v in (last.headers or {}).items())
        except Exception:  # noqa: BLE001 - a figure, not a check
            pass
    finally:
        await bus.close()
    return tables, streams, event


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--checkpoints", default="1000,2500,5000")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if not (os.environ.get("ENGRAM_NATS_URL") and os.environ.get("ENGRAM_DATABASE_URL")):
        raise SystemExit("set ENGRAM_NATS_URL and ENGRAM_DATABASE_URL: sizes are read per schema and stream")
    checkpoints = sorted({int(c) for c in args.checkpoints.split(",") if c and int(c) < args.memories} | {args.memories})
    texts = contents(args.memories)
    options = stack_options("scale")
    lines: list[str] = []
    started = time.perf_counter()

    def say(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    try:
        with Stack(options) as stack:
            tenant = stack.create_key(None, "bench")["view"]["user_id"]
            say(f"stack on the machine's NATS and Postgres (schemas and streams of its own), memory schema "
                f"{memory_schema(options)}; RSS at start (MiB): "
                + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in rss_by_service(stack).items()))
            done = 0
            for target in checkpoints:
                trace: list[tuple[float, int]] = []
                t0 = time.perf_counter()
                overall = asyncio.run(preload(stack, tenant, texts[done:target], trace=trace))
                wall = time.perf_counter() - t0
                rate = steady_rate(trace) or overall
                done = target
                tables, streams, event = asyncio.run(storage(stack, options))
                shard = disk_bytes(options.home / "qdrant")
                rss = rss_by_service(stack)
                pg_total = sum(tables.values())
                say(f"**{done:,}** memories: saves {rate:.1f}/s sustained over this step ({wall:.0f}s); "
                    f"RSS (MiB) " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in rss.items())
                    + f"; vector shard on disk {mib(shard)} ({shard / done / 1024:.1f} KiB a memory)")
                say(f"  {done:,}: Postgres {mib(pg_total)} ({pg_total / done / 1024:.1f} KiB a memory): "
                    + ", ".join(f"{k.split('.', 1)[1]} {v / done / 1024:.2f}"
                                for k, v in sorted(tables.items(), key=lambda kv: -kv[1]) if v > 64 * 1024)
                    + " KiB a memory")
                say(f"  {done:,}: JetStream: " + ", ".join(
                    f"{name} {msgs:,} messages {mib(size)} ({size / max(done, 1):,.0f} B a memory)"
                    for name, (msgs, size) in streams.items())
                    + (f"; the newest memory event {event:,} B (data + headers)" if event else ""))
    finally:
        drop_shared_data(options)
    say(f"total {time.perf_counter() - started:,.0f}s")
    if not args.no_record:
        record(f"A stack as it grows (bench/stack_scale.py), {args.memories:,} memories", lines)
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
