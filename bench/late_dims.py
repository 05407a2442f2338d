"""Late-interaction tokens at fewer dimensions: what recall would lose, and what it would save.

    python bench/late_dims.py                      # 384 (as stored today), 192, 128, 96, 64
    python bench/late_dims.py --dims 128 96

A memory's late-interaction tokens are stored at the encoder's 384 dimensions (int8 rows, ~388
bytes a token: 1,157 MiB for 100,000 memories), and each recall reads 50 candidates' tokens and
scores them by MaxSim. Both costs are proportional to the dimensions. The file Engram ships lacks
the model's own 384 → 96 projection, so this measures a substitute: the tokens' principal
directions (an SVD of the uncentred token matrix, which keeps dot products best in least squares),
**fitted on the turns of LoCoMo conversations 0–4 only**, applied to documents and queries alike.

For every question the candidates are the default recall's (the hybrid search's best 50, as
``bench/fit_order.py`` builds them, production functions); only their late scores change. Each is
then put in the default order (the fused ranks, then the learned order with the module's
``WEIGHTS``), and R@5 / R@10 / R@25 are printed per category, on 0–4 and on 5–9 (held out), for
each dimension, beside what the 50 candidates' tokens weigh and what MaxSim over them costs.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fit_order as fo  # noqa: E402  (bench/fit_order.py: the learned order's fit)
import locomo as lc  # noqa: E402  (bench/locomo.py: the data and the production functions it imports)

from contracts.memory import MemoryState  # noqa: E402
from services.memory.domain.candidate_order import WEIGHTS, Candidate, candidate_features, learned_order  # noqa: E402

FIT_CONVS = range(0, 5)
KS = (5, 10, 25)
NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass
class Asked:
    conv: int
    question: str
    category: int
    evidence: frozenset[str]
    query: np.ndarray  # the question's late tokens (rows × 384)
    ids: list[str]  # the hybrid search's best 50, in its order
    search: list[float]


@dataclass
class Built:
    asked: list[Asked]
    tokens: dict[str, np.ndarray]  # each turn's late tokens (rows × 384, as scored)
    vectors: dict[str, np.ndarray]  # each turn's dense vector (what the graph's similar edges compare)
    memory: dict[str, MemoryState]
    dia_of: dict[str, str]  # memory id → LoCoMo dia_id ("D3:7": session 3, turn 7)
    fit_ids: set[str]  # the turns of conversations 0–4


async def build() -> Built:
    """Every turn indexed as bench/locomo.py does; each question's 50 candidates and late tokens."""
    convs = lc.load(context=True)
    embedder, late = lc.MiniLMEmbedder(), lc.ColbertEncoder()
    states = [m for c in convs for m in c.memories]
    fit_ids = {str(m.id) for n, c in enumerate(convs) if n in FIT_CONVS for m in c.memories}
    home = Path(tempfile.mkdtemp(prefix="engram-late-dims-"))
    index = lc.build_vector_index(qdrant_url=None, path=home / "shard", dim=embedder.dim)
    memory = {str(m.id): m for m in states}
    dia_of = {mid: dia for c in convs for mid, dia in c.dia_of.items()}
    asked: list[Asked] = []
    try:
        await index.ensure()
        with lc._progress() as progress:
            tokens, dense = await fo.index_turns(states, embedder, late, index, progress)
            questions = [(n, q) for n, c in enumerate(convs) for q in c.questions]
            task = progress.add_task("searching questions", total=len(questions))
            for n, q in questions:
                found = await fo.hybrid_search(index, embedder, q.question, q.conv)
                asked.append(Asked(n, q.question, q.category, q.evidence, late.encode_query(q.question),
                                   [h.id for h in found], [h.score for h in found]))
                progress.advance(task)
    finally:
        await index.close()
        shutil.rmtree(home, ignore_errors=True)
    return Built(asked, tokens, dense, memory, dia_of, fit_ids)


