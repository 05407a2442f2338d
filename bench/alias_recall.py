"""What the alias hop costs a recall: "What does my sister like to eat?" asked with the name the
user's memories give her ("My sister Ana …"), against the same question without the hop.

    ENGRAM_NATS_URL=nats://127.0.0.1:4222 ENGRAM_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        python bench/alias_recall.py --background 5000 --rounds 100

The memory service runs in this process (``memory_app``: the real embedded vector engine, both
encoders, Postgres and NATS JetStream, on a namespace and schema of its own, dropped at the end).
The user holds ``--background`` LoCoMo turns and 16 memories about relatives, pets and what they do;
each round asks 8 questions naming a relation, with and without the hop, alternated, and reports wall
and CPU p50 / p95 per recall, and where the memory that answers (it never says the relation) ranks.
A question without relation words runs no hop (a regular expression): its cost is not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import LOCOMO, locomo_turns, machine, percentiles, record  # noqa: E402

from contracts.envelope import CommandEnvelope  # noqa: E402
from contracts.memory import Recall  # noqa: E402
from services.memory.config import MemorySettings  # noqa: E402
from services.memory.main import memory_app  # noqa: E402
from services.memory.search import hops  # noqa: E402

FAMILY = [
    "My sister Ana is visiting next week", "Ana loves sushi and ramen",
    "My dog Biscuit is three years old", "Biscuit sleeps on the sofa every afternoon",
    "My boss Priya approved the new roadmap", "Priya wants the report on Thursdays",
    "My brother Tomas lives in Valencia", "Tomas teaches chemistry at a high school",
    "My mom Rosa grows tomatoes", "Rosa calls every Sunday evening",
    "My friend Kenji plays the cello", "Kenji is learning to surf this summer",
    "My cat Miso hides under the bed", "Miso only eats tuna pate",
    "My neighbour Greta has two ponies", "Greta is retiring in March",
]
#: (question, the memory that answers it)
ASKED = [
    ("What does my sister like to eat?", "Ana loves sushi and ramen"),
    ("Where does my dog sleep?", "Biscuit sleeps on the sofa every afternoon"),
    ("When does my boss want the report?", "Priya wants the report on Thursdays"),
    ("What does my brother teach?", "Tomas teaches chemistry at a high school"),
    ("When does my mom call?", "Rosa calls every Sunday evening"),
    ("What is my friend learning this summer?", "Kenji is learning to surf this summer"),
    ("What does my cat eat?", "Miso only eats tuna pate"),
    ("When is my neighbour retiring?", "Greta is retiring in March"),
]


async def run(args: argparse.Namespace) -> list[str]:
    nats, database = os.environ.get("ENGRAM_NATS_URL"), os.environ.get("ENGRAM_DATABASE_URL")
    if not nats or not database:
        sys.exit("set ENGRAM_NATS_URL and ENGRAM_DATABASE_URL (servers with JetStream and Postgres 15+)")
    settings = MemorySettings(home=Path(tempfile.mkdtemp(prefix="engram-alias-")), nats_url=nats,
                              database_url=database, namespace="alias" + uuid.uuid4().hex[:6],
                              memory_schema="mem_alias_" + uuid.uuid4().hex[:6])
    user = "bench"
    async with memory_app(settings) as app:
        try:
            turns = [text for _, _, text in locomo_turns()][: args.background]
            started = time.perf_counter()
            for n, content in enumerate([*turns, *FAMILY], 1):
                done = await app.service.handle_command(CommandEnvelope(
                    command_id=uuid.uuid4().hex, type="save_memory", tenant=user, payload={"content": content}))
                assert done.ok, done.error
                if n % 1000 == 0:
                    print(f"  saved {n:,} memories ({time.perf_counter() - started:.0f} s)", flush=True)
            samples: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": [], "rank": []} for k in ("hop", "none")}
            default = hops.MAX_ASKED_RELATIONS
            for r in range(args.rounds + 1):  # round 0 warms up
                for label in (("hop", "none") if r % 2 else ("none", "hop")):
                    hops.MAX_ASKED_RELATIONS = default if label == "hop" else 0
                    for question, answer in ASKED:
                        w0, c0 = time.perf_counter(), time.process_time()
                        found = await app.service.recall(user, Recall(query=question, limit=10))
                        wall, cpu = (time.perf_counter() - w0) * 1000, (time.process_time() - c0) * 1000
                        if r:
                            contents = [h.memory.content for h in found.hits]
                            samples[label]["wall"].append(wall)
                            samples[label]["cpu"].append(cpu)
                            samples[label]["rank"].append(contents.index(answer) + 1 if answer in contents else 11)
            hops.MAX_ASKED_RELATIONS = default
        finally:
            await app.bus.delete_streams()
            await app.store.pool.execute(f"DROP SCHEMA IF EXISTS {settings.memory_schema} CASCADE")
    lines = [f"{machine()}; {args.background:,} LoCoMo turns + {len(FAMILY)} memories about relatives and pets; "
             f"{len(ASKED)} questions naming a relation × {args.rounds} rounds, alternated"]
    for label, title in (("none", "the question alone"), ("hop", "with the alias hop")):
        w, c, ranks = percentiles(samples[label]["wall"]), percentiles(samples[label]["cpu"]), samples[label]["rank"]
        per_question = [ranks[i::len(ASKED)][0] for i in range(len(ASKED))]
        lines.append(f"{title}: wall p50 {w['p50']:.1f} · p95 {w['p95']:.1f} ms; CPU p50 {c['p50']:.1f} · "
                     f"p95 {c['p95']:.1f} ms; the answer's rank per question {per_question} "
                     f"(first: {sum(1 for x in per_question if x == 1)} of {len(ASKED)})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--background", type=int, default=5000, help="LoCoMo turns the user holds besides")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--no-record", action="store_true", help="print only (no docs/benchmarks-log.md entry)")
    args = parser.parse_args()
    if not LOCOMO.exists():
        sys.exit(f"LoCoMo data not found at {LOCOMO} (set ENGRAM_LOCOMO)")
    lines = asyncio.run(run(args))
    print("\n".join(lines))
    if not args.no_record:
        record("Alias hop: a question naming a relation (issue 34)", lines)


if __name__ == "__main__":
    main()
