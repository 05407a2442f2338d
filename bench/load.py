"""Load: many concurrent MCP sessions (the `mcp` SDK client) against a running stack, mixed save /
recall / profile, bounded in time and in count.

    python bench/load.py                                  # 200 sessions, 5 minutes (the issue's run)
    python bench/load.py --sessions 20 --duration 30      # a short run while developing
    python bench/load.py --replicas 2                     # two processes of every service

Starts its own stack (embedded NATS/Postgres unless ENGRAM_NATS_URL / ENGRAM_DATABASE_URL are set;
rate limits lifted unless --product-limits), opens every session (one HTTP connection each), then
each session loops: pick an operation by the mix's weights, send it, wait for the answer, record
its latency and outcome. It stops at --duration seconds or --max-operations, whichever comes first.

Prints p50 / p95 / p99 per operation, throughput, errors by kind (a 429 is counted apart: the rate
limit refusing by design), and each service process's RSS sampled over the run (psutil). Nothing
is asserted; with --record the figures are appended to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import sys
import time
from collections import Counter, defaultdict
from contextlib import AsyncExitStack
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import drop_shared_data, fmt, locomo_turns, percentiles, record, stack_options  # noqa: E402

from deploy.stack import Stack  # noqa: E402

OPERATIONS = ("save", "recall", "profile")


def texts() -> list[str]:
    """What the sessions save and ask about: LoCoMo dialogue turns when present, else made-up facts."""
    try:
        turns = [t for _, _, t in locomo_turns()]
    except OSError:
        turns = []
    if turns:
        return turns
    rng = random.Random(7)
    things = ["green tea", "hiking", "a cat named Miso", "Lisbon", "jazz piano", "sourdough", "chess", "Rust"]
    return [f"The user likes {rng.choice(things)} (note {i})" for i in range(5000)]


class Run:
    """What every session reports: latencies and outcomes per operation."""

    def __init__(self, deadline: float, max_operations: int) -> None:
        self.deadline = deadline
        self.budget = max_operations
        self.latency_ms: dict[str, list[float]] = defaultdict(list)
        self.ok: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.limited: Counter[str] = Counter()  # 429: the rate limit, by design
        self.lost: Counter[str] = Counter()  # sessions whose connection broke (then opened again)
        self.started = 0

    def more(self) -> bool:
        return self.budget > 0 and time.monotonic() < self.deadline

    def take(self) -> bool:
        """One more operation, if the run is not over (time or count)."""
        if self.budget <= 0 or time.monotonic() >= self.deadline:
            return False
        self.budget -= 1
        self.started += 1
        return True


def normalized(text: str) -> str:
    """An error text without its ids and numbers, so that one cause is one kind."""
    import re

    return re.sub(r"\b[0-9a-f]{32}\b|\b\d+(\.\d+)?\b", "#", text)[:90]


def error_kind(exc: BaseException) -> str:
    """A short, stable name for a failure (grouped in the report)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 429 or "Too Many Requests" in text or "rate_limited" in text or "rate limit exceeded" in text:
        return "429"
    if status is not None:
        return f"HTTP {status}"
    return f"{type(exc).__name__}: {normalized(text)}"


async def session(index: int, url: str, key: str, corpus: list[str], weights: list[int], run: Run,
                  opened: asyncio.Event, ready: list[int], failures: Counter[str], think_s: float) -> None:
    """One MCP session: open it, then operate until the run ends; a session whose connection is
    lost (the transport raises out of the client) is counted and opened again, as a client would."""
    rng = random.Random(index)
    project = f"load-{index % 20}"
    first = True
    while first or run.more():
        try:
            async with AsyncExitStack() as stack:
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(60.0),
                    limits=httpx2.Limits(max_connections=1, max_keepalive_connections=1)))
                client = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))
                if first:
                    ready[0] += 1
                    first = False
                    await opened.wait()  # every session starts its operations at once
                await operate(client, index, rng, project, corpus, weights, run, think_s)
            return
        except BaseException as exc:  # noqa: BLE001 - counted, the session is opened again
            if isinstance(exc, asyncio.CancelledError):
                raise
            if first:
                failures[error_kind(exc)] += 1
                return
            run.lost[error_kind(exc)] += 1


