"""Extraction quality and speed on LoCoMo: the built-in engine against LoCoMo's observations.

Each LoCoMo session is one daily log (its turns, speakers as named). The built-in engine extracts
facts; each fact's provenance is the turn (dia_id) it came from. LoCoMo's per-session
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
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import snowballstemmer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import locomo, record  # noqa: E402

from services.extractor.domain.engine import BuiltinEngine  # noqa: E402
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


def sessions() -> list[Session]:
    out = []
    for sample in locomo():
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
            out.append(Session(turns, dia_of, observations))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    parser.add_argument("--show", type=int, default=0, help="print this many missed observations (random)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over all sessions (best is kept)")
    parser.add_argument("--f1-only", action="store_true", help="skip the cosine half of the rule (no embedder)")
    args = parser.parse_args()

    all_sessions = sessions()
    engine = BuiltinEngine()
    n_turns = sum(len(s.turns) for s in all_sessions)
    best = float("inf")
    extracted: list[list[Fact]] = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        extracted = [engine.extract(s.turns) for s in all_sessions]
        best = min(best, time.perf_counter() - start)
    lexical = evaluate(all_sessions, extracted)
    figures = lexical
    if not args.f1_only:
        texts = [f.content for facts in extracted for f in facts] + [t for s in all_sessions for t, _ in s.observations]
        figures = evaluate(all_sessions, extracted, Similarity(texts))
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
        f"(engine alone, one process, best of {args.repeat}; target ≥ 200 turns/s)",
        f"facts by category (share covering an observation): {categories}",
    ]
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
