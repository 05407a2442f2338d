"""Replay speed: load N memories through the command stream (sustained save throughput), stop
the memory service, rebuild its read models from the event log, and check that the read model is
identical (a digest) and recall unchanged (the same top-10 on a sample of questions).

    python bench/replay_bench.py --memories 10000
    python bench/replay_bench.py --memories 100000 --state /var/tmp/engram-replay-100k   # resumable, kept
    python bench/replay_bench.py --memories 5000 --no-cache     # replay embedding everything again
    python bench/replay_bench.py --memories 100000 --state DIR --profile   # where the replay's time goes

The save path fills the embedding cache (services/memory/search/vector_cache.py), so a replay
finds every sentence vector and every memory's token rows there (``--no-cache`` empties it
first and replays without it: the cost before the cache). ``--state DIR`` keeps the loaded stack
(embedded NATS and Postgres in DIR) so later runs replay it again without loading.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import drop_shared_data, locomo, memory_schema, record, stack_options  # noqa: E402
from mcp_bench import contents, preload  # noqa: E402
from save_throughput import embedder_throughput  # noqa: E402

from contracts.memory import Recall  # noqa: E402
from deploy.stack import Stack  # noqa: E402
from services.memory.adapters.embedding_cache import PgEmbeddingCache  # noqa: E402
from services.memory.adapters.late_encoder import build_late_encoder  # noqa: E402
from services.memory.config import MemorySettings  # noqa: E402
from services.memory.main import memory_app  # noqa: E402
from services.memory.replay import ensure_service_stopped, rebuild  # noqa: E402

_COPY_SUFFIX = re.compile(r" \[note \d+\]$")


async def recall_ids(app, tenant: str, questions: list[str], *, exact: bool = False) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """The ids (and the turns) each question recalls; ``exact``: with the dense search scanning every
    point instead of walking the HNSW graph (the embedded index only), so that the comparison sees
    the vectors, not the graph's approximation."""
    if exact and not hasattr(app.index, "exact_search"):
        return []
    if hasattr(app.index, "exact_search"):
        app.index.exact_search = exact
    out = []
    for q in questions:
        result = await app.service.recall(tenant, Recall(query=q, project="bench", limit=10))
        out.append([str(h.memory.id) for h in result.hits])
        # past LoCoMo's 5,882 turns the bench saves each turn again as "<turn> [note k]": near-identical
        # memories whose order among themselves is a tie; the turns a recall finds are compared too
        out.append(["text:" + _COPY_SUFFIX.sub("", h.memory.content) for h in result.hits])
        out.append([f"{h.score:.5f}" for h in result.hits])  # equal scores, other order: ties
    if hasattr(app.index, "exact_search"):
        app.index.exact_search = False
    return out


def postgres_processes(database_url: str) -> list[Any]:
    """The embedded Postgres serving ``database_url`` (its postmaster, started with ``-p <port>``,
    and every backend), for its CPU time; empty with a shared server (its CPU is others' too)."""
    from urllib.parse import urlsplit

    import psutil

    port = str(urlsplit(database_url).port or 5432)
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        args = proc.info["cmdline"] or []
        if (proc.info["name"] or "").startswith("postgres") and "-p" in args and port in args:
            out += [proc, *proc.children(recursive=True)]
    return out


def cpu_of(procs: list[Any]) -> float:
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except Exception:  # exited
            continue
    return total


def compare(before: list[list[str]], after: list[list[str]]) -> dict[str, Any]:
    """How alike two recalls of the same questions are: ids (identical, same set, overlap) and turns."""
    if not before:
        return {}
    texts_before, texts_after = before[1::3], after[1::3]
    scores_before, scores_after = before[2::3], after[2::3]
    before, after = before[0::3], after[0::3]
    n = len(before)
    return dict(
        n=n, same_scores=sum(a == b for a, b in zip(scores_before, scores_after, strict=True)),
        overlap=sum(len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(before, after, strict=True)) / n,
        same=sum(a == b for a, b in zip(before, after, strict=True)),
        same_set=sum(set(a) == set(b) for a, b in zip(before, after, strict=True)),
        same_turns=sum(set(a) == set(b) for a, b in zip(texts_before, texts_after, strict=True)),
        turn_overlap=sum(len(set(a) & set(b)) / max(1, len(set(a)))
                         for a, b in zip(texts_before, texts_after, strict=True)) / n,
    )


