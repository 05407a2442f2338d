"""A second hop through the first hits' neighbours: the graph's similar edges, or the turns said next
to them — does it find evidence the default recall ranks too low? (issue 34, item 2)

    python bench/neighbour_hop.py

For every LoCoMo question the default recall's order is computed with the production functions (the
hybrid search's best 50, late interaction, the learned order with the module's weights; the
candidates as ``bench/late_dims.py`` builds them). Then the first ``top`` hits' neighbours are
gathered and fused after that order by weighted reciprocal rank (``w / (10 + rank)``, the fusion of
deep recall), two ways:

- **similar**: each hit's ``k`` nearest memories by dense cosine in its conversation — what the
  graph's ``similar`` edges hold, computed once at save time;
- **adjacent**: the turns said ``d`` before and after each hit in its session (the same log).

Every setting is scored on conversations 0–4; the best there (R@5 over categories 1–4) is the one
that would be kept, and 5–9 is printed beside it, never used to choose.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import late_dims as ld  # noqa: E402  (the candidates, with the turns' vectors)
import locomo as lc  # noqa: E402

from services.memory.domain.candidate_order import Candidate, learned_order  # noqa: E402

KS = (5, 10)
GROUPS = {"multi-hop": (1,), "open-domain": (3,), "1–4 overall": (1, 2, 3, 4), "adversarial": (5,)}


def fuse(lists: list[tuple[float, list[str]]]) -> list[str]:
    score: dict[str, float] = {}
    for weight, ids in lists:
        for rank, i in enumerate(ids):
            score[i] = score.get(i, 0.0) + weight / (10 + rank)
    return sorted(score, key=lambda i: -score[i])


def main() -> None:
    if not lc.LOCOMO.exists():
        sys.exit(f"LoCoMo data not found at {lc.LOCOMO} (set ENGRAM_LOCOMO)")
    b = asyncio.run(ld.build())
    blobs = {i: lc.pack(m) for i, m in b.tokens.items()}
    orders = []
    for a in b.asked:
        late = lc.maxsim_packed(a.query, [blobs[i] for i in a.ids], 384).tolist()
        fused = lc.rerank_order(late, a.search)
        cands = [Candidate(b.memory[a.ids[i]].content, b.memory[a.ids[i]].context,
                           b.memory[a.ids[i]].valid_from or b.memory[a.ids[i]].created_at, a.search[i], late[i])
                 for i, _ in fused]
        orders.append([a.ids[fused[j][0]] for j, _ in learned_order(a.question, cands)])
    conv_of = {str(m.id): m.project for m in b.memory.values()}
    members: dict[str, list[str]] = {}
    for mid, conv in conv_of.items():
        members.setdefault(conv, []).append(mid)
    matrices = {conv: np.stack([b.vectors[i] for i in ids]) for conv, ids in members.items()}
    at = {(conv_of[m], d): m for m, d in b.dia_of.items()}

    def similar(mid: str, k: int) -> list[str]:
        ids, cosine = members[conv_of[mid]], matrices[conv_of[mid]] @ b.vectors[mid]
        return [ids[t] for t in np.argsort(-cosine)[: k + 1] if ids[t] != mid][:k]

    def adjacent(mid: str, d: int) -> list[str]:
        session, _, turn = b.dia_of[mid].partition(":")
        near = [at.get((conv_of[mid], f"{session}:{int(turn) + o}")) for off in range(1, d + 1) for o in (off, -off)]
        return [m for m in near if m is not None]

    def scores(ranked: list[list[str]], convs: range) -> dict[str, np.ndarray]:
        out = {}
        for name, cats in GROUPS.items():
            rows = [[len(a.evidence & {b.dia_of[i] for i in o[:k]}) / len(a.evidence) for k in KS]
                    for o, a in zip(ranked, b.asked, strict=True) if a.conv in convs and a.category in cats]
            out[name] = np.mean(rows, axis=0)
        return out

    def line(label: str, ranked: list[list[str]]) -> float:
        fit, held = scores(ranked, range(0, 5)), scores(ranked, range(5, 10))
        cells = lambda s: "  ".join(f"{n} {v[0]:.3f}/{v[1]:.3f}" for n, v in s.items())  # noqa: E731
        print(f"{label:26s} 0–4: {cells(fit)}\n{'':26s} 5–9: {cells(held)}")
        return float(fit["1–4 overall"][0])

    print("R@5 / R@10; each setting on 0–4 (where it is chosen), then 5–9 (held out)")
    base = line("the learned order (today)", orders)
    best: tuple[float, str] = (base, "the learned order (today)")
    hops: dict[str, Callable[[str, int], list[str]]] = {"similar k": similar, "adjacent d": adjacent}
    for name, hop in hops.items():
        for top in (3, 5):
            for size in (1, 2, 3, 5) if name.startswith("similar") else (1, 2):
                for w in (0.1, 0.25, 0.5):
                    ranked = []
                    for o in orders:
                        near: list[str] = []
                        for hit in o[:top]:
                            near += [x for x in hop(hit, size) if x not in near]
                        ranked.append(fuse([(1.0, o), (w, near)]))
                    label = f"{name}{size} top{top} w{w}"
                    best = max(best, (line(label, ranked), label))
    print(f"\nbest on 0–4 (R@5 over 1–4): {best[1]} ({best[0]:.3f}; the learned order alone {base:.3f})")


if __name__ == "__main__":
    main()
