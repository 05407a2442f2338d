"""Memories that stay true, end to end: the fact-change sequences of ``bench/data/fact_changes.jsonl``
saved through a running stack's REST API (the same catalogue rows MCP runs), as plain memory saves or
as daily logs the extractor learns from, then asked about.

Each record gets a project of its own (the rules judge memories of one project):

- a **change** (old statements, then the new one): ``recall(query)`` puts the current value above the
  stale one (target ≥ 0.95); ``recall(query, as_of=<a moment between>)`` puts the stale one first
  (≥ 0.95);
- a **repeat** (three sayings of one fact): folded into one memory (share of records, ≥ 0.9);
- a **negative** (two statements that both stand: another subject, two allergies, …): both still
  current afterwards — a merge or supersession there is a false one (target 0).

    python bench/truth_e2e.py                 # the report split, as memory saves
    python bench/truth_e2e.py --logs          # the same statements as daily logs (the extractor)
    python bench/truth_e2e.py --split all --record
    python bench/truth_e2e.py --split all --crowded merges.jsonl   # everything in one project: every merge, to read

Starts its own stack (embedded NATS/Postgres unless ENGRAM_NATS_URL / ENGRAM_DATABASE_URL are set).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import drop_shared_data, machine, record, stack_options

from deploy.stack import Stack

DATA = Path(__file__).resolve().parent / "data" / "fact_changes.jsonl"


def load(split: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    return [r for r in rows if split == "all" or r["split"] == split]


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def first_rank(hits: list[dict[str, Any]], texts: list[str], unless: list[str] | None = None) -> int | None:
    """The rank (1-based) of the first hit holding one of ``texts`` (a statement as it was saved; for
    daily logs, a memory the extractor wrote from it: the statement's words appear in it)."""
    wanted = [_norm(t) for t in texts]
    others = [_norm(t) for t in unless or []]
    for rank, hit in enumerate(hits, 1):
        content = _norm(hit["memory"]["content"])
        if any(o in content for o in others):  # (a memory naming both values states the change itself)
            continue
        if any(w == content or w.rstrip(".") in content for w in wanted):  # (a value: a substring)
            return rank
    return None


class Run:
    def __init__(self, h: httpx.AsyncClient, logs: bool) -> None:
        self.h, self.logs = h, logs
        self.tally: Counter[str] = Counter()
        self.by_category: dict[str, Counter[str]] = {}
        self.misses: list[str] = []

    async def say(self, project: str, statement: dict[str, Any]) -> str | None:
        """One statement, as a memory save or as a one-turn daily log of its day; the log's id."""
        if not self.logs:
            r = await self.h.post("/memories", json={"content": statement["text"], "project": project})
            r.raise_for_status()
            return None
        r = await self.h.post("/daily-logs", json={
            "log_date": statement["at"][:10], "project": project,
            "turns": [{"speaker": "user", "text": statement["text"]}, {"speaker": "assistant", "text": "I see."}]})
        r.raise_for_status()
        return str(r.json()["id"])

    async def settle(self, log_ids: list[str | None]) -> None:
        """Wait (bounded) until the extractor processed the logs."""
        for log_id in log_ids:
            if log_id is None:
                continue
            for _ in range(600):
                r = await self.h.get(f"/daily-logs/{log_id}")
                if r.json()["log"]["processing_status"] in ("processed", "failed"):
                    break
                await asyncio.sleep(0.1)

    async def recall(self, project: str, query: str, as_of: str | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"query": query, "project": project, "limit": 10}
        if as_of:
            body["as_of"] = as_of
        r = await self.h.post("/recall", json=body)
        r.raise_for_status()
        return list(r.json()["hits"])

    async def current(self, project: str) -> list[dict[str, Any]]:
        r = await self.h.get("/memories", params={"project": project, "limit": 100})
        r.raise_for_status()
        return list(r.json()["memories"])

    def count(self, category: str, name: str, ok: bool, detail: str = "") -> None:
        self.tally[name] += 1
        self.tally[name + ":ok"] += ok
        self.by_category.setdefault(category, Counter())[name] += 1
        self.by_category[category][name + ":ok"] += ok
        if not ok and len(self.misses) < 1000:
            self.misses.append(f"{name}: {detail}")

    async def change(self, r: dict[str, Any], project: str) -> None:
        ids = [await self.say(project, s) for s in r["old"]]
        await self.settle(ids)
        # as_of: the moment between, for saves the clock now; for logs the day after the last old statement's
        between = datetime.now(UTC).isoformat() if not self.logs else r["new"]["at"][:10]
        await asyncio.sleep(0.01)
        await self.settle([await self.say(project, r["new"])])
        new, old = [r["new"]["text"]], [s["text"] for s in r["old"]]
        if self.logs:  # the extractor rewrites what it learns ("The user lives in Lisbon."): look for the values
            if r["current"].casefold() not in new[0].casefold() or any(
                    r["stale"].casefold() not in t.casefold() for t in old):
                self.tally["unmeasured (a value the statements do not spell out)"] += 1
                return
            new, old = [r["current"]], [r["stale"]]
        # through logs, a memory naming both values ("The user switched from beer to wine.") is the
        # current fact, not the stale one
        unless = new if self.logs else None
        now = await self.recall(project, r["query"])
        cur, stale = first_rank(now, new), first_rank(now, old, unless)
        self.count(r["category"], "current first", cur is not None and (stale is None or cur < stale),
                   f"{r['id']} {r['query']!r}: {new[0]!r}@{cur}, {old[0]!r}@{stale}")
        then = await self.recall(project, r["query"], as_of=between)
        cur, stale = first_rank(then, new), first_rank(then, old, unless)
        self.count(r["category"], "as_of: old first", stale is not None and (cur is None or stale < cur),
                   f"{r['id']} as_of {between}: {old[0]!r}@{stale}, {new[0]!r}@{cur}")

    async def repeat(self, r: dict[str, Any], project: str) -> None:
        await self.settle([await self.say(project, s) for s in r["statements"]])
        held = [m for m in await self.current(project) if r["value"].casefold() in m["content"].casefold()]
        self.count(r["category"], "repeats folded", len(held) == 1,
                   f"{r['id']}: {len(held)} memories for {r['value']}: {[m['content'] for m in held]}")

    async def negative(self, r: dict[str, Any], project: str) -> None:
        await self.settle([await self.say(project, r["a"]), await self.say(project, r["b"])])
        held = await self.current(project)
        # a false merge or supersession: a current memory that superseded or absorbed another
        changed = [m["content"] for m in held if m.get("supersedes") or m.get("repeats", 1) > 1]
        self.count(r["category"], "negatives both stand", not changed,
                   f"{r['id']} ({r['why']}): {changed} of {[m['content'] for m in held]}")


async def run(base_url: str, key: str, records: list[dict[str, Any]], logs: bool, concurrency: int) -> Run:
    async with httpx.AsyncClient(base_url=base_url + "/v1", headers={"Authorization": f"Bearer {key}"},
                                 timeout=120) as h:
        out = Run(h, logs)
        gate = asyncio.Semaphore(concurrency)
        with Progress() as progress:
            task = progress.add_task("fact sequences", total=len(records))

            async def one(r: dict[str, Any]) -> None:
                async with gate:
                    project = f"truth-{r['id']}"
                    await {"change": out.change, "repeat": out.repeat, "negative": out.negative}[r["kind"]](r, project)
                    progress.advance(task)

            await asyncio.gather(*(one(r) for r in records))
    return out


def statements_of(r: dict[str, Any]) -> list[dict[str, Any]]:
    """What a record says, as the runs above say it (a change's old statements and its new one; a
    repeat's sayings; a negative's two)."""
    return {"change": lambda: [*r["old"], r["new"]], "repeat": lambda: list(r["statements"]),
            "negative": lambda: [r["a"], r["b"]]}[r["kind"]]()


async def crowded(base_url: str, key: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every statement of ``records`` saved into one project, in the order they were said (one
    user who said all of it), then every merge the memory service made: each merged memory's
    sayings, with the records each saying's words come from. A merge is expected where the words
    come from one repeat record; any other is a candidate false merge, and every one is printed for
    a person to check (the records are separate facts only by construction: two records may state
    the same thing of the same user)."""
    said = sorted((s["at"], s["text"], r["id"], r["kind"]) for r in records for s in statements_of(r))
    whose: dict[str, set[tuple[int, str]]] = {}
    for _, text, rid, kind in said:
        whose.setdefault(text, set()).add((rid, kind))
    project = f"crowded-{int(time.time())}"
    merges: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=base_url + "/v1", headers={"Authorization": f"Bearer {key}"},
                                 timeout=120) as h:
        with Progress() as progress:
            task = progress.add_task("statements into one project", total=len(said))
            for _, text, _, _ in said:
                (await h.post("/memories", json={"content": text, "project": project})).raise_for_status()
                progress.advance(task)
        cursor: str | None = None
        merged: list[dict[str, Any]] = []
        while True:
            page = (await h.get("/memories", params={"project": project, "status": "all", "limit": 100,
                                                     **({"cursor": cursor} if cursor else {})})).json()
            merged += [m for m in page["memories"] if m.get("repeats", 1) > 1]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        for m in merged:
            history = (await h.get(f"/memories/{m['id']}/history")).json()
            first = history["versions"][0]["content"] if history["versions"] else m["content"]
            for saying in history["sayings"][1:]:
                words = saying.get("content") or m["content"]
                kept, joined = whose.get(first, set()), whose.get(words, set())
                expected = any(k == "repeat" and (rid, k) in joined for rid, k in kept)
                merges.append({"memory": m["content"], "first": first, "saying": words, "expected": expected,
                               "records": sorted({rid for rid, _ in kept | joined})})
    return merges


def lines_of(result: Run, split: str, logs: bool, seconds: float) -> list[str]:
    t = result.tally
    share = {name: (t[name + ":ok"], t[name]) for name in
             ("current first", "as_of: old first", "repeats folded", "negatives both stand")}
    out = [f"{'daily logs through the extractor' if logs else 'memory saves'}, split {split}, "
           f"{sum(n for _, n in share.values())} checks in {seconds:.0f} s ({machine()})"]
    for name, (ok, n) in share.items():
        out.append(f"{name}: {ok}/{n} = {ok / n:.3f}" if n else f"{name}: -")
    cats = []
    for cat, c in sorted(result.by_category.items()):
        if c["current first"]:
            cats.append(f"{cat} {c['current first:ok'] / c['current first']:.2f}/{c['as_of: old first:ok'] / c['as_of: old first']:.2f}")
    out.append("by category (current first / as_of old first): " + ", ".join(cats))
    out += [f"{k}: {v}" for k, v in t.items() if k.startswith("unmeasured")]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("report", "fit", "all"), default="report")
    parser.add_argument("--logs", action="store_true", help="say each statement in a daily log of its day")
    parser.add_argument("--limit", type=int, default=0, help="only the first N records (0: all)")
    parser.add_argument("--kind", choices=("change", "repeat", "negative"), help="only records of this kind")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    parser.add_argument("--misses", action="store_true", help="print the checks that failed")
    parser.add_argument("--crowded", type=Path, metavar="FILE",
                        help="instead: every statement into one project, then write every merge made to FILE "
                        "(JSON lines) for a person to check")
    args = parser.parse_args()
    records = [r for r in load(args.split) if args.kind in (None, r["kind"])][: args.limit or None]
    options = stack_options("truth")
    try:
        with Stack(options) as stack:
            key = stack.create_key(None, "bench", ["memory:read", "memory:write", "memory:maintenance"])["key"]
            started = time.monotonic()
            if args.crowded:
                merges = asyncio.run(crowded(stack.gateway_url, key, records))
            else:
                result = asyncio.run(run(stack.gateway_url, key, records, args.logs, args.concurrency))
            seconds = time.monotonic() - started
    finally:
        drop_shared_data(options)
    if args.crowded:
        args.crowded.write_text("".join(json.dumps(m) + "\n" for m in merges))
        odd = [m for m in merges if not m["expected"]]
        print(f"{sum(len(statements_of(r)) for r in records)} statements of {len(records)} records in one project "
              f"({seconds:.0f} s): {len(merges)} merges, {len(merges) - len(odd)} within one repeat record, "
              f"{len(odd)} others (to check by hand); all in {args.crowded}")
        for m in odd:
            print(f"  {m['first']!r} <= {m['saying']!r} (records {m['records']})")
        return
    lines = lines_of(result, args.split, args.logs, seconds)
    print("\n".join(lines))
    if args.misses:
        print("\n".join(result.misses))
    if args.record:
        record("Memories that stay true end to end (bench/truth_e2e.py)", lines)


if __name__ == "__main__":
    main()
