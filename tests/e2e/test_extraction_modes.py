"""Who learns from a daily log (issue 27), from outside with the `mcp` SDK client: a stack whose
install default is ``agent`` (ENGRAM_EXTRACTION, as `engram up --extraction agent` sets it), projects
switched to ``handoff`` and ``auto``; on the default (``auto``) stack, logs re-queued, re-saved, or
deleted and saved again are learned from again without duplicates; compatibility with the source
designs (docs/design.md: seed 2's ``user_id``, seed 1's ``x-sm-project``) and refusals at the MCP
endpoint that say which scope is missing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from mcp import Client

from deploy.stack import Stack, StackOptions
from tests.e2e.test_daily_log_tools import call, session
from tests.integration.test_purge import _drop, _sql

pytestmark = pytest.mark.e2e

MAINTAIN = ["memory:read", "memory:write", "memory:maintenance"]
HANDOFF_S = 6.0  # the agent stack's hand-off time (0.1 min)


@pytest.fixture(scope="module")
def agent_stack(infra) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    database = "engram_modes_" + uuid.uuid4().hex[:8]  # a database of its own: the schemas belong to one install
    asyncio.run(_sql(infra.admin_database_url, f'CREATE DATABASE "{database}"'))
    base, _, _ = infra.admin_database_url.rpartition("/")
    options = StackOptions(
        home=infra.root / "agent-stack-home", nats_url=infra.nats_url, database_url=f"{base}/{database}",
        namespace=infra.fresh_namespace(), gateway_port=0, auth_port=0,
        extra_env={"ENGRAM_EXTRACTION": "agent", "ENGRAM_EXTRACTION_HANDOFF_MINUTES": str(HANDOFF_S / 60),
                   "ENGRAM_EXTRACTION_SWEEP_INTERVAL_S": "1", "ENGRAM_RATE_LIMIT_PER_MINUTE": "100000",
                   "ENGRAM_RATE_LIMIT_BURST": "10000"},
    )
    stack = Stack(options, say=lambda _: None)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()
        asyncio.run(_drop(infra.nats_url, options.namespace))
        asyncio.run(_sql(infra.admin_database_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


def agent_headers(stack: Stack, user_id: str | None = None) -> tuple[dict[str, str], str]:
    made = stack.create_key(user_id, "agent-" + uuid.uuid4().hex[:6], MAINTAIN)
    return {"Authorization": f"Bearer {made['key']}", "X-Engram-Toolsets": "maintenance"}, made["view"]["user_id"]


def messages(exc: BaseException) -> str:
    """An exception's text with every nested one's (the SDK raises from a task group)."""
    inner = getattr(exc, "exceptions", ())
    return " | ".join([str(exc), *(messages(e) for e in inner)])


async def status_of(client: Client, log_id: str) -> str:
    return (await call(client, "get_daily_log", id=log_id))["log"]["processing_status"]  # type: ignore[no-any-return]


async def until_status(client: Client, log_id: str, want: str, timeout: float = 90.0) -> float:
    """Seconds until the log stands at ``want``."""
    t0 = time.monotonic()
    while (now := await status_of(client, log_id)) != want:
        assert time.monotonic() - t0 < timeout, f"log {log_id} still {now} after {timeout}s (want {want})"
        await asyncio.sleep(0.3)
    return time.monotonic() - t0


def test_agent_mode_leaves_every_log_to_the_agents(agent_stack: Stack) -> None:
    headers, _ = agent_headers(agent_stack)

    async def case() -> None:
        async with session(agent_stack.gateway_url + "/mcp", headers) as client:
            modes = await call(client, "get_extraction_modes")
            assert modes["default"] == "agent" and modes["projects"] == []
            saved = await call(client, "save_daily_log", log_date="2025-06-01",
                               turns="user: I live in Lisbon and I keep bees.")
            await asyncio.sleep(10)
            assert await status_of(client, saved["id"]) == "pending"  # the pipeline never claimed it
            waiting = (await call(client, "get_unprocessed_logs"))["logs"]
            assert saved["id"] in [w["id"] for w in waiting]

            claims = await asyncio.gather(*(call(client, "claim_daily_log", id=saved["id"]) for _ in range(8)))
            assert sum(c["claimed"] for c in claims) == 1
            memory = await call(client, "save_memory", category="user_profile", memory_key="profile.city",
                                content="Lives in Lisbon",
                                provenance={"log_id": saved["id"], "task_id": "agent-1", "turns": [0]})
            for _ in range(2):
                await call(client, "record_extraction_result", log_id=saved["id"], task_id="agent-1",
                           memory_ids=[memory["memory_id"]])
            results = (await call(client, "get_extraction_results", log_id=saved["id"]))["results"]
            assert len(results) == 1 and results[0]["memory_ids"] == [memory["memory_id"]]
            done = await call(client, "mark_log_processed", id=saved["id"])
            assert done["log"]["processing_status"] == "processed"
            await asyncio.sleep(2)
            assert await status_of(client, saved["id"]) == "processed"
            assert (await call(client, "get_extraction_results", log_id=saved["id"]))["results"] == results

    asyncio.run(case())


def test_handoff_gives_agents_the_first_chance_then_the_engine_takes_what_nobody_claimed(agent_stack: Stack) -> None:
    headers, _ = agent_headers(agent_stack)

    async def case() -> None:
        async with session(agent_stack.gateway_url + "/mcp", headers) as client:
            project = "hand-" + uuid.uuid4().hex[:6]
            mode = await call(client, "set_extraction_mode", mode="handoff", containerTag=project)
            assert (mode["project"], mode["mode"], mode["source"]) == (project, "handoff", "project")
            listed = (await client.call_tool("listProjects", {"refresh": True})).content[0].text
            assert f"{project}: handoff" in listed and "agent by default" in listed
            left = await call(client, "save_daily_log", log_date="2025-06-02", containerTag=project,
                              turns="user: I started learning the cello.")
            taken = await call(client, "save_daily_log", log_date="2025-06-03", containerTag=project,
                               turns="user: I moved to Porto.")
            assert (await call(client, "claim_daily_log", id=taken["id"]))["claimed"]  # an agent is on it
            waited = await until_status(client, left["id"], "processed")
            assert waited >= HANDOFF_S - 2, waited  # not before the hand-off (its save took a moment)
            results = (await call(client, "get_extraction_results", log_id=left["id"]))["results"]
            assert len(results) == 1 and results[0]["memory_ids"]  # the engine's task learned from it
            await asyncio.sleep(HANDOFF_S + 3)
            assert await status_of(client, taken["id"]) == "processing"  # still the agent's
            assert (await call(client, "get_extraction_results", log_id=taken["id"]))["results"] == []

    asyncio.run(case())


def test_switching_a_project_to_auto_picks_up_its_waiting_logs(agent_stack: Stack) -> None:
    headers, _ = agent_headers(agent_stack)

    async def case() -> None:
        async with session(agent_stack.gateway_url + "/mcp", headers) as client:
            project = "sw-" + uuid.uuid4().hex[:6]
            saved = await call(client, "save_daily_log", log_date="2025-06-04", containerTag=project,
                               turns="user: My sister Ana lives in Madrid.")
            await asyncio.sleep(3)
            assert await status_of(client, saved["id"]) == "pending"
            await call(client, "set_extraction_mode", mode="auto", containerTag=project)
            await until_status(client, saved["id"], "processed", timeout=60)
            back = await call(client, "set_extraction_mode", mode=None, containerTag=project)
            assert (back["mode"], back["source"]) == ("agent", "install")

    asyncio.run(case())


def test_engram_reextract_leaves_the_logs_it_extracts_processed(agent_stack: Stack) -> None:
    headers, user = agent_headers(agent_stack)

    async def save() -> str:
        async with session(agent_stack.gateway_url + "/mcp", headers) as client:
            saved = await call(client, "save_daily_log", log_date="2025-06-05", turns="user: I adopted a dog named Biscuit.")
            return saved["id"]  # type: ignore[no-any-return]

    log_id = asyncio.run(save())
    env = {**os.environ, "ENGRAM_NATS_URL": agent_stack.nats_url, "ENGRAM_NAMESPACE": agent_stack.o.namespace,
           "ENGRAM_DATABASE_URL": agent_stack.database_url, "ENGRAM_HOME": str(agent_stack.o.home)}
    done = subprocess.run([sys.executable, "-m", "deploy", "reextract", "--task-id", "again-1", "--user", user],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    async def check() -> None:
        async with session(agent_stack.gateway_url + "/mcp", headers) as client:
            assert await status_of(client, log_id) == "processed"
            results = (await call(client, "get_extraction_results", log_id=log_id, task_id="again-1"))["results"]
            assert len(results) == 1 and results[0]["memory_ids"]

    asyncio.run(check())


# the default mode (auto): every log is learned from, once per content --------------------------------
def test_requeued_resaved_and_recreated_logs_are_learned_from_again_without_duplicates(running) -> None:  # type: ignore[no-untyped-def]
    headers, _ = agent_headers(running.stack, running.user_id)
    project = "again-" + uuid.uuid4().hex[:6]

    async def case() -> None:
        async with session(running.mcp_url, headers) as client:
            saved = await call(client, "save_daily_log", log_date="2025-07-01", containerTag=project,
                               turns="user: I live in Lyon. I love hiking with my dog.")
            await until_status(client, saved["id"], "processed")
            first = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
            assert first

            await call(client, "update_log_status", id=saved["id"], processing_status="pending")
            assert await until_status(client, saved["id"], "processed", timeout=30) < 30
            again = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
            assert sorted(m["id"] for m in again) == sorted(m["id"] for m in first)  # nothing duplicated
            assert all(m["version"] == 1 for m in again)

            resaved = await call(client, "save_daily_log", log_date="2025-07-01", containerTag=project,
                                 turns="user: I live in Lyon. I love hiking with my dog. I want to run a marathon.")
            assert resaved["processing_status"] == "pending"  # new content is learned from
            await until_status(client, saved["id"], "processed")
            more = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
            assert any("marathon" in m["content"] for m in more)
            assert len(more) == len({m["content"] for m in more}) and len(more) > len(first)

            deleted = await call(client, "delete_logs", older_than="2999-01-01T00:00:00Z", containerTag=project)
            assert deleted["count"] == 1
            recreated = await call(client, "save_daily_log", log_date="2025-07-01", containerTag=project,
                                   turns="user: I started learning Portuguese.")
            assert recreated["id"] == saved["id"] and recreated["processing_status"] == "pending"
            await until_status(client, saved["id"], "processed")
            last = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
            assert any("Portuguese" in m["content"] for m in last)

    asyncio.run(case())


# seed compatibility, refusals in MCP's terms ----------------------------------------------------------
def test_seed_calls_user_id_pin_alias_and_a_missing_scope_named(running) -> None:  # type: ignore[no-untyped-def]
    headers, user = agent_headers(running.stack, running.user_id)

    async def case() -> None:
        async with session(running.mcp_url, headers) as client:
            ok = await call(client, "get_memory_by_key", memory_key="profile.nothing", user_id=user)
            assert ok["found"] is False
            refused = await client.call_tool("save_memory", {"category": "preference", "content": "Likes jazz",
                                                             "user_id": running.other_user_id})
            assert refused.is_error and "user_id" in refused.content[0].text
        pinned = {"Authorization": headers["Authorization"], "x-sm-project": "sm-" + uuid.uuid4().hex[:6]}
        async with session(running.mcp_url, pinned) as client:
            assert "containerTag" not in next(t for t in (await client.list_tools()).tools
                                              if t.name == "memory").input_schema["properties"]
            await client.call_tool("memory", {"content": "Pinned through the AI-memory header"})
            who = await call(client, "whoAmI")
            assert who["project"] == pinned["x-sm-project"]
        # a key without memory:maintenance opening the maintenance toolset: the SDK's error names the scope
        plain = {"Authorization": f"Bearer {running.key}", "X-Engram-Toolsets": "maintenance"}
        with pytest.raises(Exception) as refusal:
            async with session(running.mcp_url, plain) as client:
                await client.list_tools()
        assert "memory:maintenance" in messages(refusal.value), messages(refusal.value)

    asyncio.run(case())
