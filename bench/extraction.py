"""Extraction quality and speed on LoCoMo: the built-in engine against LoCoMo's observations.

Each LoCoMo session is one daily log (its turns, speakers as named, dated by the session's date).
The built-in engine extracts facts, scored as the extractor saves them: relative dates resolved
from the log's date (``domain/dates.py``, the pipeline's last step; ``--undated``: left as said);
each fact's provenance is the turn (dia_id) it came from. LoCoMo's per-session
``observation`` facts (third-person statements with evidence dia_ids) are the gold.

Matching rule (fixed): an observation is **covered** when some extracted fact whose provenance
includes one of the observation's evidence turns says the same thing: **token F1 ≥ 0.5** (tokens
are lower-cased words, English stopwords removed, Snowball-stemmed, counted as multisets: SQuAD's
F1 over content words) **or cosine ≥ 0.8** between their all-MiniLM-L6-v2 embeddings (the
product's embedder, the memory service's adapter). F1 recognises a restatement, the cosine a
paraphrase ("is over the moon" / "is enthusiastic"); both bars are high. The F1-only figures are
printed too. **Precision** is the share of extracted facts that cover at least one observation
under the same rule; **memories per observation** is facts / observations. **Throughput** is the
engine alone, one process: turns/s and logs/min (the embedder is only used for scoring).

No Postgres, no NATS, nothing downloaded. Under a minute.

    python bench/extraction.py            # print the figures
    python bench/extraction.py --record   # ... and append them to docs/benchmarks.md
    python bench/extraction.py --show 20  # ... and print 20 missed observations

**Extraction lag** (``--pipeline N``): a whole stack (``deploy.stack.Stack``, embedded NATS and
Postgres unless ENGRAM_NATS_URL / ENGRAM_DATABASE_URL name servers, the extractor with its
default built-in engine), N LoCoMo sessions saved as daily logs over REST (``POST
/v1/daily-logs``, each on its own day), and for each log the time from the save's answer until
its memories are visible: the log ``processed`` (``GET /v1/daily-logs/{id}``, a maintenance key),
its extraction result read, and every memory of the result listed by ``GET /v1/memories?keyword=``
(the read model recall uses). Two phases: **paced** (one save every ``--interval`` s, the lag of
an idle pipeline) and **burst** (N more sessions saved back to back: logs/min from the first save
until the last log's memories are visible, and the lag under that backlog). Then ``engram
reextract``'s entry re-runs all 2N logs under a new task id against the running stack (logs/min).

    python bench/extraction.py --pipeline 30 [--interval 3.0] [--record]

**Recall with extraction** (``--recall``): LoCoMo evidence recall @5/@10/@25 by question category
through ``bench/locomo.py``'s harness (the production indexing and search path, default recall:
hybrid + late interaction), twice: the 5,882 turns alone (the baseline, 0.727 / 0.801 recorded),
then the turns **and** the memories the built-in engine extracted from each session (content,
context the turn before, the session's date), each memory mapped back to its turn through its
provenance. A ranked list of memories becomes a ranked list of turns (first mention kept, so a
fact and its own turn count once); the search returns 50 memories so that 25 distinct turns remain.

    python bench/extraction.py --recall [--runs both|turns|extracted] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import snowballstemmer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import drop_shared_data, fmt, locomo, percentiles, record, stack_options  # noqa: E402

from services.extractor.domain.dates import dated  # noqa: E402
from services.extractor.domain.engine import BuiltinEngine, EngineSettings  # noqa: E402
from services.extractor.domain.model import Fact, Turn  # noqa: E402
from services.extractor.domain.text import STOPWORDS  # noqa: E402

F1_THRESHOLD = 0.5
COSINE_THRESHOLD = 0.8
_STEM = snowballstemmer.stemmer("english")
_WORD = re.compile(r"[a-z0-9]+")
_DIA = re.compile(r"D\d+:\d+")


def tokens(text: str) -> Counter[str]:
    words = [w for w in _WORD.findall(text.lower().replace("'s", "")) if w not in STOPWORDS]
    return Counter(_STEM.stemWords(words))


def f1(a: Counter[str], b: Counter[str]) -> float:
    common = sum((a & b).values())
    if not common:
        return 0.0
    precision, recall = common / sum(a.values()), common / sum(b.values())
    return 2 * precision * recall / (precision + recall)


@dataclass
class Session:
    turns: list[Turn]
    dia_of: dict[str, str]  # turn ref → dia_id
    observations: list[tuple[str, frozenset[str]]]  # (text, evidence dia_ids)
    conversation: int = 0  # which of LoCoMo's 10 conversations
    day: date | None = None  # the session's date: the log's date, relative dates resolve from it


def sessions() -> list[Session]:
    out = []
    for number, sample in enumerate(locomo()):
        conversation = sample["conversation"]
        for key, value in conversation.items():
            if not key.startswith("session_") or key.endswith("date_time") or not isinstance(value, list):
                continue
            turns, dia_of = [], {}
            for i, turn in enumerate(value):
                ref = f"turn:{i}"
                turns.append(Turn(speaker=turn["speaker"], text=turn.get("text", ""), ref=ref))
                dia_of[ref] = turn["dia_id"]
            observed = sample["observation"].get(f"{key}_observation", {})
            observations = [
                (fact[0], frozenset(_DIA.findall(str(fact[1]))))
                for facts in observed.values() for fact in facts
            ]
            when = datetime.strptime(conversation[f"{key}_date_time"].strip(), "%I:%M %p on %d %B, %Y").date()
            out.append(Session(turns, dia_of, observations, number, when))
    return out


class Similarity:
    """Cosines of fact and observation texts with the product's embedder (cached)."""

    def __init__(self, texts: list[str]) -> None:
        from services.memory.adapters.embedder import MiniLMEmbedder

        unique = list(dict.fromkeys(texts))
        vectors = MiniLMEmbedder().embed(unique)
        self.vectors = {text: vectors[i] for i, text in enumerate(unique)}

    def cosine(self, a: str, b: str) -> float:
        return float(self.vectors[a] @ self.vectors[b])