def describe(c: dict[str, Any]) -> str:
    return (f"top-10 identical for {c['same']}/{c['n']} questions (the same ten, in any order: {c['same_set']}/{c['n']}), "
            f"overlap {100 * c['overlap']:.1f}%; the same turns found (suffix of repeated turns ignored) for "
            f"{c['same_turns']}/{c['n']}, overlap {100 * c['turn_overlap']:.1f}%; the same ten scores (ties aside, "
            f"the same ranking) for {c['same_scores']}/{c['n']}")


async def read_model_digest(app) -> str:  # type: ignore[no-untyped-def]
    return await app.store.pool.fetchval(
        f"SELECT md5(string_agg(id::text || version || status || content_hash || coalesce(md5(late_tokens), ''), "
        f"',' ORDER BY id)) "
        f"FROM {app.store.s}.memories"
    )


def index_digest(app) -> str:  # type: ignore[no-untyped-def]
    """Every point of the embedded shard — id, payload, dense vector (float32 bytes), keyword
    vector — hashed in id order: equal digests, equal indexes."""
    import hashlib

    import numpy as np
    import qdrant_edge as qe

    shard, points, offset = app.index._require(), [], None
    while True:
        page, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=5000, with_payload=True, with_vector=True))
        points += page
        if offset is None:
            break
    digest = hashlib.sha256()
    for point in sorted(points, key=lambda r: str(r.id)):
        sparse = point.vector.get("keywords")
        digest.update(str(point.id).encode())
        digest.update(json.dumps(point.payload, sort_keys=True).encode())
        digest.update(np.asarray(point.vector["dense"], np.float32).tobytes())
        if sparse is not None:
            digest.update(np.asarray(sparse.indices, np.uint32).tobytes() + np.asarray(sparse.values, np.float32).tobytes())
    return f"{len(points)} points, {digest.hexdigest()[:16]}"


async def replay_and_compare(
    settings: MemorySettings, tenant: str, questions: list[str], *, use_cache: bool, profile: bool, batch: int,
    embedded_postgres: bool, rebuild_index: bool,
) -> dict[str, Any]:
    async with memory_app(settings) as app:
        await ensure_service_stopped(app.bus)
        cache = PgEmbeddingCache(app.store.pool, app.store.s)
        if not use_cache:
            await cache.clear()
            app.service.encoders.cache = None
        entries = await cache.count()
        memories = await app.store.pool.fetchval(f"SELECT count(*) FROM {app.store.s}.memories")
        digest_before = await read_model_digest(app)
        index_before = index_digest(app)
        before = await recall_ids(app, tenant, questions)
        exact_before = await recall_ids(app, tenant, questions, exact=True)
        phases = {"index build (optimize)": 0.0, "drop": 0.0}
        upserting, build_cpu = [0.0], [0.0]
        timed_optimize, timed_drop, timed_upsert = app.index.optimize, app.store.drop_read_model, app.index.upsert

        async def upsert(points: Any) -> None:
            started = time.perf_counter()
            try:
                await timed_upsert(points)
            finally:
                upserting[0] += time.perf_counter() - started

        async def optimize() -> bool:
            started, cpu = time.perf_counter(), time.process_time()
            try:
                return await timed_optimize()
            finally:
                phases["index build (optimize)"] += time.perf_counter() - started
                build_cpu[0] += time.process_time() - cpu

        async def drop() -> None:
            started = time.perf_counter()
            try:
                await timed_drop()
            finally:
                phases["drop"] += time.perf_counter() - started

        app.index.optimize, app.store.drop_read_model, app.index.upsert = optimize, drop, upsert  # type: ignore[method-assign]
        postgres = postgres_processes(settings.database_url) if embedded_postgres else []
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        cpu_started, pg_started = time.process_time(), cpu_of(postgres)
        report = await rebuild(app, batch=batch, rebuild_index=rebuild_index)
        phases_cpu, pg_cpu = time.process_time() - cpu_started, cpu_of(postgres) - pg_started
        if profiler:
            profiler.disable()
        digest_after = await read_model_digest(app)
        index_after = index_digest(app)
        after = await recall_ids(app, tenant, questions)
        exact_after = await recall_ids(app, tenant, questions, exact=True)
        hits = app.service.encoders.cache.hits if app.service.encoders.cache else 0
    out: dict[str, Any] = dict(rate=report.rate, events=report.events, seconds=report.seconds,
                               identical=digest_before == digest_after, recall=compare(before, after),
                               exact=compare(exact_before, exact_after), upserting=upserting[0], build_cpu=build_cpu[0],
                               entries=entries, hits=hits, memories=memories, phases=phases, cpu=phases_cpu,
                               pg_cpu=pg_cpu if postgres else None, points=report.details,
                               index_before=index_before, index_after=index_after)
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        out["profile"] = text.getvalue()
    return out


