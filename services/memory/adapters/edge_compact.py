"""Merge a copy of the embedded vector shard's segments, in a process of its own.

The memory service runs this on a copy of its shard (``EdgeVectorIndex.compact`` in
``vectors_edge.py``): the embedded engine holds the GIL for the whole of an optimisation, so a
merge run in the service's process would stall every recall for its duration (~14 s at 100,000
points, minutes at a million). Here it stalls nobody: the process is niced, so recalls keep the
CPU first, and it dies with the service.

    python -m services.memory.adapters.edge_compact SHARD_COPY --dim 384 [--segments 2]

Prints one JSON line: the segments before and after, the points, the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import qdrant_edge as qe

from services.memory.adapters.vectors_edge import COMPACT_SEGMENTS, compaction_config

#: How much lower than the service this process runs (recalls first).
NICENESS = 10


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="the shard's copy (not the live shard: the service holds that one open)")
    parser.add_argument("--dim", type=int, required=True, help="the dense vectors' dimension (as the shard has it)")
    parser.add_argument("--segments", type=int, default=COMPACT_SEGMENTS, help="segments to merge into")
    args = parser.parse_args(argv)
    if args.segments < 1:
        parser.error("--segments must be at least 1")
    os.nice(NICENESS)
    started = time.monotonic()
    shard = qe.EdgeShard.load(args.path, compaction_config(args.dim, args.segments))
    try:
        before = shard.info().segments_count
        shard.optimize()
        shard.flush()
        info = shard.info()
    finally:
        shard.close()
    print(json.dumps({"segments_before": before, "segments": info.segments_count, "points": info.points_count,
                      "seconds": round(time.monotonic() - started, 3)}), flush=True)


if __name__ == "__main__":
    main()
