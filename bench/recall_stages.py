"""CPU and wall time of a recall's query encoders, in process (issue 33): the sentence embedder's
pass over a query (its LRU caches off: distinct questions), as a memory's text and as recall's query, and the late-interaction encoder's.
The rest of a recall's memory-service CPU (hybrid search, reading and scoring the candidates'
stored tokens, the bus) is what ``bench/mcp_bench.py`` prints for the process minus these.

    python bench/recall_stages.py --queries 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import locomo


def timed(fn, items):  # type: ignore[no-untyped-def]
    wall, cpu = [], []
    for x in items:
        w0, c0 = time.perf_counter(), time.process_time()
        fn(x)
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
    return wall, cpu


def line(name: str, wall: list[float], cpu: list[float]) -> str:
    q = statistics.quantiles(wall, n=20)
    return (f"{name}: wall p50 {statistics.median(wall):.2f} / p95 {q[18]:.2f} ms; "
            f"CPU mean {statistics.fmean(cpu):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    from services.memory.adapters.embedder import MiniLMEmbedder
    from services.memory.adapters.late_encoder import ColbertEncoder

    questions = list(dict.fromkeys(qa["question"] for conv in locomo() for qa in conv["qa"]))
    warm, measured = questions[-50:], questions[: args.queries]
    embedder, late = MiniLMEmbedder(cache_size=0), ColbertEncoder()
    for q in warm:
        embedder.embed([q])
        embedder.embed_query(q)
        late.encode_query(q)
    lines = [
        line("one text embedded as a memory (MiniLM int8, per-block kernel)", *timed(lambda q: embedder.embed([q]), measured)),
        line("query embedding as recall runs it (embed_query)", *timed(embedder.embed_query, measured)),
        line("late-interaction query encoding (ColBERT-small int8)", *timed(late.encode_query, measured)),
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
