"""Fit the weights of recall's learned order on LoCoMo conversations 0–4; report them on 5–9.

    python bench/fit_order.py            # candidates (~2.5 min on 2 cores, then cached), fit, report
    python bench/fit_order.py --show     # also print the fitted weights as Python, for the module

Recall's candidates are what the default recall finds before it orders them: the hybrid search's
best 50 in each question's conversation, with late interaction's MaxSim — exactly what
``RecallPipeline.recall`` computes (production functions: ``embed_memories``, ``point_for``, the
embedded index, ``recall.search``, ``maxsim_packed``, ``rerank_order``). They are built once and
kept in ``--cache`` (JSON, gzipped, in the user's cache folder; delete it after changing the search). Each candidate's features come
from ``services.memory.domain.candidate_order.candidate_features``, as recall computes them.

The fit: pairwise logistic regression (RankNet): for every question of conversations 0–4
(categories 1–5: the adversarial questions keep the order honest about whom a question names),
each evidence candidate against each other candidate, on features scaled to unit variance; plain
gradient descent from zero with an L2 penalty, so the result is the same on every run. The
weights are printed in the features' own units (what ``WEIGHTS`` holds).

Reported, per category and overall (R@5 / R@10, and R@25), on conversations 0–4 (fitted) and 5–9
(held out): the fused order recall had before (late interaction and search, by rank), the weights
in the module, the weights fitted now, and each with deep recall's fusion on top.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import locomo as lc  # noqa: E402  (bench/locomo.py: the data and the production functions it imports)

from contracts.memory import MemoryState  # noqa: E402
from services.memory.domain.candidate_order import (  # noqa: E402
    FEATURES,
    WEIGHTS,
    Candidate,
    candidate_features,
    learned_order,
)
from services.memory.search.hops import deep_fusion  # noqa: E402
from services.memory.search.late import LATE_CANDIDATES  # noqa: E402

FIT_CONVS = range(0, 5)
HELD_OUT = range(5, 10)
FIT_CATEGORIES = (1, 2, 3, 4, 5)
KS = (5, 10, 25)


@dataclass
class Asked:
    conv: int
    question: str
    category: int
    evidence: frozenset[str]
    candidates: list[tuple[Candidate, str, str]]  # (candidate, memory id, dia_id), in the fused order
    parts: list[list[tuple[str, str]]]  # each sub-question's (memory id, dia_id) in its fused order (deep recall)


async def index_turns(states: list[MemoryState], embedder: lc.MiniLMEmbedder, late: lc.ColbertEncoder,
                      index: lc.VectorIndex, progress: Progress) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every turn embedded and indexed as recall's write path does it (64 at a time): each one's late
    tokens as they are scored (before packing) and its dense vector, by memory id."""
    tokens: dict[str, np.ndarray] = {}
    dense: dict[str, np.ndarray] = {}
    task = progress.add_task("embedding + indexing turns", total=len(states))
    for start in range(0, len(states), 64):
        chunk = states[start : start + 64]
        vectors = lc.embed_memories(embedder, chunk)
        await index.upsert([lc.point_for(s, v) for s, v in zip(chunk, vectors, strict=True)])
        encoded = late.encode_documents([lc.late_document(s) for s in chunk])
        tokens.update((str(s.id), lc.document_matrix(e)) for s, e in zip(chunk, encoded, strict=True))
        dense.update((str(s.id), np.asarray(v, dtype=np.float32)) for s, v in zip(chunk, vectors, strict=True))
        progress.advance(task, len(chunk))
    return tokens, dense


async def hybrid_search(index: lc.VectorIndex, embedder: lc.MiniLMEmbedder, text: str, conv: str) -> list[Any]:
    """The hybrid search's best LATE_CANDIDATES hits for ``text`` in conversation ``conv``, as recall asks."""
    return await lc.recall_search(
        index, dense=[float(x) for x in embedder.embed_query(text)], sparse=lc.query_vector(text),
        mode="hybrid", limit=LATE_CANDIDATES, filter=lc.active_filter(lc.TENANT, conv),
        prefetch_limit=lc.late_prefetch_limit(LATE_CANDIDATES),
    )