async def pad_events(nats_url: str, namespace: str, tenant: str, target: int) -> int:
    """Append copies of the tenant's memory events (new memory ids, project ``bench-pad``) until the
    event log holds ``target`` memory events; return how many were appended. The copies carry the
    texts the save path embedded, so the embedding cache serves them as it serves the originals:
    a way to replay at a scale the loaded machine could not save in the time at hand."""
    from nats.js import api

    from contracts.subjects import MEMORY, Names
    from kit.bus import Bus

    bus = await Bus.connect(nats_url, Names(namespace), name="bench-pad")
    try:
        names = bus.names
        sub = await bus.js.pull_subscribe(
            names.events_of(MEMORY, tenant), stream=names.events_stream,
            config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL, ack_policy=api.AckPolicy.NONE,
                                      inactive_threshold=120.0),
        )
        have = (await sub.consumer_info()).num_pending or 0
        originals: list[dict[str, Any]] = []
        while len(originals) < have:
            originals += [json.loads(m.data) for m in await sub.fetch(min(512, have - len(originals)), timeout=10.0)]
        await sub.unsubscribe()
        added, round_ = 0, 0
        while have + added < target:
            round_ += 1
            ids: dict[str, str] = {}
            pending = []
            for event in originals:
                if have + added + len(pending) >= target:
                    break
                new_id = ids.setdefault(event["aggregate_id"], str(uuid.uuid4()))
                copy = {**event, "event_id": str(uuid.uuid4()), "aggregate_id": new_id,
                        "data": {**event["data"], "id": new_id, "project": f"bench-pad{round_}"}}
                pending.append(bus.js.publish(names.event(tenant, MEMORY, new_id), json.dumps(copy).encode(),
                                              headers={"Nats-Msg-Id": copy["event_id"]}))
                if len(pending) >= 512:
                    await asyncio.gather(*pending)
                    added += len(pending)
                    pending = []
            await asyncio.gather(*pending)
            added += len(pending)
        return added
    finally:
        await bus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--state", type=Path, help="keep the loaded stack in this folder and replay it again next time")
    parser.add_argument("--no-cache", action="store_true", help="empty the embedding cache and replay without it")
    parser.add_argument("--profile", action="store_true", help="print where the replay's time goes (cProfile)")
    parser.add_argument("--replay-only", action="store_true",
                        help="with --state: replay what the state holds, even if its load was cut short")
    parser.add_argument("--pad-to", type=int, default=0,
                        help="before replaying, append copies of the saved memory events (new ids, same texts) "
                             "until the log holds this many memory events")
    parser.add_argument("--batch", type=int, default=256, help="events fetched and applied at once")
    parser.add_argument("--rebuild-index", action="store_true",
                        help="drop the vector index and write every point (by default the replay keeps the points "
                             "whose fingerprint is already right)")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    texts = contents(args.memories)
    questions = [qa["question"] for conv in locomo() for qa in conv["qa"]][:100]
    state_file = args.state / "replay.json" if args.state else None
    if args.state:
        args.state.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file and state_file.exists() else {}
    if state and state.get("memories") != args.memories:
        sys.exit(f"{args.state} holds {state.get('memories')} memories, not {args.memories}: use another --state")
    options = stack_options("replay", args.state / "home" if args.state else None, state.get("namespace"))
    load_line = state.get("load_line", "")
    try:
        with Stack(options) as stack:
            if args.replay_only and "tenant" in state and not state.get("loaded"):
                load_line = f"load of {args.memories:,} memories cut short: replaying what was saved"
            elif not state.get("loaded"):
                if "tenant" not in state:  # else an interrupted load resumes: saved contents dedupe
                    state.update(memories=args.memories, namespace=options.namespace,
                                 tenant=stack.create_key(None, "bench")["view"]["user_id"])
                    if state_file:
                        state_file.write_text(json.dumps(state))
                started = time.perf_counter()
                save_rate = asyncio.run(preload(stack, state["tenant"], texts))
                load_line = (f"loaded {args.memories:,} memories through the command stream in "
                             f"{(time.perf_counter() - started) / 60:.1f} min ({save_rate:.1f} saves/s)")
                state.update(loaded=True, load_line=load_line, save_rate=save_rate)
                if state_file:
                    state_file.write_text(json.dumps(state))
            for service in stack.services.values():  # the replay needs NATS and Postgres only: nothing
                service.stop()                        # else competes for the CPU (the graph follows the log)
            time.sleep(1.0)
            if args.pad_to:
                padded = asyncio.run(pad_events(stack.nats_url, options.namespace, state["tenant"], args.pad_to))
                load_line += f"; {padded:,} copies of saved memory events appended (new ids, same texts)"
                if padded:
                    print("copies appended: the read model compared below predates them; run again to compare")
            settings = MemorySettings(home=options.home, nats_url=stack.nats_url, database_url=stack.database_url,
                                      namespace=options.namespace, memory_schema=memory_schema(options))
            result = asyncio.run(replay_and_compare(settings, state["tenant"], questions,
                                                    use_cache=not args.no_cache, profile=args.profile,
                                                    batch=args.batch, embedded_postgres=stack.postgres is not None,
                                                    rebuild_index=args.rebuild_index))
    finally:
        if not args.state:
            drop_shared_data(options)
    lines = [load_line]
    if not args.state and args.memories <= 10_000:
        late = build_late_encoder(MemorySettings().late_interaction)  # as the memory service would (env included)
        embed_rate, _ = embedder_throughput(texts, late)
        lines.append(f"embedder alone on the same work (embed_memories, 64 per call{', with late-interaction tokens' if late else ''}): "
                     f"{embed_rate:.1f} memories/s → saves at {100 * state['save_rate'] / embed_rate:.0f}%")
    cache_note = (f"embedding cache: {result['entries']:,} entries, {result['hits']:,} hits"
                  if not args.no_cache else "no embedding cache (emptied first): every text embedded again")
    lines += [
        f"replay of {result['memories']:,} memories ("
        + ("drop and rebuild Postgres + vectors" if args.rebuild_index else "drop and rebuild Postgres, vectors reconciled")
        + f"; {cache_note}): {result['events']:,} events in "
        f"{result['seconds']:.1f} s = {result['rate']:.1f} events/s (of which "
        + ", ".join(f"{name} {secs:.1f} s" for name, secs in result["phases"].items())
        + f"; events alone {result['events'] / max(1e-9, result['seconds'] - sum(result['phases'].values())):.0f}/s); "
        f"the replaying process used {result['cpu']:.1f} s of CPU = {result['events'] / max(1e-9, result['cpu']):.0f} events "
        f"per CPU-second of its own, of which the index build {result['build_cpu']:.1f} s (the events alone: "
        f"{result['events'] / max(1e-9, result['cpu'] - result['build_cpu']):.0f} per CPU-second; NATS apart)"
        + (f"; Postgres {result['pg_cpu']:.1f} s of CPU" if result["pg_cpu"] is not None else "")
        + f"; the index's upserts took {result['upserting']:.1f} s of wall time (batch {args.batch})",
        f"vector index: {result['points'].get('points_written', 0):,} points written, "
        f"{result['points'].get('points_kept', 0):,} kept (fingerprint right), {result['points'].get('points_swept', 0):,} swept; "
        f"index before {result['index_before']}, after {result['index_after']} "
        f"({'identical' if result['index_before'] == result['index_after'] else 'DIFFERENT'}: ids, payloads, vectors)",
        f"read model after replay {'identical' if result['identical'] else 'DIFFERENT'} (digest of every memory's id, version, "
        f"status, content hash, late-interaction tokens); recall: {describe(result['recall'])}",
    ]
    if result["exact"]:
        lines.append(f"recall with exact dense search (no HNSW approximation): {describe(result['exact'])}")
    print("\n".join(lines))
    if "profile" in result:
        print(result["profile"])
    if not args.no_record:
        record(f"Replay, {args.memories:,} memories{' (no cache)' if args.no_cache else ''}", lines)


if __name__ == "__main__":
    main()
