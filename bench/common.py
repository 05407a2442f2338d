"""Shared helpers for the benchmarks: the machine, percentiles, LoCoMo data, the results file."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = Path(os.environ.get("ENGRAM_LOCOMO", ROOT.parent / "shared" / "bench" / "locomo10.json"))
RESULTS = ROOT / "docs" / "benchmarks-log.md"  # the journal; docs/benchmarks.md is the current table
# A benchmark measures throughput, so the per-credential rate limits are lifted for its stack.
BENCH_ENV = {
    "ENGRAM_LOG_LEVEL": "WARNING",
    "ENGRAM_RATE_LIMIT_PER_MINUTE": "10000000",
    "ENGRAM_RATE_LIMIT_BURST": "100000",
    "ENGRAM_STALL_WARNING_MS": "30",  # each event-loop stall over 30 ms is logged: stalls() counts them
}


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    sys.exit(128 + signum)


def stack_options(prefix: str, home: Path | None = None, namespace: str | None = None) -> Any:
    """Options for a benchmark's stack: the servers named by ENGRAM_NATS_URL / ENGRAM_DATABASE_URL
    when set (else embedded ones in ``home``). On a shared Postgres the stack gets schemas of its
    own: a schema belongs to one namespace, and runs must not mix their read models. A SIGTERM
    (``kill``, ``pkill``) then exits through the bench's ``finally`` blocks, so the stack stops and
    its streams and schemas are dropped, as on Ctrl-C."""
    from deploy.stack import StackOptions

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)

    namespace = namespace or prefix + uuid.uuid4().hex[:6]
    database_url = os.environ.get("ENGRAM_DATABASE_URL")
    env = dict(BENCH_ENV)
    if database_url:
        env.update(ENGRAM_MEMORY_SCHEMA=f"mem_{namespace}", ENGRAM_AUTH_SCHEMA=f"auth_{namespace}",
                   ENGRAM_GRAPH_SCHEMA=f"graph_{namespace}", ENGRAM_EXTRACTOR_SCHEMA=f"extractor_{namespace}")
    return StackOptions(
        home=home or Path(tempfile.mkdtemp(prefix=f"engram-{prefix}-")), nats_url=os.environ.get("ENGRAM_NATS_URL"),
        database_url=database_url, namespace=namespace, gateway_port=0, extra_env=env,
    )


def memory_schema(options: Any) -> str:
    return str(options.extra_env.get("ENGRAM_MEMORY_SCHEMA", "memory"))


def drop_shared_data(options: Any) -> None:
    """Remove a finished run's streams and schemas from servers that outlive it (embedded servers
    keep their data in the run's folder)."""
    from contracts.subjects import Names
    from kit.bus import Bus
    from kit.pg import create_pool

    async def drop() -> None:
        if options.nats_url:
            bus = await Bus.connect(options.nats_url, Names(options.namespace), name="bench-cleanup")
            try:
                await bus.delete_streams()
            finally:
                await bus.close()
        if options.database_url:
            pool = await create_pool(options.database_url, max_size=1)
            try:
                for key in ("ENGRAM_MEMORY_SCHEMA", "ENGRAM_AUTH_SCHEMA", "ENGRAM_GRAPH_SCHEMA", "ENGRAM_EXTRACTOR_SCHEMA"):
                    if key in options.extra_env:
                        await pool.execute(f"DROP SCHEMA IF EXISTS {options.extra_env[key]} CASCADE")
            finally:
                await pool.close()

    asyncio.run(drop())


def process_groups(stack: Any, me: str) -> dict[str, list[Any]]:
    """The processes whose CPU a benchmark charges to its work, by role (``me``: this script)."""
    import psutil

    groups: dict[str, list[Any]] = {}
    for name, svc in stack.services.items():
        try:
            proc = psutil.Process(svc.proc.pid)
            groups[name] = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    groups["nats-server"] = []
    groups["postgres"] = []
    for proc in psutil.process_iter(["name"]):
        name = proc.info["name"] or ""
        if name.startswith("nats-server"):
            groups["nats-server"].append(proc)
        elif name.startswith("postgres"):
            groups["postgres"].append(proc)
    groups[me] = [psutil.Process()]
    return groups