def evaluate(all_sessions: list[Session], extracted: list[list[Fact]],
             similarity: Similarity | None = None) -> dict[str, object]:
    covered = 0
    covering_facts = 0
    n_obs = sum(len(s.observations) for s in all_sessions)
    n_facts = sum(len(f) for f in extracted)
    missed: list[tuple[str, list[str]]] = []
    by_category: Counter[str] = Counter()
    by_category_hit: Counter[str] = Counter()
    for session, facts in zip(all_sessions, extracted, strict=True):
        fact_tokens = [(fact, tokens(fact.content), {session.dia_of[r] for r in fact.turn_refs if r in session.dia_of})
                       for fact in facts]
        fact_hit = [False] * len(fact_tokens)
        for text, evidence in session.observations:
            gold = tokens(text)
            hit = False
            for i, (fact, toks, dias) in enumerate(fact_tokens):
                if dias & evidence and (f1(toks, gold) >= F1_THRESHOLD or (
                        similarity is not None and similarity.cosine(fact.content, text) >= COSINE_THRESHOLD)):
                    hit = True
                    fact_hit[i] = True
            covered += hit
            if not hit:
                near = [f.content for f, _, dias in fact_tokens if dias & evidence]
                missed.append((text, near))
        covering_facts += sum(fact_hit)
        for (fact, _, _), hit in zip(fact_tokens, fact_hit, strict=True):
            by_category[fact.category.value] += 1
            by_category_hit[fact.category.value] += hit
    return {
        "observations": n_obs, "facts": n_facts, "coverage": covered / n_obs,
        "precision": covering_facts / max(1, n_facts), "per_observation": n_facts / n_obs,
        "missed": missed, "by_category": by_category, "by_category_hit": by_category_hit,
    }


# the pipeline: save → memories visible, through a running stack -----------------------------------
POLL_S = 0.1  # each watcher's poll period (the probes load the same 2 cores)