async def build_candidates() -> list[Asked]:
    """Index every conversation as bench/locomo.py does; each question's 50 candidates, in order."""
    convs = lc.load(context=True)
    embedder, late = lc.MiniLMEmbedder(), lc.ColbertEncoder()
    states = [m for c in convs for m in c.memories]
    home = Path(tempfile.mkdtemp(prefix="engram-fit-order-"))
    index = lc.build_vector_index(qdrant_url=None, path=home / "shard", dim=embedder.dim)
    memory = {str(m.id): m for m in states}
    dia_of = {mid: dia for c in convs for mid, dia in c.dia_of.items()}
    asked: list[Asked] = []
    try:
        await index.ensure()
        with lc._progress() as progress:
            matrices, _ = await index_turns(states, embedder, late, index, progress)
            tokens = {i: lc.pack(m) for i, m in matrices.items()}

            async def first_hop(text: str, conv: str) -> list[tuple[Candidate, str, str]]:
                found = await hybrid_search(index, embedder, text, conv)
                ids, search = [h.id for h in found], [h.score for h in found]
                maxsim = lc.maxsim_packed(late.encode_query(text), [tokens[i] for i in ids], late.dim).tolist()
                out = []
                for i, _ in lc.rerank_order(maxsim, search):
                    m = memory[ids[i]]
                    out.append((Candidate(m.content, m.context, m.valid_from or m.created_at, search[i], maxsim[i]),
                                ids[i], dia_of[ids[i]]))
                return out

            questions = [(n, q) for n, c in enumerate(convs) for q in c.questions]
            task = progress.add_task("recalling questions", total=len(questions))
            for n, q in questions:
                cands = await first_hop(q.question, q.conv)
                parts = [[(mid, dia) for _, mid, dia in await first_hop(sub, q.conv)]
                         for sub in lc.split_question(q.question)]
                asked.append(Asked(n, q.question, q.category, q.evidence, cands, parts))
                progress.advance(task)
    finally:
        await index.close()
        shutil.rmtree(home, ignore_errors=True)
    return asked


def save_candidates(asked: list[Asked], path: Path) -> None:
    """``asked`` as gzipped JSON (data only: reading it back runs no code, unlike a pickle)."""
    rows = [asdict(a) | {"evidence": sorted(a.evidence),
                         "candidates": [[asdict(c) | {"said_at": c.said_at.isoformat()}, mid, dia]
                                        for c, mid, dia in a.candidates]} for a in asked]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(rows).encode()))


def load_candidates(path: Path) -> list[Asked]:
    rows = json.loads(gzip.decompress(path.read_bytes()))
    return [Asked(r["conv"], r["question"], r["category"], frozenset(r["evidence"]),
                  [(Candidate(**(c | {"said_at": datetime.fromisoformat(c["said_at"])})), mid, dia)
                   for c, mid, dia in r["candidates"]],
                  [[(mid, dia) for mid, dia in part] for part in r["parts"]]) for r in rows]


def fit(asked: list[Asked], features: list[np.ndarray], *, l2: float = 1.0, iterations: int = 300,
        step: float = 0.5) -> dict[str, float]:
    """Pairwise logistic regression over each question's candidates (see the module's text)."""
    rows = [(features[i], np.array([dia in a.evidence for _, _, dia in a.candidates], dtype=bool))
            for i, a in enumerate(asked)]
    rows = [(x, y) for x, y in rows if 0 < y.sum() < len(y)]
    stacked = np.vstack([x for x, _ in rows])
    mean, sd = stacked.mean(0), stacked.std(0) + 1e-9
    scaled = [((x - mean) / sd, y) for x, y in rows]
    w = np.zeros(stacked.shape[1])
    for _ in range(iterations):
        grad = np.zeros_like(w)
        for z, y in scaled:
            s = z @ w
            pos, neg = np.where(y)[0], np.where(~y)[0]
            lam = -1.0 / (1.0 + np.exp(s[pos][:, None] - s[neg][None, :])) / len(pos)
            grad += lam.sum(1) @ z[pos] - lam.sum(0) @ z[neg]
        w -= step * (grad / len(scaled) / 10 + l2 * w / len(scaled))
    return {name: float(v) for name, v in zip(FEATURES, w / sd, strict=True)}


