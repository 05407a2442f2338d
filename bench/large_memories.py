"""Memories of the largest accepted size (200,000 characters: pasted documents) through the MCP
gateway, and what everyone else sees meanwhile.

Starts its own stack (embedded NATS/Postgres unless ENGRAM_NATS_URL / ENGRAM_DATABASE_URL are set),
saves ``--documents`` texts of 200,000 characters of several kinds (LoCoMo dialogue when
``ENGRAM_LOCOMO`` names its file, prose made up here otherwise; one long word; capitals; characters
of 3 and 4 bytes) one after another through MCP, while a second client lists memories over REST
every 50 ms. Then asks a recall of 100 hits and a list of 100 memories, which hold every document.
Prints each save's latency, the REST calls' latency during the saves, and the sizes and latencies of
the recall, the list and one document read whole.

    python bench/large_memories.py --documents 8

Before 2026-12-05 one such save held the memory service for minutes (the truth rules backtracked
over the text) and a recall holding several was larger than the bus carries (docs/security.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import LOCOMO, fmt, machine, percentiles, stack_options  # noqa: E402

from contracts.memory import MAX_CONTENT_CHARS  # noqa: E402
from deploy.stack import Stack  # noqa: E402


def documents(n: int) -> list[str]:
    """``n`` texts of MAX_CONTENT_CHARS characters, the kinds taking turns."""
    if LOCOMO.exists():
        turns = [t["text"] for conv in json.loads(LOCOMO.read_text()) for key, value in conv["conversation"].items()
                 if key.startswith("session_") and isinstance(value, list) for t in value]
    else:
        turns = [f"On day {i} I met Ana at the climbing gym and we talked about item {i * 7} and my favourite book."
                 for i in range(5000)]

    def prose(offset: int) -> str:
        out, i = [], offset
        while sum(map(len, out)) < MAX_CONTENT_CHARS:
            out.append(turns[i % len(turns)])
            i += 7
        return " ".join(out)

    kinds = [lambda i: prose(i * 1000), lambda i: f"{i} " + "x" * MAX_CONTENT_CHARS,
             lambda i: f"{i} " + "Ab " * (MAX_CONTENT_CHARS // 3),
             lambda i: f"{i} " + "我住在柏林。I love 🍣 and 🏔️ " * (MAX_CONTENT_CHARS // 20)]
    return [kinds[i % len(kinds)](i)[:MAX_CONTENT_CHARS] for i in range(n)]


async def save_all(url: str, key: str, texts: list[str]) -> list[float]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=300.0))
    out = []
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        for text in texts:
            t0 = time.perf_counter()
            result = await client.call_tool("memory", {"content": text, "containerTag": "documents"})
            out.append((time.perf_counter() - t0) * 1000)
            if result.is_error:
                sys.exit(f"save failed: {result.content}")
    return out


async def recall(url: str, key: str) -> tuple[float, int, bool]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=300.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        t0 = time.perf_counter()
        result = await client.call_tool("recall", {"query": "what did I talk about at the climbing gym",
                                                   "containerTag": "documents", "limit": 100})
        took = (time.perf_counter() - t0) * 1000
        text = "\n".join(c.text for c in result.content if getattr(c, "text", None))
        return took, len(text.encode()), not result.is_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=8)
    args = parser.parse_args()
    texts = documents(args.documents)
    with Stack(stack_options("large")) as stack:
        key = stack.create_key(None, "bench")["key"]
        rest = httpx.Client(base_url=stack.gateway_url + "/v1", headers={"Authorization": f"Bearer {key}"}, timeout=300)
        during: list[float] = []
        failed: list[int] = []
        done = threading.Event()

        def bystander() -> None:  # another client of the same install, listing while the documents arrive
            while not done.is_set():
                t0 = time.perf_counter()
                status = rest.get("/memories", params={"limit": 1}).status_code
                during.append((time.perf_counter() - t0) * 1000)
                if status != 200:
                    failed.append(status)
                time.sleep(0.05)

        thread = threading.Thread(target=bystander)
        thread.start()
        try:
            saves = asyncio.run(save_all(stack.gateway_url + "/mcp", key, texts))
        finally:
            done.set()
            thread.join()
        recall_ms, recall_bytes, recall_ok = asyncio.run(recall(stack.gateway_url + "/mcp", key))
        t0 = time.perf_counter()
        listed = rest.get("/memories", params={"project": "documents", "limit": 100})
        list_ms = (time.perf_counter() - t0) * 1000
        first = listed.json()["memories"][0]["id"] if listed.status_code == 200 else None
        t0 = time.perf_counter()
        whole = rest.get(f"/memories/{first}") if first else None
        get_ms = (time.perf_counter() - t0) * 1000
        rest.close()
    print(f"machine: {machine()}")
    print(f"{args.documents} saves of {MAX_CONTENT_CHARS:,} characters through MCP, one at a time: {fmt(percentiles(saves))}")
    print(f"REST list by another client meanwhile: {fmt(percentiles(during))}; non-200 answers: {len(failed)}")
    print(f"recall, 100 hits: {recall_ms:.0f} ms, {recall_bytes:,} bytes of text, {'ok' if recall_ok else 'FAILED'}")
    print(f"REST list, 100 memories: {list_ms:.0f} ms, {len(listed.content):,} bytes, status {listed.status_code}")
    if whole is not None:
        print(f"REST get of one document, whole: {get_ms:.0f} ms, {len(whole.content):,} bytes, status {whole.status_code}")


if __name__ == "__main__":
    main()