def log_bodies(n: int, skip: int = 0, total: int = 0) -> list[dict[str, Any]]:
    """``n`` LoCoMo sessions as daily-log bodies (turns as said, empty turns dropped), each on its own
    day, in LoCoMo's order, the last of ``total`` sessions yesterday (one log per user, project and date)."""
    bodies: list[dict[str, Any]] = []
    first = datetime.now(UTC).date() - timedelta(days=max(total, skip + n))
    for s in sessions()[skip: skip + n]:
        turns = [{"speaker": t.speaker, "text": t.text[:3000]} for t in s.turns if t.text.strip()][:1000]
        day: date = first + timedelta(days=skip + len(bodies))
        bodies.append({"log_date": day.isoformat(), "turns": turns})
    return bodies


async def _visible(http: Any, log_id: str, deadline: float) -> tuple[float, float, int]:
    """Wait until the log is processed, then until each memory of its result is listed (probed
    together); (when processed, when all visible, memories)."""
    loop = asyncio.get_running_loop()
    while True:
        if loop.time() > deadline:
            raise TimeoutError(f"log {log_id} not extracted in time")
        found = (await http.get(f"/v1/daily-logs/{log_id}")).json()
        status = (found.get("log") or {}).get("processing_status")
        if status == "failed":
            raise RuntimeError(f"log {log_id} failed: {found['log'].get('error_reason')}")
        if status == "processed":
            break
        await asyncio.sleep(POLL_S)
    processed_at = loop.time()
    results = (await http.get("/v1/extraction-results", params={"log_id": log_id})).json()["results"]
    ids = list(dict.fromkeys(m for r in results for m in r["memory_ids"]))

    async def content(memory_id: str) -> str:
        return str((await http.get(f"/v1/memories/{memory_id}/history")).json()["versions"][-1]["content"])

    contents = dict(zip(ids, await asyncio.gather(*(content(m) for m in ids)), strict=True))

    async def listed(memory_id: str) -> bool:
        params = {"keyword": contents[memory_id][:100], "limit": 100}
        return any(m["id"] == memory_id for m in (await http.get("/v1/memories", params=params)).json()["memories"])

    pending = list(ids)
    while pending:
        if loop.time() > deadline:
            raise TimeoutError(f"memories of log {log_id} not visible in time")
        seen = await asyncio.gather(*(listed(m) for m in pending))
        pending = [m for m, ok in zip(pending, seen, strict=True) if not ok]
        if pending:
            await asyncio.sleep(POLL_S)
    return processed_at, loop.time(), len(ids)


async def _phase(http: Any, bodies: list[dict[str, Any]],
                 interval: float) -> tuple[list[float], list[float], float, int]:
    """Save ``bodies`` (``interval`` s apart, 0: back to back); per log the lag until processed and
    until visible in ms; the span from the first save to the last log visible, in s; memories seen."""
    loop = asyncio.get_running_loop()
    watchers: list[asyncio.Task[tuple[float, float, int]]] = []
    saved_at: list[float] = []
    started = loop.time()
    for i, body in enumerate(bodies):
        if interval and i:
            await asyncio.sleep(max(0.0, started + i * interval - loop.time()))
        answer = await http.post("/v1/daily-logs", json=body)
        answer.raise_for_status()
        saved_at.append(loop.time())
        watchers.append(asyncio.create_task(_visible(http, answer.json()["id"], loop.time() + 600)))
    done = await asyncio.gather(*watchers)
    processed = [(p - saved) * 1000 for (p, _, _), saved in zip(done, saved_at, strict=True)]
    visible = [(v - saved) * 1000 for (_, v, _), saved in zip(done, saved_at, strict=True)]
    return processed, visible, max(v for _, v, _ in done) - started, sum(n for _, _, n in done)


async def _reextract(stack: Any, n_logs: int) -> tuple[float, Any]:
    from services.extractor.config import ExtractorSettings
    from services.extractor.main import reextract

    settings = ExtractorSettings(nats_url=stack.nats_url, database_url=stack.database_url,
                                 namespace=stack.o.namespace)
    started = time.perf_counter()
    report = await reextract(settings, "bench-reextract")
    assert report.logs == n_logs and report.failed == 0, report
    return time.perf_counter() - started, report


