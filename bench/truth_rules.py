"""The rules that keep memories true, measured in-process on ``bench/data/fact_changes.jsonl``.

Every pair the data implies is decided by ``services.memory.domain.supersession.decide`` with the
cosine similarity of the two texts' embeddings by the real local encoder (``MiniLMEmbedder``, the
memory service's offline default: nothing is downloaded):

- a change (each phrasing of the new statement against each old one, the new said later): it must
  be SUPERSEDES with the old one stale; the same pair given in the other order (a fact extracted
  late from an older log) must keep the later one current (``order kept``);
- a repeat group (each later statement against each earlier one): DUPLICATE;
- a hard negative (b against a): neither DUPLICATE nor SUPERSEDES.

Printed per category and overall, for the fit split (even ids) and the report split (odd ids)
side by side: supersession precision and recall, the share of repeats merged, false merges (a
change or a hard negative merged), false supersessions on hard negatives and on repeats, and the
share of pairs flagged UNCERTAIN. ``--fit`` searches the thresholds on the fit split only (fewest
false merges and supersessions, then most supersessions and merges found, then fewest flags, then
the most cautious values) and
prints the figures with them; without it the module's ``DEFAULT_THRESHOLDS`` are measured.

Run: ``.venv/bin/python bench/truth_rules.py [--fit]`` (regenerate the data first with
``bench/fact_changes_gen.py`` if the generator changed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.memory.adapters.embedder import MiniLMEmbedder  # noqa: E402
from services.memory.domain.supersession import (  # noqa: E402
    DEFAULT_THRESHOLDS,
    Candidate,
    Decision,
    Statement,
    Thresholds,
    Verdict,
    decide,
    decide_all,
    forget_texts,
)

DATA = Path(__file__).parent / "data" / "fact_changes.jsonl"
SPLITS = ("fit", "report")


@dataclass(frozen=True)
class Pair:
    kind: str  # change | reverse | repeat | negative
    category: str
    split: str
    new: str
    new_at: datetime
    old: str
    old_at: datetime


def load(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def pairs_of(records: list[dict[str, Any]]) -> list[Pair]:
    out: list[Pair] = []
    for r in records:
        cat, split = r["category"], r["split"]
        if r["kind"] == "change":
            for new in [r["new"], *r["variants"]]:
                for old in r["old"]:
                    t_new, t_old = datetime.fromisoformat(new["at"]), datetime.fromisoformat(old["at"])
                    out.append(Pair("change", cat, split, new["text"], t_new, old["text"], t_old))
                    out.append(Pair("reverse", cat, split, old["text"], t_old, new["text"], t_new))
        elif r["kind"] == "repeat":
            said = r["statements"]
            for i, j in itertools.combinations(range(len(said)), 2):
                out.append(Pair("repeat", cat, split, said[j]["text"], datetime.fromisoformat(said[j]["at"]),
                                said[i]["text"], datetime.fromisoformat(said[i]["at"])))
        else:
            out.append(Pair("negative", cat, split, r["b"]["text"], datetime.fromisoformat(r["b"]["at"]),
                            r["a"]["text"], datetime.fromisoformat(r["a"]["at"])))
    return out


def similarities(pairs: list[Pair], embedder: MiniLMEmbedder) -> list[float]:
    texts = sorted({t for p in pairs for t in (p.new, p.old)})
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    row = {t: i for i, t in enumerate(texts)}
    return [float(vectors[row[p.new]] @ vectors[row[p.old]]) for p in pairs]


@dataclass
class Tally:
    changes: int = 0
    found: int = 0  # changes decided SUPERSEDES, the old one stale
    superseded: int = 0  # every pair decided SUPERSEDES with the older one stale (changes or not)
    reverse: int = 0
    order_kept: int = 0
    repeats: int = 0
    merged: int = 0
    negatives: int = 0
    false_merges: int = 0  # a change or a negative decided DUPLICATE
    false_supersessions: int = 0  # a negative decided SUPERSEDES
    repeat_superseded: int = 0  # a repeat decided SUPERSEDES
    uncertain: int = 0
    pairs: int = 0
    misses: list[tuple[Pair, Decision]] = field(default_factory=list)

    def add(self, pair: Pair, d: Decision) -> None:
        self.pairs += 1
        self.uncertain += d.verdict is Verdict.UNCERTAIN
        if pair.kind == "reverse":
            self.reverse += 1
            kept = d.verdict is Verdict.SUPERSEDES and d.stale == "new"
            self.order_kept += kept
            self.false_merges += d.verdict is Verdict.DUPLICATE
            return
        if d.new_supersedes:
            self.superseded += 1
        if pair.kind == "change":
            self.changes += 1
            self.found += d.new_supersedes
            self.false_merges += d.verdict is Verdict.DUPLICATE
            if not d.new_supersedes:
                self.misses.append((pair, d))
        elif pair.kind == "repeat":
            self.repeats += 1
            self.merged += d.verdict is Verdict.DUPLICATE
            self.repeat_superseded += d.verdict is Verdict.SUPERSEDES
            if d.verdict is not Verdict.DUPLICATE:
                self.misses.append((pair, d))
        else:
            self.negatives += 1
            self.false_merges += d.verdict is Verdict.DUPLICATE
            self.false_supersessions += d.verdict is Verdict.SUPERSEDES
            if d.verdict in (Verdict.DUPLICATE, Verdict.SUPERSEDES):
                self.misses.append((pair, d))

    def figures(self) -> dict[str, float]:
        return {
            "precision": self.found / self.superseded if self.superseded else 1.0,
            "recall": self.found / self.changes if self.changes else 1.0,
            "order kept": self.order_kept / self.reverse if self.reverse else 1.0,
            "merged": self.merged / self.repeats if self.repeats else 1.0,
            "false merges": self.false_merges,
            "false sup. (neg)": self.false_supersessions,
            "sup. of repeats": self.repeat_superseded,
            "uncertain": self.uncertain / self.pairs if self.pairs else 0.0,
            "pairs": self.pairs,
        }


def measure(pairs: list[Pair], sims: list[float], thresholds: Thresholds) -> dict[tuple[str, str], Tally]:
    tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for pair, sim in zip(pairs, sims, strict=True):
        d = decide(Statement(pair.new, pair.new_at), Candidate(pair.old, pair.old_at, similarity=sim), thresholds)
        tallies[(pair.split, pair.category)].add(pair, d)
        tallies[(pair.split, "all")].add(pair, d)
    return tallies


def fit(pairs: list[Pair], sims: list[float]) -> Thresholds:
    """The thresholds that do best on the fit split (never looking at the report split)."""
    on_fit = [(p, s) for p, s in zip(pairs, sims, strict=True) if p.split == "fit"]
    fit_pairs, fit_sims = [p for p, _ in on_fit], [s for _, s in on_fit]
    best: tuple[tuple[float, ...], Thresholds] | None = None
    for gate, dup, unc, fact_dup in itertools.product((0.1, 0.15, 0.2, 0.25, 0.3, 0.35),
                                                      (0.8, 0.84, 0.88, 0.92, 0.96),
                                                      (0.5, 0.55, 0.6, 0.65, 0.7, 0.75), (0.6, 0.7, 0.8)):
        if unc > dup:
            continue
        t = Thresholds(rule_gate=gate, duplicate=dup, uncertain=unc, fact_duplicate=fact_dup)
        f = measure(fit_pairs, fit_sims, t)[("fit", "all")].figures()
        key = (f["false merges"] + f["false sup. (neg)"] + f["sup. of repeats"],
               -(f["recall"] + f["merged"] + f["order kept"]), -f["precision"], f["uncertain"],
               -dup, -fact_dup, -unc, -gate)  # at a tie, the most cautious thresholds (merge least, flag least, gate most)
        if best is None or key < best[0]:
            best = (key, t)
    assert best is not None
    return best[1]


COLUMNS = ("precision", "recall", "order kept", "merged", "false merges", "false sup. (neg)", "sup. of repeats",
           "uncertain", "pairs")


def report(tallies: dict[tuple[str, str], Tally], thresholds: Thresholds) -> list[str]:
    lines = [f"thresholds: rule_gate={thresholds.rule_gate} duplicate={thresholds.duplicate} "
             f"uncertain={thresholds.uncertain} fact_duplicate={thresholds.fact_duplicate}", ""]
    header = "| category | split | " + " | ".join(COLUMNS) + " |"
    lines += [header, "|" + "---|" * (len(COLUMNS) + 2)]
    categories = sorted({c for _, c in tallies if c != "all"}) + ["all"]
    for cat in categories:
        for split in SPLITS:
            if (split, cat) not in tallies:
                continue
            f = tallies[(split, cat)].figures()
            cells = [f"{f[c]:.3f}" if isinstance(f[c], float) and c not in ("pairs",) else str(int(f[c]))
                     for c in COLUMNS]
            lines.append(f"| {cat} | {split} | " + " | ".join(cells) + " |")
    return lines


def _extracted(sessions: list[tuple[datetime, list[dict[str, Any]]]]) -> list[tuple[str, datetime]]:
    """What the built-in extractor learns from a conversation's sessions (one daily log each), as the
    memory service's rules read it: "The user…" in the first person."""
    from services.extractor.domain.engine import BuiltinEngine
    from services.extractor.domain.model import Turn
    from services.memory.domain.truth import first_person

    engine = BuiltinEngine()
    out: list[tuple[str, datetime]] = []
    for at, session in sessions:
        turns = [Turn(speaker=t["speaker"], text=t["text"], ref=i) for i, t in enumerate(session)]
        out.extend((first_person(f.content), at) for f in engine.extract(turns))
    return out


