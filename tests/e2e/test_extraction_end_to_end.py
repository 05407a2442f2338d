"""The automatic pipeline end to end, through the `mcp` SDK client against the stack `engram up`
runs (gateway, auth, memory and the extractor, each its own process): a day's conversation saved
with `save_daily_log` becomes memories that `recall` finds, each with its provenance (the log, the
task and the turns) in `get_memory_history`; `engram status` shows the extractor's consumer and
tasks. Waits are bounded polls; no timing is asserted (the lag is printed)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.e2e
TASK = "builtin-v1"  # the continuous pipeline's task id (ENGRAM_EXTRACTOR_TASK_ID unset)
TURNS = [
    {"speaker": "user", "text": "Good morning!"},
    {"speaker": "assistant", "text": "Good morning! What's new?"},
    {"speaker": "user", "text": "I moved to Valparaiso last week. I work as a marine biologist."},
    {"speaker": "assistant", "text": "That sounds exciting."},
    {"speaker": "user", "text": "My sister is called Inés. I want to learn to surf this summer."},
]


@asynccontextmanager
async def session(running: Any, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=headers or {"Authorization": f"Bearer {running.key}"},
                              timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(running.mcp_url, http_client=http)) as client:
        yield client


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None, result.content
    return result.structured_content  # type: ignore[no-any-return]


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def test_a_saved_log_is_extracted_into_memories_recall_finds_with_provenance(running) -> None:  # type: ignore[no-untyped-def]
    project = "auto-" + uuid.uuid4().hex[:8]
    async with session(running) as client:
        started = time.monotonic()
        saved = await call(client, "save_daily_log", log_date="2025-04-12", turns=TURNS, topics="moving, family",
                           containerTag=project)
        log_id = saved["id"]
        assert saved["created"] and uuid.UUID(log_id)

        # bounded wait (a hang ends the test, nothing is timed): the extracted facts become recallable
        found = ""
        lag = None
        for _ in range(600):
            found = text_of(await client.call_tool("recall", {"query": "Where does the user live?",
                                                              "containerTag": project}))
            if "Valparaiso" in found:
                lag = time.monotonic() - started
                break
            await asyncio.sleep(0.1)
        assert "Valparaiso" in found, found
        print(f"\nextraction lag, save_daily_log -> recall finds the fact: {lag:.2f} s")
        assert "from log 2025-04-12" in found  # recall output names the log it came from

        # the extractor writes a log's facts one by one: wait (bounded) until all of them are listed
        facts = ("Valparaiso", "marine biologist", "Inés", "surf")
        memories: list[dict[str, Any]] = []
        for _ in range(600):
            memories = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
            joined = " | ".join(m["content"] for m in memories)
            if all(fact in joined for fact in facts):
                break
            await asyncio.sleep(0.1)
        print(f"extraction lag, save_daily_log -> every fact of the log listed: {time.monotonic() - started:.2f} s")
        joined = " | ".join(m["content"] for m in memories)
        for fact in facts:
            assert fact in joined, joined
        for m in memories:
            prov = m["provenance"]
            assert prov["log_id"] == log_id and prov["task_id"] == TASK and prov["log_date"] == "2025-04-12"
            assert all(TURNS[i]["speaker"] == "user" for i in prov["turns"])  # only the user's turns
        valparaiso = next(m for m in memories if "Valparaiso" in m["content"])
        assert valparaiso["provenance"]["turns"] == [2]

        history = await call(client, "get_memory_history", memory_id=valparaiso["id"])
        assert history["versions"][-1]["provenance"]["log_id"] == log_id
        assert history["versions"][-1]["provenance"]["turns"] == [2]

        # the same day saved again once processed: no re-extraction, no new memory
        for _ in range(600):
            again = await call(client, "save_daily_log", log_date="2025-04-12", turns=TURNS, containerTag=project)
            if again["processing_status"] == "processed":
                break
            await asyncio.sleep(0.1)
        assert again["id"] == log_id and again["processing_status"] == "processed"
        listed = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
        assert sorted(m["id"] for m in listed) == sorted(m["id"] for m in memories)
        assert [m["version"] for m in sorted(listed, key=lambda m: m["id"])] == [
            m["version"] for m in sorted(memories, key=lambda m: m["id"])]

    # the lifecycle as a maintainer sees it: processed, one result of the extractor's task
    key = (await asyncio.to_thread(running.stack.create_key, running.user_id, "ops-" + uuid.uuid4().hex[:6],
                                   ["memory:read", "memory:write", "memory:maintenance"]))["key"]
    async with httpx.AsyncClient(base_url=running.base_url + "/v1", timeout=30,
                                 headers={"Authorization": f"Bearer {key}"}) as rest:
        log = (await rest.get(f"/daily-logs/{log_id}")).json()["log"]
        assert log["processing_status"] == "processed" and log["retry_count"] == 0
        results = (await rest.get("/extraction-results", params={"log_id": log_id})).json()["results"]
        assert [r["task_id"] for r in results] == [TASK]
        assert sorted(results[0]["memory_ids"]) == sorted(m["id"] for m in memories)

    # `engram status`: the extractor's consumer (its lag) and its tasks by state
    stack = running.stack
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env |= {"ENGRAM_HOME": str(stack.o.home), "ENGRAM_NATS_URL": stack.nats_url, "ENGRAM_NAMESPACE": stack.o.namespace,
            "ENGRAM_DATABASE_URL": stack.database_url, "COLUMNS": "250"}
    out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "deploy", "status"], env=env,
                                  capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "extractor-logs" in out.stdout, out.stdout
    assert "Extraction tasks:" in out.stdout and " done" in out.stdout, out.stdout