def pipeline(n: int, interval: float, keep_record: bool) -> None:
    import httpx

    from deploy.stack import Stack

    paced, burst = log_bodies(n, total=2 * n), log_bodies(n, skip=n, total=2 * n)
    n_turns = sum(len(b["turns"]) for b in paced + burst)
    options = stack_options("extraction")
    try:
        with Stack(options) as stack:
            key = stack.create_key(None, "bench", scopes=["memory:read", "memory:write", "memory:maintenance"])["key"]

            async def go() -> tuple[Any, ...]:
                async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=60.0,
                                             headers={"Authorization": f"Bearer {key}"}) as http:
                    first = await _phase(http, paced, interval)
                    second = await _phase(http, burst, 0.0)
                reextracted = await _reextract(stack, len(paced) + len(burst))
                return first, second, reextracted

            first, second, (re_s, re_report) = asyncio.run(go())
            (paced_done, paced_lag, _, paced_memories), (burst_done, burst_lag, burst_span, burst_memories) = first, second
    finally:
        drop_shared_data(options)
    lines = [
        f"extraction lag through a running stack (`engram up`'s services, built-in engine, REST, "
        f"{2 * n} LoCoMo sessions as daily logs, {n_turns:,} turns): save answered → log processed, "
        f"its result read and every memory of it listed by keyword",
        f"**lag, paced** ({n} logs, one every {interval:g} s, {paced_memories:,} memories): until all memories "
        f"visible {fmt(percentiles(paced_lag))}; until the log is processed {fmt(percentiles(paced_done))}",
        f"**lag, burst** ({n} logs saved back to back, {burst_memories:,} memories): until all memories visible "
        f"{fmt(percentiles(burst_lag))}; until the log is processed {fmt(percentiles(burst_done))}",
        f"**throughput through the pipeline** (burst, first save → last log's memories visible): "
        f"{n / burst_span * 60:,.0f} logs/min, {sum(len(b['turns']) for b in burst) / burst_span:,.0f} turns/s",
        f"`engram reextract` (its entry) over the {re_report.logs} logs under a new task id: {re_s:.1f} s, "
        f"{re_report.logs / re_s * 60:,.0f} logs/min ({re_report.facts:,} facts: {re_report.saved} saved, "
        f"{re_report.updated} updated, {re_report.kept:,} already known)",
    ]
    for line in lines:
        print("-", line)
    if keep_record:
        record("Extraction lag through the pipeline (built-in engine)", lines)
        print("recorded in docs/benchmarks.md")


# recall with extraction: turns + extracted memories, through bench/locomo.py --------------------------
def extract(engine: BuiltinEngine, turns: list[Turn], day: date | None, undated: bool = False) -> list[Fact]:
    """The facts the extractor saves for a log: the engine's, relative dates resolved from the log's day
    (``Extractor.extract``'s last step) unless ``undated``."""
    facts = engine.extract(turns)
    return facts if undated or day is None else dated(facts, day)


