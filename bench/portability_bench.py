"""Import speed against the save path's, and export / purge times, on one stack.

The issue's bar: `engram import` of an Engram export runs at ≥ 80% of the save path's sustained
rate. Both are measured in the same run on the same stack and texts (LoCoMo turns):

1. **save path**: N save commands published straight to the command stream (as the gateway
   does, `mcp_bench.preload`), sustained rate between 10% and 90% of the load;
2. **export** of that user (`engram export`'s code: pages of the memory service, JSONL);
3. **purge** of the user (`engram purge`'s code);
4. **import** of the file back (`engram import`'s code: RestoreRecords batches of 64), sustained
   rate between 10% and 90% of the records; then the user is exported again and compared.

The ≥ 80% comparison uses an import of an export of *other* texts into a second user (step 0,
before the round trip): the memory service's embedding cache keeps vectors by text, so importing
the texts just saved embeds nothing and would flatter the import.

    python bench/portability_bench.py --memories 3000            # print
    python bench/portability_bench.py --memories 3000 --record   # ... and append to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import drop_shared_data, record, stack_options
from mcp_bench import contents, preload, steady_rate

from contracts.portability import ExportHeader, MemoryRecord
from contracts.subjects import Names
from deploy.export_import import export_user, import_file
from deploy.stack import Stack
from kit.bus import Bus
from kit.export import jsonl
from kit.purge import purge_user


async def _sql(url: str, statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def own_database_for(options: Any) -> tuple[str, str] | None:
    """On a shared Postgres, a database of the run's own (the extractor's and graph's schemas have
    no per-run names, and a schema belongs to one install): (admin URL, database name)."""
    if not options.database_url:
        return None
    admin = options.database_url
    base, _, _ = admin.rpartition("/")
    name = f"engram_{options.namespace}"
    asyncio.run(_sql(admin, f'CREATE DATABASE "{name}"'))
    options.database_url = f"{base}/{name}"
    return admin, name


def synthetic_export(path: Path, user: str, texts: list[str]) -> None:
    """An export of memories never saved here (texts the embedding cache has not seen), so that
    the import embeds them as the save path does."""
    now = datetime.now(UTC)
    with path.open("w") as out:
        out.write(jsonl(ExportHeader(user=user, exported_at=now)))
        for text in texts:
            memory_id = uuid.uuid4()
            state = {"id": str(memory_id), "project": "default", "content": text, "source": "import-bench",
                     "created_at": now.isoformat(), "updated_at": now.isoformat()}
            out.write(jsonl(MemoryRecord.model_validate(
                {"id": memory_id, "versions": [{"event": "MemorySaved", "occurred_at": now, "state": state}]})))


async def timed_import(bus: Bus, path: Path, user: str | None) -> tuple[float, float, int]:
    """(sustained records/s, seconds, records) of `engram import`'s code on ``path``."""
    trace: list[tuple[float, int]] = []
    done = 0
    t0 = time.perf_counter()

    def advance(n: int) -> None:
        nonlocal done
        done += n
        trace.append((time.perf_counter() - t0, done))

    imported = await import_file(bus, path, user=user, advance=advance)
    seconds = time.perf_counter() - t0
    assert not imported.errors, imported.errors[:3]
    return steady_rate(trace) or done / seconds, seconds, done


async def fresh_import(stack: Stack, user: str, texts: list[str], folder: Path) -> tuple[float, float, int]:
    bus = await Bus.connect(stack.nats_url, Names(stack.o.namespace), name="bench-portability-fresh")
    try:
        path = folder / "fresh.jsonl"
        synthetic_export(path, user, texts)
        return await timed_import(bus, path, None)
    finally:
        await bus.close()


async def round_trip(stack: Stack, tenant: str, folder: Path) -> dict[str, float]:
    bus = await Bus.connect(stack.nats_url, Names(stack.o.namespace), name="bench-portability")
    try:
        first = folder / "first.jsonl"
        started = time.perf_counter()
        with first.open("w") as out:
            records = await export_user(bus, tenant, out)
        export_s = time.perf_counter() - started

        started = time.perf_counter()
        report = await purge_user(bus, tenant)
        purge_s = time.perf_counter() - started

        sustained, import_s, _ = await timed_import(bus, first, None)

        second = folder / "second.jsonl"
        with second.open("w") as out:
            await export_user(bus, tenant, out)
        exact = first.read_text().splitlines()[1:] == second.read_text().splitlines()[1:]
        return {
            "records": records, "export_s": export_s, "purge_s": purge_s, "purged_events": report.events,
            "import_s": import_s, "import_rate": records / import_s, "import_sustained": sustained, "exact": float(exact),
            "bytes": first.stat().st_size,
        }
    finally:
        await bus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=3000)
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args()
    texts = contents(args.memories)
    options = stack_options("port")
    own_database = own_database_for(options)  # every service's schema of its own, dropped at the end
    try:
        with Stack(options, say=lambda _: None) as stack, tempfile.TemporaryDirectory() as folder:
            tenant = stack.create_key(None, "bench")["view"]["user_id"]
            trace: list[tuple[float, int]] = []
            whole = asyncio.run(preload(stack, tenant, texts, trace=trace))
            save_sustained = steady_rate(trace) or whole
            time.sleep(6)  # the index optimisation after an idle pause happens now, not during the import
            fresh_user = stack.create_key(None, "bench-import")["view"]["user_id"]
            fresh_texts = [f"{t} [imported]" for t in contents(args.memories)]
            fresh_rate, fresh_s, fresh_n = asyncio.run(fresh_import(stack, fresh_user, fresh_texts, Path(folder)))
            time.sleep(6)
            r = asyncio.run(round_trip(stack, tenant, Path(folder)))
    finally:
        drop_shared_data(options)
        if own_database:
            asyncio.run(_sql(own_database[0], f'DROP DATABASE IF EXISTS "{own_database[1]}" WITH (FORCE)'))
    ratio = fresh_rate / save_sustained
    lines = [
        f"{args.memories:,} memories (LoCoMo turns), one user, the stack of `engram up` (every service its own process)",
        f"save path (commands straight to the stream): sustained {save_sustained:,.0f} memories/s "
        f"(whole load {whole:,.0f}/s)",
        f"`engram import` of an export of {fresh_n:,} memories never seen here (the embedding cache cold, as for "
        f"saves): sustained {fresh_rate:,.0f} records/s ({fresh_s:.1f} s in all) = **{ratio:.0%} of the save path** "
        f"(bar: ≥ 80%)",
        f"`engram import` of the user's own export after a purge (the embedding cache keeps vectors by text, so "
        f"nothing is embedded again): sustained {r['import_sustained']:,.0f} records/s ({r['import_s']:.1f} s)",
        f"`engram export`: {r['records']:,.0f} records, {r['bytes'] / 1e6:.1f} MB JSONL in {r['export_s']:.1f} s "
        f"({r['records'] / r['export_s']:,.0f} records/s)",
        f"`engram purge`: {r['purge_s']:.1f} s ({r['purged_events']:,.0f} events)",
        f"round trip exact (export → purge → import → export, header aside): {'yes' if r['exact'] else 'NO'}",
    ]
    for line in lines:
        print(line)
    if args.record:
        record("Portability: import vs save path, export, purge (bench/portability_bench.py)", lines)


if __name__ == "__main__":
    main()