def locomo_pairs(top: int, embedder: MiniLMEmbedder, extracted: bool = False) -> list[tuple[Pair, float]]:
    """Real conversation: each LoCoMo turn against the ``top`` most similar earlier turns of the
    same speaker (what the save path would hand the rules as candidates). LoCoMo holds few true
    changes, so this measures how often the rules fire on ordinary talk; its verdicts are printed
    for a person to check by hand. ``extracted``: the facts the built-in extractor learns from each
    session instead, each against the ``top`` most similar earlier facts of its conversation (one
    user's project: what an extracted fact is judged against on its way in)."""
    from bench.common import LOCOMO

    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    out: list[tuple[Pair, float]] = []
    for conv in data:
        c = conv["conversation"]
        turns: dict[str, list[tuple[str, datetime]]] = defaultdict(list)
        sessions: list[tuple[datetime, list[dict[str, Any]]]] = []
        n = 1
        while f"session_{n}" in c:
            at = datetime.strptime(c[f"session_{n}_date_time"].strip(), "%I:%M %p on %d %B, %Y")
            sessions.append((at, c[f"session_{n}"]))
            for turn in c[f"session_{n}"]:
                turns[turn["speaker"]].append((turn["text"], at))
            n += 1
        for said in ([_extracted(sessions)] if extracted else turns.values()):
            vectors = np.asarray(embedder.embed([t for t, _ in said]), dtype=np.float32)
            sims = vectors @ vectors.T
            for j in range(1, len(said)):
                for i in np.argsort(-sims[j, :j])[:top]:
                    pair = Pair("locomo", "locomo", "-", said[j][0], said[j][1], said[int(i)][0], said[int(i)][1])
                    out.append((pair, float(sims[j, i])))
    return out


