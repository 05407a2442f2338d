"""Shared helpers for the benchmarks: the machine, percentiles, LoCoMo data, the results file."""

from __future__ import annotations

import json
import os
import platform
import statistics
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = Path(os.environ.get("ENGRAM_LOCOMO", ROOT.parent / "shared" / "bench" / "locomo10.json"))
RESULTS = ROOT / "docs" / "benchmarks.md"
# A benchmark measures throughput, so the per-credential rate limits are lifted for its stack.
BENCH_ENV = {
    "ENGRAM_LOG_LEVEL": "WARNING",
    "ENGRAM_RATE_LIMIT_PER_MINUTE": "10000000",
    "ENGRAM_RATE_LIMIT_BURST": "100000",
}


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
    """Append a dated section to docs/benchmarks.md."""
    RESULTS.parent.mkdir(exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text("# Benchmarks\n\nFigures written by the scripts in `bench/`; newest last.\n")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "\n".join(f"- {line}" for line in lines)
    with RESULTS.open("a") as f:
        f.write(f"\n## {title} — {stamp}\n\nMachine: {machine()}\n\n{body}\n")