async def operate(client: Client, index: int, rng: random.Random, project: str, corpus: list[str],
                  weights: list[int], run: Run, think_s: float) -> None:
    while run.take():
        if think_s > 0:  # an assistant's pause between tool calls (exponential, mean think_s)
            await asyncio.sleep(rng.expovariate(1 / think_s))
        op = rng.choices(OPERATIONS, weights)[0]
        started = time.perf_counter()
        try:
            if op == "save":
                text = rng.choice(corpus)
                result = await client.call_tool("memory", {"content": f"{text} [{index}-{run.started}]",
                                                           "containerTag": project})
            elif op == "recall":
                words = rng.choice(corpus).split()
                query = " ".join(words[max(0, len(words) // 2 - 3): len(words) // 2 + 3]) or "what"
                result = await client.call_tool("recall", {"query": query, "includeProfile": False,
                                                           "containerTag": project})
            else:
                result = await client.read_resource("engram://profile")
            failed = getattr(result, "is_error", False)
            elapsed = 1000 * (time.perf_counter() - started)
            if failed:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                kind = "429" if "rate_limited" in text or "Too Many Requests" in text else f"tool error: {normalized(text)}"
                (run.limited if kind == "429" else run.errors)[f"{op} {kind}"] += 1
            else:
                run.latency_ms[op].append(elapsed)
                run.ok[op] += 1
        except Exception as exc:  # noqa: BLE001 - counted by kind
            kind = error_kind(exc)
            (run.limited if kind == "429" else run.errors)[f"{op} {kind}"] += 1


def rss_of(stack: Stack) -> dict[str, float]:
    """RSS (MiB) of each service process and its children."""
    import psutil

    out: dict[str, float] = {}
    for name, svc in stack.services.items():
        try:
            proc = psutil.Process(svc.proc.pid)
            out[name] = sum(p.memory_info().rss for p in (proc, *proc.children(recursive=True))) / 2**20
        except psutil.NoSuchProcess:
            out[name] = 0.0
    return out


async def sample_rss(stack: Stack, every_s: float, into: list[tuple[float, dict[str, float]]], stop: asyncio.Event,
                     t0: float) -> None:
    while not stop.is_set():
        into.append((time.monotonic() - t0, await asyncio.to_thread(rss_of, stack)))
        try:
            await asyncio.wait_for(stop.wait(), timeout=every_s)
        except TimeoutError:
            pass


async def measure(stack: Stack, key: str, args: argparse.Namespace) -> list[str]:
    corpus = texts()
    weights = [int(w) for w in args.mix.split(":")]
    url = stack.gateway_url + "/mcp"
    run = Run(deadline=float("inf"), max_operations=args.max_operations)
    opened = asyncio.Event()
    ready = [0]
    failures: Counter[str] = Counter()
    samples: list[tuple[float, dict[str, float]]] = []
    t_open = time.monotonic()
    tasks = [asyncio.create_task(session(i, url, key, corpus, weights, run, opened, ready, failures, args.think))
             for i in range(args.sessions)]
    while ready[0] + sum(failures.values()) < args.sessions and time.monotonic() - t_open < 120:
        await asyncio.sleep(0.1)
    open_s = time.monotonic() - t_open
    print(f"{ready[0]} sessions open in {open_s:.1f} s ({sum(failures.values())} failed to open: {dict(failures)})",
          flush=True)
    stop = asyncio.Event()
    t0 = time.monotonic()
    run.deadline = t0 + args.duration
    sampler = asyncio.create_task(sample_rss(stack, args.rss_every, samples, stop, t0))
    opened.set()
    progress = asyncio.create_task(report_progress(run, t0))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - t0
    stop.set()
    progress.cancel()
    await sampler
    samples.append((elapsed, await asyncio.to_thread(rss_of, stack)))

    total_ok = sum(run.ok.values())
    lines = [f"{args.sessions} MCP sessions (the `mcp` SDK client, one connection each) for {elapsed:.0f} s "
             f"(bound {args.duration:.0f} s / {args.max_operations} operations), mix save:recall:profile = {args.mix}, "
             f"think time {'none (closed loop)' if args.think <= 0 else f'{args.think:g} s mean'}, "
             f"replicas {args.replicas}, rate limits {'as shipped' if args.product_limits else 'lifted'}",
             f"sessions opened: {ready[0]} of {args.sessions} in {open_s:.1f} s"
             + (f"; failed to open: {dict(failures)}" if failures else ""),
             f"throughput: {total_ok / elapsed:.1f} operations/s answered without error "
             f"({', '.join(f'{op} {run.ok[op] / elapsed:.1f}/s' for op in OPERATIONS)})"]
    for op in OPERATIONS:
        if run.latency_ms[op]:
            lines.append(f"{op}: {fmt(percentiles(run.latency_ms[op]))}")
    lines.append(f"errors (not 429): {sum(run.errors.values())}"
                 + (f" — {dict(run.errors.most_common(8))}" if run.errors else ""))
    lines.append(f"429 (rate limit, by design): {sum(run.limited.values())}")
    lines.append(f"sessions lost and opened again: {sum(run.lost.values())}"
                 + (f" — {dict(run.lost.most_common(5))}" if run.lost else ""))
    names = list(samples[0][1]) if samples else []
    if samples:
        picks = samples if len(samples) <= 8 else [samples[round(i * (len(samples) - 1) / 7)] for i in range(8)]
        lines.append("RSS MiB over time (s: " + ", ".join(names) + "): " + "; ".join(
            f"{t:.0f} s: " + " / ".join(f"{rss.get(n, 0):.0f}" for n in names) for t, rss in picks))
    return lines


async def report_progress(run: Run, t0: float) -> None:
    while True:
        await asyncio.sleep(10)
        done = sum(run.ok.values())
        print(f"  {time.monotonic() - t0:5.0f} s: {done} ok ({done / (time.monotonic() - t0):.1f}/s), "
              f"{sum(run.errors.values())} errors, {sum(run.limited.values())} × 429, "
              f"{sum(run.lost.values())} sessions lost", flush=True)


async def drop_schemas(database_url: str, schemas: list[str]) -> None:
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        for schema in schemas:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load (bound)")
    parser.add_argument("--max-operations", type=int, default=1_000_000, help="operations in all (bound)")
    parser.add_argument("--mix", default="3:6:1", help="weights save:recall:profile")
    parser.add_argument("--think", type=float, default=0.0,
                        help="mean seconds a session waits between operations (0: none, a closed loop)")
    parser.add_argument("--replicas", type=int, default=1, help="processes of every service (engram up --replicas)")
    parser.add_argument("--product-limits", action="store_true", help="keep the shipped rate limits (429s counted)")
    parser.add_argument("--rss-every", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # one socket per session, and the services'
    if soft < min(hard, 65536):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    options = stack_options("load")
    options.replicas = args.replicas
    options.metrics = False
    options.extra_env["ENGRAM_LOG_LEVEL"] = "WARNING"
    own_schemas = {"ENGRAM_EXTRACTOR_SCHEMA": f"ext_{options.namespace}", "ENGRAM_GRAPH_SCHEMA": f"graph_{options.namespace}"}
    if os.environ.get("ENGRAM_DATABASE_URL"):  # a shared Postgres: schemas of this run's own
        options.extra_env.update(own_schemas)
    if args.product_limits:
        for name in ("ENGRAM_RATE_LIMIT_PER_MINUTE", "ENGRAM_RATE_LIMIT_BURST"):
            options.extra_env.pop(name, None)
    stack = Stack(options, say=lambda line: print(line, flush=True))
    try:
        stack.start()
        key = stack.create_key(None, "load")["key"]
        lines = asyncio.run(measure(stack, key, args))
    finally:
        stack.stop()
        drop_shared_data(options)
        if options.database_url:
            asyncio.run(drop_schemas(options.database_url, list(own_schemas.values())))
    print("\n".join(lines))
    if args.record:
        record("Load: concurrent MCP sessions (bench/load.py)", lines)


if __name__ == "__main__":
    main()