def projection(tokens: dict[str, np.ndarray], fit_ids: set[str], dims: int) -> np.ndarray:
    """(384, dims): the first ``dims`` right singular vectors of the fitted turns' token rows."""
    stacked = np.concatenate([tokens[i] for i in sorted(fit_ids)]).astype(np.float64)
    _, _, vt = np.linalg.svd(stacked, full_matrices=False)
    return vt[:dims].T.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 192, 128, 96, 64])
    parser.add_argument("--refit", action="store_true",
                        help="also fit the learned order's weights again on each dimension's scores (0–4 only)")
    args = parser.parse_args()
    if not lc.LOCOMO.exists():
        sys.exit(f"LoCoMo data not found at {lc.LOCOMO} (set ENGRAM_LOCOMO)")
    t = time.perf_counter()
    built = asyncio.run(build())
    asked, tokens, memory, dia_of, fit_ids = built.asked, built.tokens, built.memory, built.dia_of, built.fit_ids
    print(f"candidates built in {time.perf_counter() - t:.0f} s; {len(fit_ids):,} turns of conversations 0–4 "
          f"fit the projections ({sum(len(tokens[i]) for i in fit_ids):,} token rows)")
    for dims in args.dims:
        p = None if dims >= 384 else projection(tokens, fit_ids, dims)
        blobs = {i: lc.pack(m if p is None else m @ p) for i, m in tokens.items()}
        ranked, cpu, size = [], [], []  # each question's candidates in the fused order
        for a in asked:
            query = a.query if p is None else a.query @ p
            candidate_blobs = [blobs[i] for i in a.ids]
            c0 = time.process_time()
            late = lc.maxsim_packed(query, candidate_blobs, dims).tolist()
            cpu.append((time.process_time() - c0) * 1000)
            size.append(sum(len(b) for b in candidate_blobs))
            ranked.append([(Candidate(memory[a.ids[i]].content, memory[a.ids[i]].context,
                                      memory[a.ids[i]].valid_from or memory[a.ids[i]].created_at, a.search[i], late[i]),
                            a.ids[i], dia_of[a.ids[i]]) for i, _ in lc.rerank_order(late, a.search)])
        weightings = {"module WEIGHTS": dict(WEIGHTS)}
        if args.refit:
            fit = [i for i, a in enumerate(asked) if a.conv in FIT_CONVS]
            weightings["fitted again"] = fo.fit(
                [fo.Asked(asked[i].conv, asked[i].question, asked[i].category, asked[i].evidence, ranked[i], [])
                 for i in fit],
                [np.array(candidate_features(asked[i].question, [c for c, _, _ in ranked[i]])) for i in fit])
        print(f"\n{dims} dims: the 50 candidates' tokens {np.median(size) / 1024:.1f} KiB (median); MaxSim CPU "
              f"p50 {np.percentile(cpu, 50):.2f} · p95 {np.percentile(cpu, 95):.2f} ms")
        for label, weights in weightings.items():
            orders = [[cands[j][2] for j, _ in learned_order(a.question, [c for c, _, _ in cands], weights)]
                      for a, cands in zip(asked, ranked, strict=True)]
            for half, convs in (("0–4 (fitted)", range(0, 5)), ("5–9 (held out)", range(5, 10))):
                cells = []
                for cats in [(1,), (2,), (3,), (4,), (5,), (1, 2, 3, 4)]:
                    scores = [[len(a.evidence.intersection(o[:k])) / len(a.evidence) for k in KS]
                              for o, a in zip(orders, asked, strict=True) if a.conv in convs and a.category in cats]
                    m = np.mean(scores, axis=0)
                    cells.append(f"{m[0]:.3f}/{m[1]:.3f}/{m[2]:.3f}")
                print(f"  {label:14s} {half:15s} " + "  ".join(
                    f"{n} {c}" for n, c in zip([*NAMES.values(), "1–4 overall"], cells, strict=True)))

if __name__ == "__main__":
    main()
