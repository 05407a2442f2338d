"""Import speed against the save path's, and export / purge times, on one stack.

The issue's bar: `engram import` of an Engram export runs at ≥ 80% of the save path's sustained
rate. Both are measured in the same run on the same stack and texts (LoCoMo turns):

1. **save path**: N save commands published straight to the command stream (as the gateway
   does, `mcp_bench.preload`), sustained rate between 10% and 90% of the load;
2. **export** of that user (`engram export`'s code: pages of the memory service, JSONL);
3. **purge** of the user (`engram purge`'s code);
4. **import** of the file back (`engram import`'s code: RestoreRecords batches of 64), sustained
   rate between 10% and 90% of the records; then the user is exported again and compared.

    python bench/portability_bench.py --memories 3000            # print
    python bench/portability_bench.py --memories 3000 --record   # ... and append to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import drop_shared_data, record, stack_options
from mcp_bench import contents, preload, steady_rate

from contracts.subjects import Names
from deploy.portability import export_user, import_file
from deploy.stack import Stack
from kit.bus import Bus
from kit.purge import purge_user


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

        trace: list[tuple[float, int]] = []
        done = 0
        t0 = time.perf_counter()

        def advance(n: int) -> None:
            nonlocal done
            done += n
            trace.append((time.perf_counter() - t0, done))

        imported = await import_file(bus, first, user=None, advance=advance)
        import_s = time.perf_counter() - t0
        assert not imported.errors, imported.errors[:3]

        second = folder / "second.jsonl"
        with second.open("w") as out:
            await export_user(bus, tenant, out)
        exact = first.read_text().splitlines()[1:] == second.read_text().splitlines()[1:]
        return {
            "records": records, "export_s": export_s, "purge_s": purge_s, "purged_events": report.events,
            "import_s": import_s, "import_rate": records / import_s,
            "import_sustained": steady_rate(trace) or records / import_s, "exact": float(exact),
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
    try:
        with Stack(options, say=lambda _: None) as stack, tempfile.TemporaryDirectory() as folder:
            tenant = stack.create_key(None, "bench")["view"]["user_id"]
            trace: list[tuple[float, int]] = []
            whole = asyncio.run(preload(stack, tenant, texts, trace=trace))
            save_sustained = steady_rate(trace) or whole
            time.sleep(6)  # the index optimisation after an idle pause happens now, not during the import
            r = asyncio.run(round_trip(stack, tenant, Path(folder)))
    finally:
        drop_shared_data(options)
    ratio = r["import_sustained"] / save_sustained
    lines = [
        f"{args.memories:,} memories (LoCoMo turns), one user, the stack of `engram up` (every service its own process)",
        f"save path (commands straight to the stream): sustained {save_sustained:,.0f} memories/s "
        f"(whole load {whole:,.0f}/s)",
        f"`engram import` of the user's export after a purge: sustained {r['import_sustained']:,.0f} records/s "
        f"(whole {r['import_rate']:,.0f}/s, {r['import_s']:.1f} s) = **{ratio:.0%} of the save path** (bar: ≥ 80%)",
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