def cpu_seconds(groups: dict[str, list[Any]]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each group."""
    import psutil

    out: dict[str, float] = {}
    for role, procs in groups.items():
        total = 0.0
        for proc in procs:
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                continue
        out[role] = total
    return out


def settle(groups: dict[str, list[Any]], me: str, *, idle: float = 0.05, quiet_for: int = 3,
           interval: float = 2.0, at_most: float = 600.0) -> float:
    """Wait until the stack is idle: its services (every group but ``me``, and but the NATS and
    Postgres servers, which may be the machine's and shared) used less than ``idle``
    of one core in each of ``quiet_for`` intervals in a row (a stack just started or just loaded
    still works: the graph's neighbour rounds, the index's optimiser, replicas catching up; figures
    taken meanwhile were ~10 ms worse at 100k). Returns the seconds waited (``at_most`` at most)."""
    start = time.monotonic()
    quiet = 0
    before = cpu_seconds(groups)
    while quiet < quiet_for and time.monotonic() - start < at_most:
        time.sleep(interval)
        after = cpu_seconds(groups)
        busy = sum(after[r] - before[r] for r in after if r not in (me, "nats-server", "postgres")) / interval
        quiet = quiet + 1 if busy < idle else 0
        before = after
    return time.monotonic() - start


def cpu_profile(before: dict[str, float], after: dict[str, float], operations: int) -> tuple[str, float]:
    """("memory 4.2, gateway 1.0", 5.2): CPU ms per operation by process group, largest first, and the total."""
    per_op = {role: 1000 * (after[role] - before[role]) / operations for role in before}
    parts = ", ".join(f"{role} {ms:.1f}" for role, ms in sorted(per_op.items(), key=lambda kv: -kv[1]))
    return parts, sum(per_op.values())


def log_sizes(stack: Any) -> dict[str, int]:
    """Where each service's log ends now, for ``stalls`` to read what a measurement added."""
    return {name: svc.log_path.stat().st_size for name, svc in stack.services.items()}


def stalls(stack: Any, since: dict[str, int]) -> str:
    """The event-loop stall warnings each service logged after ``since``: "memory 3 (max 41 ms, GC 0 ms), …"."""
    import re

    parts = []
    for name, svc in stack.services.items():
        with svc.log_path.open("rb") as f:
            f.seek(since.get(name, 0))
            found = re.findall(rb"stalled for (\d+) ms \(garbage collection: (\d+) ms", f.read())
        if found:
            worst = max(found, key=lambda m: int(m[0]))
            parts.append(f"{name} {len(found)} (worst {int(worst[0])} ms, of it GC {int(worst[1])} ms)")
    return ", ".join(parts) or "none"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        one, five, fifteen = os.getloadavg()
        load = f", load average {one:.1f}/{five:.1f}/{fifteen:.1f} when recorded"
    return f"{os.cpu_count()} cores ({cpu}){mem}, Python {platform.python_version()}, {platform.system()}{load}"


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    s = sorted(samples_ms)

    def pick(q: float) -> float:
        return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]

    return {"n": len(s), "p50": statistics.median(s), "p95": pick(0.95), "p99": pick(0.99), "max": s[-1]}


def fmt(p: dict[str, float]) -> str:
    return f"p50 {p['p50']:.1f} ms · p95 {p['p95']:.1f} ms · p99 {p['p99']:.1f} ms · max {p['max']:.1f} ms (n={p['n']})"


def locomo() -> list[dict]:  # type: ignore[type-arg]
    return json.loads(LOCOMO.read_text())


def locomo_turns() -> list[tuple[str, str, str]]:
    """(conversation id, dia_id, "Speaker: text") for every dialogue turn."""
    out = []
    for conv in locomo():
        c = conv["conversation"]
        for key, turns in c.items():
            if key.startswith("session_") and isinstance(turns, list):
                for t in turns:
                    out.append((conv["sample_id"], t["dia_id"], f"{t['speaker']}: {t['text']}"))
    return out


def record(title: str, lines: list[str]) -> None:
    """Append a dated section to docs/benchmarks-log.md (the journal; move the new figure into docs/benchmarks.md's table)."""
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text("# Benchmarks\n\nFigures written by the scripts in `bench/`; newest last.\n")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "\n".join(f"- {line}" for line in lines)
    with RESULTS.open("a") as f:
        f.write(f"\n## {title} — {stamp}\n\nMachine: {machine()}\n\n{body}\n")