def locomo_report(top: int, sample: int, thresholds: Thresholds, extracted: bool = False) -> None:
    pairs = locomo_pairs(top, MiniLMEmbedder(), extracted)
    counts: dict[Verdict, list[tuple[Pair, Decision]]] = defaultdict(list)
    turns: dict[Verdict, set[tuple[str, datetime]]] = defaultdict(set)
    for pair, sim in pairs:
        d = decide(Statement(pair.new, pair.new_at), Candidate(pair.old, pair.old_at, similarity=sim), thresholds)
        counts[d.verdict].append((pair, d))
        turns[d.verdict].add((pair.new, pair.new_at))
    saved = len({(p.new, p.new_at) for p, _ in pairs})
    what = (f"extracted facts against its {top} nearest earlier facts of the conversation" if extracted
            else f"turns against its {top} nearest earlier turns of the same speaker")
    print(f"\nLoCoMo: {len(pairs)} pairs (each of {saved} {what})")
    print("  verdict      pairs   share   turns with one  share of turns")
    for verdict in Verdict:
        print(f"  {verdict.value:<11} {len(counts[verdict]):>6}  {len(counts[verdict]) / max(len(pairs), 1):.4f}"
              f"  {len(turns[verdict]):>6}          {len(turns[verdict]) / max(saved, 1):.4f}")
    for verdict in (Verdict.SUPERSEDES, Verdict.DUPLICATE, Verdict.UNCERTAIN):
        if sample <= 0:
            break
        chosen = counts[verdict][:: max(1, len(counts[verdict]) // sample)][:sample]
        print(f"\n{verdict.value}: {len(chosen)} of {len(counts[verdict])} to check by hand")
        for pair, d in chosen:
            print(f"  {pair.new!r}\n    vs {pair.old!r}\n    {d.reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="store_true", help="fit the thresholds on the fit split, then measure")
    parser.add_argument("--misses", type=int, default=0, help="print up to N misses of the fit split")
    parser.add_argument("--locomo", type=int, default=0, metavar="N",
                        help="also decide every LoCoMo turn against its N nearest earlier turns (same speaker) and "
                        "print how often each verdict fires, with a sample to check by hand")
    parser.add_argument("--sample", type=int, default=25, help="pairs per verdict printed with --locomo")
    parser.add_argument("--extracted", action="store_true",
                        help="--locomo on the facts the built-in extractor learns from each session, not the turns")
    parser.add_argument("--speed", type=int, default=0, metavar="N",
                        help="time the rules as a save runs them: each LoCoMo turn's N nearest earlier turns above "
                        "the gate judged together (decide_all), in 3 rounds; print CPU-ms a save (mean, p50, p95, p99)")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"{DATA} not found: run bench/fact_changes_gen.py first")
    records = load()
    pairs = pairs_of(records)
    t = time.perf_counter()
    sims = similarities(pairs, MiniLMEmbedder())
    print(f"{len(records)} records, {len(pairs)} pairs; embedded in {time.perf_counter() - t:.1f}s")
    thresholds = fit(pairs, sims) if args.fit else DEFAULT_THRESHOLDS
    tallies = measure(pairs, sims, thresholds)
    print("\n".join(report(tallies, thresholds)))
    if args.misses:
        print(f"\nmisses on the fit split (up to {args.misses}):")
        shown = 0
        for (split, cat), tally in sorted(tallies.items()):
            if split != "fit" or cat == "all":
                continue
            for pair, d in tally.misses:
                if shown >= args.misses:
                    break
                print(f"  [{pair.kind}/{cat}] {pair.new!r} vs {pair.old!r}: {d.verdict} ({d.reason})")
                shown += 1
    if args.locomo:
        locomo_report(args.locomo, args.sample, thresholds, args.extracted)
    if args.speed:
        speed_report(args.speed, thresholds)


def speed_report(top: int, thresholds: Thresholds, rounds: int = 3) -> None:
    """CPU time of ``decide_all`` per save: each LoCoMo turn with its ``top`` nearest earlier turns at
    or above the rules' gate as candidates (what the save path hands the rules). Texts repeat across
    saves (an old memory is a candidate of many new ones), so the rules' per-text caches count as
    they do in the service; the first round starts them empty."""
    saves: dict[tuple[str, datetime], list[tuple[Pair, float]]] = defaultdict(list)
    for pair, sim in locomo_pairs(top, MiniLMEmbedder()):
        if sim >= thresholds.rule_gate:
            saves[(pair.new, pair.new_at)].append((pair, sim))
    judged = [(Statement(new, at), [Candidate(p.old, p.old_at, similarity=sim) for p, sim in found])
              for (new, at), found in saves.items()]
    forget_texts()
    for n in range(1, rounds + 1):
        times = []
        for statement, candidates in judged:
            t = time.process_time()
            decide_all(statement, candidates, thresholds)
            times.append((time.process_time() - t) * 1000)
        ms = np.asarray(times)
        print(f"decide_all, round {n}: {len(judged)} saves of {sum(len(c) for _, c in judged) / len(judged):.1f} "
              f"candidates: CPU-ms a save mean {ms.mean():.2f} · p50 {np.percentile(ms, 50):.2f} · "
              f"p95 {np.percentile(ms, 95):.2f} · p99 {np.percentile(ms, 99):.2f}")


if __name__ == "__main__":
    main()