def recall_with_extraction(
    keep_record: bool, engine: BuiltinEngine, runs: str = "both", undated: bool = False, deep: bool = False,
    asked: list[int] | None = None,
) -> None:
    import uuid

    import locomo as L

    from contracts.memory import MemoryState

    original_add = L.Scores.add

    def add_turns(self: Any, mode: str, question: Any, ranked: list[str]) -> None:
        original_add(self, mode, question, list(dict.fromkeys(ranked)))  # a turn counts once, at its best rank

    L.Scores.add = add_turns  # type: ignore[method-assign]
    L.LIMIT = 2 * max(L.KS)  # memories searched; distinct turns are cut at 25 by the scoring
    namespace = uuid.UUID("0d6b8f1e-5c1a-4a7e-9a8b-3f0e6c2d9b71")
    figures: dict[str, Any] = {}
    chosen = [("turns", False), ("turns + extracted memories", True)]
    chosen = chosen if runs == "both" else chosen[:1] if runs == "turns" else chosen[1:]
    for label, with_facts in chosen:
        convs = L.load()
        facts_added = 0
        if with_facts:
            raw = {sample["sample_id"]: sample["conversation"] for sample in locomo()}
            for conv in convs:
                c = raw[conv.sample_id]
                n = 1
                while f"session_{n}" in c:
                    when = L.session_date(c[f"session_{n}_date_time"])
                    turns = [Turn(speaker=t["speaker"], text=t.get("text", ""), ref=f"turn:{i}", at=when)
                             for i, t in enumerate(c[f"session_{n}"])]
                    dia = [t["dia_id"] for t in c[f"session_{n}"]]
                    for j, fact in enumerate(extract(engine, turns, when.date(), undated)):
                        mid = uuid.uuid5(namespace, f"{conv.sample_id}/{n}/{j}")
                        conv.memories.append(MemoryState(
                            id=mid, tenant=L.TENANT, project=conv.sample_id, content=fact.content,
                            context=fact.context, category=fact.category, importance=fact.importance,
                            confidence=fact.confidence, created_at=when, updated_at=when, source="extractor",
                        ))  # type: ignore[call-arg]
                        conv.dia_of[str(mid)] = dia[int(fact.turn_refs[0].split(":")[1])]  # provenance → turn
                        facts_added += 1
                    n += 1
        modes = ("late", "deep") if deep else ("late",)
        result = asyncio.run(L.run(convs=convs, modes=modes, categories=(1, 2, 3, 4), asked=asked))
        for mode in modes:
            name_ = label if mode == "late" else f"{label}, deep recall"
            figures[name_] = (result, facts_added, mode)
            print(f"{name_}: {result.memories:,} memories; " + "; ".join(
                f"{name} " + "/".join(f"{result.scores.mean(mode, cats, k):.3f}" for k in L.KS)
                for name, cats in (("1–4", L.HEADLINE), *((f"{c} {L.CATEGORIES[c]}", (c,)) for c in L.HEADLINE))))
    lines = [
        "LoCoMo evidence recall @5/@10/@25 (categories 1–4, 1,536 questions), default recall (hybrid + late "
        "interaction) through bench/locomo.py's harness; extracted memories mapped back to their turn through "
        "provenance, a turn counted once at its best rank",
    ]
    if asked is not None:
        lines[0] += f"; questions of conversations {asked[0]}–{asked[-1]} only"
    for label, (result, added, mode) in figures.items():
        lines.append(
            f"**{label}** ({result.memories:,} memories" + (f", {added:,} extracted" if added else "") + "): 1–4 "
            + " / ".join(f"{result.scores.mean(mode, L.HEADLINE, k):.3f}" for k in L.KS) + "; per category: "
            + "; ".join(f"{c} {L.CATEGORIES[c]} " + "/".join(f"{result.scores.mean(mode, (c,), k):.3f}"
                                                           for k in L.KS) for c in L.HEADLINE)
        )
    for line in lines:
        print("-", line)
    if keep_record:
        record("Recall with extraction on LoCoMo (built-in engine)", lines)
        print("recorded in docs/benchmarks.md")


