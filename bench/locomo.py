"""Recall quality on LoCoMo: evidence recall@5/10/25 per question category, for the dense-only,
keyword-only and hybrid recall modes, through the production indexing and search path.

Each LoCoMo conversation becomes one project of one tenant; every dialogue turn becomes a memory
(see :func:`memory_content` for its text) whose ``created_at`` is its session's date and whose
``context`` is the previous turn of its session (``--no-context``: none). The memories
go through the same code as a save: ``embed_memories`` (sentence texts → ``MiniLMEmbedder.embed`` →
``memory_vector`` weighted by ``passage_weights``) → ``point_for`` → ``EdgeVectorIndex.upsert``. Each question is then searched exactly as ``RecallPipeline.recall``
searches (query embedding, ``query_vector``, ``index.search`` with ``active_filter`` and the mode),
with limit 25, and the retrieved turns are compared with the question's evidence turns.

No Postgres, no NATS, nothing downloaded. A few minutes on two cores.

    python bench/locomo.py            # print the table
    python bench/locomo.py --record   # ... and append it to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import LOCOMO, locomo, percentiles, record

from contracts.memory import MemoryState
from services.memory.adapters.embedder import MiniLMEmbedder
from services.memory.adapters.late_encoder import ColbertEncoder
from services.memory.adapters.reranker import CrossEncoderReranker
from services.memory.adapters.vector_factory import build_vector_index
from services.memory.config import MemorySettings
from services.memory.domain.decay import DECAY_BLEND, DecayPolicy, blended, policy_from_settings, weight
from services.memory.domain.keywords import query_vector
from services.memory.domain.question_split import split_question
from services.memory.search.hops import deep_fusion
from services.memory.search.indexing import (
    active_filter,
    embed_memories,
    point_for,
    rerank_order,
    rerank_text,
)
from services.memory.search.late import (
    document_matrix,
    late_document,
    late_order,
    late_prefetch_limit,
    maxsim_packed,
    pack,
)
from services.memory.search.ports import VectorIndex
from services.memory.search.recall import search as recall_search

TENANT = "locomo"
KS = (5, 10, 25)
LIMIT = max(KS)
MODES = ("dense", "sparse", "hybrid", "late", "rerank", "deep")
MODE_LABEL = {
    "dense": "dense", "sparse": "keyword", "hybrid": "hybrid search",
    "late": "hybrid + late interaction (default)", "rerank": "hybrid + late + rerank",
    "deep": "deep (mode=\"deep\")",
}
RERANK_CANDIDATES: int = MemorySettings.model_fields["rerank_candidates"].default
LATE_CANDIDATES: int = MemorySettings.model_fields["late_candidates"].default
#: LoCoMo's category numbers (as used in locomo10.json and the paper's evaluation code).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
HEADLINE = (1, 2, 3, 4)
#: The LoCoMo paper's best retriever (DRAGON, dialogue turns as the retrieval unit), recall@k.
DRAGON = {5: 0.567, 10: 0.662, 25: 0.767}
_NAMESPACE = uuid.UUID("5f1c1a52-7d0e-4c43-9a55-9a3b8f0c2e11")
_EVIDENCE_RE = re.compile(r"D(\d+):(\d+)")


# --- data -------------------------------------------------------------------------------------
def session_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → aware UTC datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def memory_content(turn: dict[str, Any]) -> str:
    """A dialogue turn as an assistant would save it: ``"Speaker: text"``, plus the caption of a
    shared photo when there is one (LoCoMo gives BLIP captions; the conversation itself only says
    things like "here's a pic", so without the caption the turn is about nothing)."""
    content = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        content += f" [shared a photo: {caption}]"
    return content


@dataclass
class Question:
    conv: str
    question: str
    category: int
    evidence: frozenset[str]


@dataclass
class Conversation:
    sample_id: str
    memories: list[MemoryState] = field(default_factory=list)
    dia_of: dict[str, str] = field(default_factory=dict)  # memory id -> dia_id
    questions: list[Question] = field(default_factory=list)


def normalise_evidence(raw: Sequence[str], known: set[str]) -> frozenset[str]:
    """Evidence ids as dia_ids of this conversation. The file has a few malformed entries
    (``"D8:6; D9:17"``, ``"D:11:26"``, ``"D30:05"``); ids naming no turn are dropped."""
    out = set()
    for item in raw:
        for m in _EVIDENCE_RE.finditer(item.replace("D:", "D")):
            dia = f"D{int(m.group(1))}:{int(m.group(2))}"
            if dia in known:
                out.add(dia)
    return frozenset(out)


def load(content: Callable[[dict[str, Any]], str] = memory_content, context: bool = True) -> list[Conversation]:
    """The conversations as memories. With ``context``, each turn's memory carries the turn before
    it in its session as its ``context`` (what a client importing a conversation passes: the
    message a turn answers); the first turn of a session has none."""
    convs = []
    for raw in locomo():
        c = raw["conversation"]
        conv = Conversation(raw["sample_id"])
        n = 1
        while f"session_{n}" in c:
            when = session_date(c[f"session_{n}_date_time"])
            previous: str | None = None
            for turn in c[f"session_{n}"]:
                mid = uuid.uuid5(_NAMESPACE, f"{conv.sample_id}/{turn['dia_id']}")
                conv.memories.append(MemoryState(
                    id=mid, tenant=TENANT, project=conv.sample_id, content=content(turn),
                    context=previous if context else None, created_at=when, updated_at=when, source="locomo",
                ))  # type: ignore[call-arg]  # defaults of importance, confidence, version
                conv.dia_of[str(mid)] = turn["dia_id"]
                previous = content(turn)
            n += 1
        known = set(conv.dia_of.values())
        for qa in raw["qa"]:
            evidence = normalise_evidence(qa.get("evidence", []), known)
            if evidence:  # 4 questions of categories 1-4 cite no resolvable turn
                conv.questions.append(Question(conv.sample_id, qa["question"], int(qa["category"]), evidence))
        convs.append(conv)
    return convs


# --- scoring ----------------------------------------------------------------------------------
@dataclass
class Scores:
    """Per (mode, category): recall@k of each question, and whether all evidence was in the top k."""

    recall: dict[tuple[str, int, int], list[float]] = field(default_factory=dict)
    complete: dict[tuple[str, int, int], list[float]] = field(default_factory=dict)

    def add(self, mode: str, question: Question, ranked: list[str]) -> None:
        for k in KS:
            found = len(question.evidence.intersection(ranked[:k]))
            key = (mode, question.category, k)
            self.recall.setdefault(key, []).append(found / len(question.evidence))
            self.complete.setdefault(key, []).append(float(found == len(question.evidence)))

    def mean(self, mode: str, cats: Sequence[int], k: int, which: str = "recall") -> float:
        table = self.recall if which == "recall" else self.complete
        vals = [v for c in cats for v in table.get((mode, c, k), [])]
        return statistics.fmean(vals) if vals else float("nan")

    def count(self, cats: Sequence[int]) -> int:
        return sum(len(self.recall.get(("hybrid", c, KS[0]), [])) for c in cats)


# --- the run ----------------------------------------------------------------------------------
@dataclass
class Run:
    scores: Scores
    timings: dict[str, float]
    search_ms: dict[str, list[float]]
    memories: int
    questions: int


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        transient=True,
    )


async def run(
    *,
    convs: list[Conversation] | None = None,
    embedder: MiniLMEmbedder | None = None,
    modes: Sequence[str] = MODES[:4],
    categories: Sequence[int] = (1, 2, 3, 4, 5),
    asked: Sequence[int] | None = None,
    batch: int = 64,
    search: Callable[..., Any] | None = None,
    keyword_feedback: bool = False,
    decay_policy: DecayPolicy | None = None,
) -> Run:
    """Index every conversation into one fresh embedded index, then search each question.

    ``search`` (default: the recall pipeline's search, ``services.memory.search.recall.search``)
    lets variants be measured through the same harness; it is called with the index and the same
    keywords as ``VectorIndex.search``.
    ``keyword_feedback=False`` measures hybrid search without its second (feedback) round.
    ``decay_policy``: order the final hits by relevance times the decay weight
    (:func:`services.memory.domain.decay.weight`, as ``RecallPipeline`` does), the question asked
    just after its conversation's last session.
    ``asked``: the positions (0–9) of the conversations whose questions are asked (default all);
    every conversation is indexed all the same, so the tenant's keyword statistics do not change.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    convs = convs if convs is not None else load()
    embedder = embedder or MiniLMEmbedder()
    timings["load data + model"] = time.perf_counter() - t0
    states = [m for c in convs for m in c.memories]
    chosen = {convs[i].sample_id for i in asked} if asked is not None else {c.sample_id for c in convs}
    questions = [q for c in convs if c.sample_id in chosen for q in c.questions if q.category in categories]

    late_encoder = ColbertEncoder() if {"late", "rerank", "deep"} & set(modes) else None
    stored_tokens: dict[str, bytes] = {}  # memory id -> packed token vectors, as Postgres keeps them
    home = Path(tempfile.mkdtemp(prefix="engram-locomo-"))
    index: VectorIndex = build_vector_index(qdrant_url=None, path=home / "shard", dim=embedder.dim)
    try:
        await index.ensure()
        with _progress() as progress:
            task = progress.add_task("embedding + indexing turns", total=len(states))
            embed_s = upsert_s = late_s = 0.0
            for start in range(0, len(states), batch):
                chunk = states[start : start + batch]
                t = time.perf_counter()
                vectors = embed_memories(embedder, chunk)
                embed_s += time.perf_counter() - t
                t = time.perf_counter()
                await index.upsert([point_for(s, v) for s, v in zip(chunk, vectors, strict=True)])
                upsert_s += time.perf_counter() - t
                if late_encoder is not None:
                    t = time.perf_counter()
                    encoded = late_encoder.encode_documents([late_document(s) for s in chunk])
                    stored_tokens.update(
                        (str(s.id), pack(document_matrix(e))) for s, e in zip(chunk, encoded, strict=True)
                    )
                    late_s += time.perf_counter() - t
                progress.advance(task, len(chunk))
            timings["embed turns"] = embed_s
            timings["index turns (point_for + upsert)"] = upsert_s
            if late_encoder is not None:
                timings["late-interaction tokens of turns"] = late_s

            t = time.perf_counter()
            qvecs = [embedder.embed_query(q.question) for q in questions]  # as recall embeds a query
            timings["embed questions"] = time.perf_counter() - t

            dia_of = {mid: dia for c in convs for mid, dia in c.dia_of.items()}
            memory_of = {str(m.id): m for c in convs for m in c.memories}
            asked_at = {c.sample_id: max(m.created_at for m in c.memories) for c in convs}
            rerank_text_of = {str(m.id): rerank_text(m) for c in convs for m in c.memories}
            scores = Scores()
            search_ms: dict[str, list[float]] = {m: [] for m in modes}
            do_search = search or (lambda idx, **kw: recall_search(idx, keyword_feedback=keyword_feedback, **kw))
            task = progress.add_task("searching questions", total=len(questions))
            t = time.perf_counter()
            reranker = CrossEncoderReranker() if "rerank" in modes else None
            content_of = {str(m.id): m.content for c in convs for m in c.memories}

            async def late_ranked(text: str, conv: str) -> list[str]:
                """The default recall's order for ``text`` (a sub-question of deep recall)."""
                assert late_encoder is not None
                found = await do_search(
                    index, dense=[float(x) for x in embedder.embed_query(text)], sparse=query_vector(text),
                    mode="hybrid", limit=LATE_CANDIDATES, filter=active_filter(TENANT, conv),
                    prefetch_limit=late_prefetch_limit(LATE_CANDIDATES),
                )
                ids = [h.id for h in found]
                late = maxsim_packed(late_encoder.encode_query(text), [stored_tokens[i] for i in ids], late_encoder.dim)
                order = late_order(text, [memory_of[i] for i in ids], [h.score for h in found], late.tolist())
                return [ids[i] for i, _ in order]

            for q, qvec in zip(questions, qvecs, strict=True):
                for mode in modes:
                    # exactly what RecallPipeline.recall does, minus the Postgres lookups
                    s = time.perf_counter()
                    late_mode = late_encoder is not None and mode in ("late", "rerank", "deep")
                    dense = qvec if mode != "sparse" else None
                    sparse = query_vector(q.question) if mode != "dense" else None
                    limit = LIMIT
                    if late_mode:
                        limit = max(LIMIT, LATE_CANDIDATES, RERANK_CANDIDATES if mode == "rerank" else 0)
                    hits = await do_search(
                        index, dense=dense, sparse=sparse, mode="hybrid" if late_mode else mode, limit=limit,
                        filter=active_filter(TENANT, q.conv),
                        prefetch_limit=late_prefetch_limit(limit) if late_mode else None,
                    )
                    ids = [h.id for h in hits]
                    scores_ = [h.score for h in hits]
                    if late_encoder is not None and late_mode:
                        tokens = late_encoder.encode_query(q.question)
                        late = maxsim_packed(tokens, [stored_tokens[i] for i in ids], late_encoder.dim)
                        fused = late_order(q.question, [memory_of[i] for i in ids], scores_, late.tolist())
                        ids, scores_ = [ids[i] for i, _ in fused], [f for _, f in fused]
                    if mode == "deep" and late_encoder is not None:
                        # what hops.deep_hops does: each part of a joined question recalled alone, then the fusion
                        parts = [await late_ranked(sub, q.conv) for sub in split_question(q.question)]
                        ids = [i for i, _ in deep_fusion(q.question, [(i, content_of[i]) for i in ids], parts)]
                    if reranker is not None and mode == "rerank":
                        ids, scores_ = ids[:RERANK_CANDIDATES], scores_[:RERANK_CANDIDATES]
                        relevance = reranker.score(q.question, [rerank_text_of[i] for i in ids]).tolist()
                        ids = [ids[i] for i, _ in rerank_order(relevance, scores_)]
                    if decay_policy is not None:
                        ids, scores_ = decayed(ids, scores_, memory_of, asked_at[q.conv], decay_policy,
                                               float(os.environ.get("ENGRAM_BENCH_DECAY_BLEND", DECAY_BLEND)))
                    ids = ids[:LIMIT]
                    search_ms[mode].append((time.perf_counter() - s) * 1000)
                    scores.add(mode, q, [dia_of[i] for i in ids])
                progress.advance(task)
            timings["search questions"] = time.perf_counter() - t
    finally:
        await index.close()
        shutil.rmtree(home, ignore_errors=True)
    return Run(scores, timings, search_ms, len(states), len(questions))


def decayed(ids: list[str], scores: list[float], memory_of: dict[str, MemoryState], now: datetime,
            policy: DecayPolicy, blend: float = DECAY_BLEND) -> tuple[list[str], list[float]]:
    """``ids`` re-ordered by score blended with the decay weight at ``now`` (RecallPipeline's ``_weighed``)."""
    weighed = [(blended(s, weight(importance=m.importance, category=m.category, written_at=m.valid_from or m.created_at,
                           now=now, content=m.content, pinned=m.pinned, forget_after=m.forget_after,
                           repeats=m.repeats, policy=policy), blend), i, s)
               for i, s in zip(ids, scores, strict=True) for m in (memory_of[i],)]
    weighed.sort(key=lambda t: -t[0])
    return [i for _, i, _ in weighed], [s for _, _, s in weighed]


# --- output -----------------------------------------------------------------------------------
def _headline_rows(r: Run) -> list[tuple[str, list[float]]]:
    return [(MODE_LABEL[m], [r.scores.mean(m, HEADLINE, k) for k in KS]) for m in MODES if m in r.search_ms]


def table(r: Run) -> Table:
    t = Table(title=f"LoCoMo evidence recall — {r.memories:,} turns, 10 conversations")
    t.add_column("category")
    t.add_column("n", justify="right")
    t.add_column("mode")
    for k in KS:
        t.add_column(f"R@{k}", justify="right")
    t.add_column("all@10", justify="right")
    groups: list[tuple[str, Sequence[int]]] = [(f"{c} {CATEGORIES[c]}", (c,)) for c in HEADLINE]
    groups.append(("1–4 overall", HEADLINE))
    if r.scores.count((5,)):
        groups.append(("5 adversarial", (5,)))
    for name, cats in groups:
        for i, mode in enumerate(m for m in MODES if m in r.search_ms):
            style = "bold" if name.startswith("1–4") else None
            t.add_row(
                name if i == 0 else "", str(r.scores.count(cats)) if i == 0 else "", MODE_LABEL[mode],
                *(f"{r.scores.mean(mode, cats, k):.3f}" for k in KS),
                f"{r.scores.mean(mode, cats, 10, 'complete'):.3f}",
                style=style,
            )
        if name.startswith("1–4"):
            t.add_row("", "", "DRAGON (paper)", *(f"{DRAGON[k]:.3f}" for k in KS), "", style="dim")
        t.add_section()
    return t


def markdown(r: Run) -> list[str]:
    modes = [m for m in MODES if m in r.search_ms]
    lines = [
        f"{r.memories:,} dialogue turns as memories (one project per conversation, one tenant), "
        f"{r.scores.count(HEADLINE)} questions of categories 1–4; evidence recall@5/@10/@25, "
        "all-evidence-found rate @10",
    ]
    for mode in modes:
        lines.append(
            f"**{MODE_LABEL[mode]}** 1–4: "
            + " / ".join(f"{r.scores.mean(mode, HEADLINE, k):.3f}" for k in KS)
            + f" (all@10 {r.scores.mean(mode, HEADLINE, 10, 'complete'):.3f}); per category: "
            + "; ".join(
                f"{c} {CATEGORIES[c]} (n={r.scores.count((c,))}) "
                + "/".join(f"{r.scores.mean(mode, (c,), k):.3f}" for k in KS)
                for c in HEADLINE
            )
        )
    lines.append("DRAGON (LoCoMo paper, dialogue turns): " + " / ".join(f"{DRAGON[k]:.3f}" for k in KS))
    if r.scores.count((5,)):
        lines.append(
            "category 5 adversarial (not in the headline): "
            + "; ".join(
                f"{MODE_LABEL[m]} " + "/".join(f"{r.scores.mean(m, (5,), k):.3f}" for k in KS) for m in modes
            )
        )
    lines.append("phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in r.timings.items()))
    lines.append(
        "index.search latency (limit 25): "
        + "; ".join(
            f"{MODE_LABEL[m]} p50 {percentiles(v)['p50']:.2f} ms, p95 {percentiles(v)['p95']:.2f} ms"
            for m, v in r.search_ms.items()
        )
    )
    return lines


def conversation_range(text: str) -> list[int]:
    """``"0-4"`` → [0, 1, 2, 3, 4]; ``"5-9"``, ``"0,2,7"`` and mixes (``"0-2,7"``) likewise."""
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"not a conversation range: {text!r}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help="append the results to docs/benchmarks.md")
    parser.add_argument(
        "--keyword-feedback", action="store_true",
        help="hybrid search with its keyword-feedback round (ENGRAM_KEYWORD_FEEDBACK=true; off by default)",
    )
    parser.add_argument(
        "--rerank", action="store_true",
        help=f"also measure recall with rerank: the cross-encoder re-orders the best {RERANK_CANDIDATES} hybrid "
        "hits, fused with the search's order (adds ~25 minutes on 2 cores)",
    )
    parser.add_argument(
        "--decay", action="store_true",
        help="order the final hits by relevance times the decay weight (importance, recency by category), "
        "as the recall pipeline does, each question asked just after its conversation's last session",
    )
    parser.add_argument(
        "--deep", action="store_true",
        help='also measure recall with mode="deep" (the first hits about what the question names, and each part '
        "of a question that joins two things, fused with the default recall; services/memory/search/hops.py)",
    )
    parser.add_argument(
        "--no-context", action="store_true",
        help="save each turn without the turn before it as its context (the form measured before session 6)",
    )
    parser.add_argument(
        "--convs", type=conversation_range, default=None, metavar="RANGE",
        help="ask only the questions of these conversations (positions 0–9 in the file, e.g. 0-4 — the ones "
        "ranking constants are fitted on — or 5-9, held out); all ten are indexed all the same",
    )
    args = parser.parse_args()
    console = Console()
    if not LOCOMO.exists():
        sys.exit(f"LoCoMo data not found at {LOCOMO} (set ENGRAM_LOCOMO)")
    modes = [*MODES[:4], *(["rerank"] if args.rerank else []), *(["deep"] if args.deep else [])]
    convs = load(context=not args.no_context)
    result = asyncio.run(run(convs=convs, keyword_feedback=args.keyword_feedback, modes=modes, asked=args.convs,
                             decay_policy=policy_from_settings(os.environ) if args.decay else None))
    console.print(table(result))
    timing = Table(title="phases")
    timing.add_column("phase")
    timing.add_column("seconds", justify="right")
    for phase, seconds in result.timings.items():
        timing.add_row(phase, f"{seconds:.1f}")
    for m, samples in result.search_ms.items():
        p = percentiles(samples)
        timing.add_row(f"index.search {MODE_LABEL[m]} p50 / p95 (ms)", f"{p['p50']:.2f} / {p['p95']:.2f}")
    console.print(timing)
    if args.record:
        title = "LoCoMo recall quality" + (" (keyword feedback on)" if args.keyword_feedback else "")
        title += " (with rerank)" if args.rerank else ""
        title += " (with deep recall)" if args.deep else ""
        title += " (turns without context)" if args.no_context else ""
        title += " (decay on)" if args.decay else ""
        title += f" (questions of conversations {args.convs[0]}–{args.convs[-1]})" if args.convs else ""
        record(title, markdown(result))
        console.print("appended to docs/benchmarks.md")


if __name__ == "__main__":
    main()