def recall_at(order: list[str], evidence: frozenset[str]) -> list[float]:
    return [len(evidence.intersection(order[:k])) / len(evidence) for k in KS]


def report(rows: dict[str, list[list[str]]], asked: list[Asked]) -> None:
    """Per category and overall (1–4), R@5 / R@10 / R@25, on 0–4 then 5–9."""
    names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
    for half, convs in (("0–4 (fitted)", FIT_CONVS), ("5–9 (held out)", HELD_OUT)):
        print(f"\nconversations {half}: R@5 / R@10 / R@25")
        print(f"{'order':34s}" + "".join(f"{n:>20s}" for n in [*names.values(), "1–4 overall"]))
        for label, orders in rows.items():
            cells = []
            for cats in [(1,), (2,), (3,), (4,), (5,), (1, 2, 3, 4)]:
                scores = [recall_at(o, a.evidence) for o, a in zip(orders, asked, strict=True)
                          if a.conv in convs and a.category in cats]
                m = np.mean(scores, axis=0)
                cells.append(f"{m[0]:.3f}/{m[1]:.3f}/{m[2]:.3f}")
            print(f"{label:34s}" + "".join(f"{c:>20s}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "engram" / "fit-order.json.gz",
                        help="where the candidates are kept between runs (default: %(default)s)")
    parser.add_argument("--show", action="store_true", help="print the fitted weights as Python")
    args = parser.parse_args()
    if not lc.LOCOMO.exists():
        sys.exit(f"LoCoMo data not found at {lc.LOCOMO} (set ENGRAM_LOCOMO)")
    if args.cache.exists():
        asked = load_candidates(args.cache)
        print(f"candidates read from {args.cache} (delete it after changing the search)")
    else:
        t = time.perf_counter()
        asked = asyncio.run(build_candidates())
        save_candidates(asked, args.cache)
        print(f"candidates built in {time.perf_counter() - t:.0f} s, kept in {args.cache}")
    features = [np.array(candidate_features(a.question, [c for c, _, _ in a.candidates])) for a in asked]
    cpu = []  # what the order costs a recall: features and weighted sums of its 50 candidates
    for a in asked:
        c0 = time.process_time()
        learned_order(a.question, [c for c, _, _ in a.candidates])
        cpu.append((time.process_time() - c0) * 1000)
    print(f"the learned order of {len(asked):,} questions' candidates: CPU per question p50 "
          f"{np.percentile(cpu, 50):.2f} · p95 {np.percentile(cpu, 95):.2f} · mean {np.mean(cpu):.2f} ms")
    fitted = fit([a for a in asked if a.conv in FIT_CONVS and a.category in FIT_CATEGORIES],
                 [f for f, a in zip(features, asked, strict=True) if a.conv in FIT_CONVS and a.category in FIT_CATEGORIES])

    def ordered(weights: dict[str, float] | None, deep: bool) -> list[list[str]]:
        """Each question's dia_ids in the order given by ``weights`` (None: the fused order)."""
        out = []
        for a in asked:
            dia = {mid: d for _, mid, d in a.candidates} | {mid: d for part in a.parts for mid, d in part}
            ids = [mid for _, mid, _ in a.candidates]
            if weights is not None:
                ids = [ids[i] for i, _ in learned_order(a.question, [c for c, _, _ in a.candidates], weights)]
            if deep:
                content = {mid: c.content for c, mid, _ in a.candidates}
                parts = [[mid for mid, _ in part] for part in a.parts]
                ids = [i for i, _ in deep_fusion(a.question, [(i, content[i]) for i in ids], parts)]
            out.append([dia[i] for i in ids])
        return out

    report({
        "fused (late + search ranks)": ordered(None, False),
        "fused + deep fusion": ordered(None, True),
        "module WEIGHTS": ordered(dict(WEIGHTS), False),
        "module WEIGHTS + deep fusion": ordered(dict(WEIGHTS), True),
        "fitted now": ordered(fitted, False),
        "fitted now + deep fusion": ordered(fitted, True),
    }, asked)
    if args.show:
        print("\nWEIGHTS = {")
        for name, value in fitted.items():
            print(f'    "{name}": {value:.4g},')
        print("}")


if __name__ == "__main__":
    main()