def L_range(text: str) -> list[int]:  # noqa: N802 - bench/locomo.py's parser, imported late like the rest of it
    import locomo as L

    return L.conversation_range(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    parser.add_argument("--show", type=int, default=0, help="print this many missed observations (random)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over all sessions (best is kept)")
    parser.add_argument("--f1-only", action="store_true", help="skip the cosine half of the rule (no embedder)")
    parser.add_argument("--pipeline", type=int, metavar="N", default=0,
                        help="measure the extraction lag through a running stack with 2N sessions (see above)")
    parser.add_argument("--interval", type=float, default=3.0, help="--pipeline: seconds between paced saves")
    parser.add_argument("--threshold", type=float, default=None,
                        help="the selector's bar (default: the engine's; -inf keeps every candidate)")
    parser.add_argument("--runs", choices=("both", "turns", "extracted"), default="both",
                        help="--recall: both runs, the turns-only baseline (recorded: 0.727 / 0.801 / 0.864) or "
                        "the turns with the extracted memories")
    parser.add_argument("--undated", action="store_true",
                        help="leave relative dates as said (the figures before they were resolved)")
    parser.add_argument("--deep", action="store_true", help='--recall: also recall with mode="deep"')
    parser.add_argument("--convs", type=L_range, default=None, metavar="RANGE",
                        help="--recall: ask only the questions of these conversations (e.g. 0-4 or 5-9)")
    parser.add_argument("--recall", action="store_true",
                        help="LoCoMo evidence recall with the extracted memories beside the turns (see above)")
    args = parser.parse_args()
    engine = BuiltinEngine(EngineSettings(threshold=args.threshold) if args.threshold is not None else None)
    if args.recall:
        recall_with_extraction(args.record, engine, runs=args.runs, undated=args.undated, deep=args.deep,
                               asked=args.convs)
        return
    if args.pipeline:
        pipeline(args.pipeline, args.interval, args.record)
        return

    all_sessions = sessions()
    n_turns = sum(len(s.turns) for s in all_sessions)
    best = cpu = float("inf")
    extracted: list[list[Fact]] = []
    for _ in range(max(1, args.repeat)):
        start, start_cpu = time.perf_counter(), time.process_time()
        extracted = [extract(engine, s.turns, s.day, args.undated) for s in all_sessions]
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    lexical = evaluate(all_sessions, extracted)
    figures = lexical
    similarity: Similarity | None = None
    if not args.f1_only:
        texts = [f.content for facts in extracted for f in facts] + [t for s in all_sessions for t, _ in s.observations]
        similarity = Similarity(texts)
        figures = evaluate(all_sessions, extracted, similarity)
    halves = {}
    for name, chosen in (("0–4 (fitted)", range(0, 5)), ("5–9 (held out)", range(5, 10))):
        picked = [i for i, s in enumerate(all_sessions) if s.conversation in chosen]
        halves[name] = evaluate([all_sessions[i] for i in picked], [extracted[i] for i in picked],
                                None if args.f1_only else similarity)
    rule = f"token F1 ≥ {F1_THRESHOLD}" + ("" if args.f1_only else f" or MiniLM cosine ≥ {COSINE_THRESHOLD}")
    categories = ", ".join(
        f"{name} {count} ({figures['by_category_hit'][name] / count:.2f})"  # type: ignore[index]
        for name, count in figures["by_category"].most_common()  # type: ignore[attr-defined]
    )
    lines = [
        f"{len(all_sessions)} LoCoMo sessions as daily logs, {n_turns:,} turns, "
        f"{figures['observations']:,} observations; built-in engine; matching rule: a fact from one of the "
        f"observation's evidence turns with {rule}",
        f"**coverage** {figures['coverage']:.3f} (target ≥ 0.75); token F1 alone {lexical['coverage']:.3f}",
        f"**precision** {figures['precision']:.3f} (facts covering some observation); token F1 alone "
        f"{lexical['precision']:.3f}",
        f"**memories per observation** {figures['per_observation']:.2f} ({figures['facts']:,} facts; "
        f"target ≤ 1.5)",
        f"**throughput** {n_turns / best:,.0f} turns/s, {len(all_sessions) / best * 60:,.0f} logs/min "
        f"(engine alone, one process, best of {args.repeat}; target ≥ 200 turns/s); per CPU second of the process "
        f"{n_turns / cpu:,.0f} turns/s (the machine's load does not count)",
        f"facts by category (share covering an observation): {categories}",
        "the selector's weights were fitted on conversations 0–4: " + "; ".join(
            f"conversations {name} coverage {half['coverage']:.3f} at {half['per_observation']:.2f} per observation"
            for name, half in halves.items()),
    ]
    if args.threshold is not None:
        lines[0] += f" (selector threshold {args.threshold:g})"
    if args.undated:
        lines[0] += " (relative dates left as said)"
    for line in lines:
        print("-", line)
    if args.show:
        rng = random.Random(7)
        missed = figures["missed"]
        for text, near in rng.sample(missed, min(args.show, len(missed))):  # type: ignore[arg-type]
            print(f"\nMISSED {text}")
            for candidate in near:
                print(f"   got {candidate}")
    if args.record:
        record("Extraction on LoCoMo (built-in engine)", lines)
        print("recorded in docs/benchmarks.md")


if __name__ == "__main__":
    main()
