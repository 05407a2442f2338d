"""The design's external-agent workflow through the `mcp` SDK client, and the daily-log REST twins.

save_daily_log → get_unprocessed_logs → claim_daily_log → get_memory_by_key / save_memory /
update_memory → record_extraction_result → mark_log_processed; run twice, it produces no
duplicate memory or shared memory.

The stack runs the built-in extractor too (its default mode is ``auto``): each test works in a
project of its own, set to ``agent`` mode first (:func:`agents_only`), so the pipeline leaves its logs
to the external agent.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.test_project_restriction import auth

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def session(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None, result.content
    return result.structured_content  # type: ignore[no-any-return]


async def maintainer(running: Any) -> dict[str, str]:
    key = (await asyncio.to_thread(running.stack.create_key, running.user_id, "agent-" + uuid.uuid4().hex[:6],
                                   ["memory:read", "memory:write", "memory:maintenance"]))["key"]
    return {"Authorization": f"Bearer {key}", "X-Engram-Toolsets": "maintenance"}


async def key_for_another_project(running) -> str:  # type: ignore[no-untyped-def]
    """A key of the same user restricted to project "elsewhere" (made over REST by an admin key)."""
    admin = (await asyncio.to_thread(running.stack.create_key, running.user_id, "admin", ["admin"]))["key"]
    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        made = h.post("/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "elsewhere", "scopes": ["memory:read", "memory:write"],
            "project": "elsewhere"})
        assert made.status_code == 201, made.text
    return str(made.json()["key"])


async def agents_only(rest: httpx.AsyncClient, project: str) -> None:
    """The project's logs are left to external agents (``agent`` mode): the pipeline never claims them."""
    moved = await rest.put(f"/projects/{project}/extraction-mode", json={"mode": "agent"})
    assert moved.status_code == 200 and moved.json()["mode"] == "agent", moved.text


async def hand_over(rest: httpx.AsyncClient, log_id: str) -> None:
    """The log waits for the agent: still pending (the pipeline left it alone)."""
    log = (await rest.get(f"/daily-logs/{log_id}")).json()["log"]
    assert log["processing_status"] == "pending", log


def rest_client(running: Any, headers: dict[str, str]) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=running.base_url + "/v1", headers=headers, timeout=30)


FACTS = [("preference", "preference.drink", "Prefers green tea over coffee", [0]),
         ("user_profile", "profile.city", "Lives in Porto", [1])]


async def extract(client: Client, task_id: str, project: str) -> int:
    """One round of the external agent: every waiting log claimed, its facts written by key (hit →
    update, miss → save), the result recorded, the log marked processed. Returns logs handled."""
    handled = 0
    for log in (await call(client, "get_unprocessed_logs", limit=10, containerTag=project))["logs"]:
        claim = await call(client, "claim_daily_log", id=log["id"])
        if not claim["claimed"]:
            continue
        memory_ids = []
        for category, key, content, turns in FACTS:
            provenance = {"log_id": log["id"], "task_id": task_id, "turns": turns}
            found = await call(client, "get_memory_by_key", memory_key=key, containerTag=project)
            if found["found"]:
                written = await call(client, "update_memory", memory_key=key, content=content, provenance=provenance,
                                     containerTag=project)
            else:
                written = await call(client, "save_memory", category=category, memory_key=key, content=content,
                                     provenance=provenance, containerTag=project)
            memory_ids.append(written["memory_id"])
        shared = await call(client, "save_shared_memory", title=f"First tea tasting {project}",
                             event="We compared senchas")
        await call(client, "record_extraction_result", log_id=log["id"], task_id=task_id, memory_ids=memory_ids,
                   shared_memory_ids=[shared["shared_memory_id"]])
        await call(client, "mark_log_processed", id=log["id"])
        handled += 1
    return handled


async def test_external_agent_workflow_twice_makes_no_duplicates(running) -> None:  # type: ignore[no-untyped-def]
    headers = await maintainer(running)
    project = "dl-" + uuid.uuid4().hex[:8]
    async with session(running.mcp_url, headers) as client, rest_client(running, headers) as rest:
        await agents_only(rest, project)
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"save_daily_log", "get_unprocessed_logs", "update_log_status", "claim_daily_log",
                "mark_log_processed", "mark_log_failed", "recover_stuck_logs", "reconcile_log_statuses",
                "delete_logs", "record_extraction_task", "record_extraction_result",
                "get_extraction_tasks"} <= tools
        saved = await call(client, "save_daily_log", log_date="2025-02-01", events="Tea tasting", mood=2,
                           turns="user: I prefer green tea over coffee\nuser: I live in Porto now",
                           containerTag=project)
        assert saved["success"] and saved["created"] and uuid.UUID(saved["id"])
        await hand_over(rest, saved["id"])

        await call(client, "record_extraction_task", task_id=f"agent-{project}", log_ids=[saved["id"]],
                   status="running", containerTag=project)
        assert await extract(client, f"agent-{project}", project) == 1
        await call(client, "record_extraction_task", task_id=f"agent-{project}", status="success", containerTag=project)
        first = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
        shared_first = (await call(client, "get_shared_memories", title=f"First tea tasting {project}"))["shared_memories"]

        # the processed log is not waiting; queued again, the same run changes nothing
        assert await extract(client, f"agent-{project}", project) == 0
        await call(client, "update_log_status", id=saved["id"], processing_status="pending")
        assert await extract(client, f"agent-{project}", project) == 1
        again = await call(client, "save_daily_log", log_date="2025-02-01", events="Tea tasting", mood=2,
                           containerTag=project)
        assert again["id"] == saved["id"] and again["processing_status"] == "processed"  # not re-queued

        second = (await call(client, "recall_memory", limit=100, containerTag=project))["memories"]
        assert second == first  # no new memory, no new version
        assert len({m["content"] for m in second}) == len(second)
        ours = {m["memory_key"]: m for m in second if m["memory_key"] in ("preference.drink", "profile.city")}
        assert set(ours) == {"preference.drink", "profile.city"}
        assert all(m["provenance"]["log_date"] == "2025-02-01" for m in ours.values())
        shared = (await call(client, "get_shared_memories", title=f"First tea tasting {project}"))["shared_memories"]
        assert shared == shared_first and len(shared) == 1
        tasks = (await call(client, "get_extraction_tasks", task_id=f"agent-{project}"))["tasks"]
        assert tasks[0]["status"] == "success" and tasks[0]["log_ids"] == [saved["id"]]
        results = (await rest.get("/extraction-results", params={"log_id": saved["id"],
                                                                  "task_id": f"agent-{project}"})).json()["results"]
        assert len(results) == 1 and sorted(results[0]["memory_ids"]) == sorted(m["id"] for m in ours.values())

        text = (await client.call_tool("recall", {"query": "what does the user drink?",
                                                  "containerTag": project})).content[0].text
        assert "from log 2025-02-01" in text
        history = await call(client, "get_memory_history", memory_id=ours["profile.city"]["id"])
        assert history["versions"][-1]["provenance"]["task_id"] == f"agent-{project}"

        refused = await client.call_tool("claim_daily_log", {"id": saved["id"]})  # processed: refused
        assert refused.is_error and "already processed" in refused.content[0].text


async def test_claim_of_a_held_log_answers_claimed_false_and_refusals_name_the_field(running) -> None:  # type: ignore[no-untyped-def]
    headers = await maintainer(running)
    project = "dl-" + uuid.uuid4().hex[:8]
    async with session(running.mcp_url, headers) as client, rest_client(running, headers) as rest:
        await agents_only(rest, project)
        saved = await call(client, "save_daily_log", log_date="2025-02-02", events="x", containerTag=project)
        await hand_over(rest, saved["id"])
        assert (await call(client, "claim_daily_log", id=saved["id"]))["claimed"] is True
        assert (await call(client, "claim_daily_log", id=saved["id"]))["claimed"] is False
        for name, args, field in (
            ("save_daily_log", {"log_date": "2999-01-01"}, "log_date"),
            ("update_log_status", {"id": saved["id"], "processing_status": "processed", "error_reason": "x"},
             "error_reason"),
            ("record_extraction_result", {"log_id": str(uuid.uuid4()), "task_id": "t1"}, "log_id"),
        ):
            result = await client.call_tool(name, args)
            assert result.is_error and field in result.content[0].text, (name, result.content)
        failed = await call(client, "mark_log_failed", id=saved["id"], error_reason="model timed out")
        assert failed["log"]["processing_status"] == "pending" and failed["log"]["error_reason"] == "model timed out"
    # without the maintenance toolset only save_daily_log is offered
    async with session(running.mcp_url, {"Authorization": headers["Authorization"]}) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "save_daily_log" in tools and "claim_daily_log" not in tools


async def test_rest_twins(running) -> None:  # type: ignore[no-untyped-def]
    headers = await maintainer(running)
    project = "dl-" + uuid.uuid4().hex[:8]
    async with rest_client(running, headers) as rest:
        await agents_only(rest, project)
        saved = (await rest.post("/daily-logs", json={"log_date": "2025-02-03", "project": project, "turns": [
            {"speaker": "user", "text": "I started learning Rust"}]})).json()
        log_id = saved["id"]
        await hand_over(rest, log_id)
        waiting = (await rest.get("/daily-logs/unprocessed", params={"project": project})).json()["logs"]
        assert log_id in [w["id"] for w in waiting]
        assert (await rest.post(f"/daily-logs/{log_id}/claim")).json()["claimed"] is True
        assert (await rest.post(f"/daily-logs/{log_id}/claim")).json()["claimed"] is False
        bad = await rest.post(f"/daily-logs/{log_id}/status", json={"processing_status": "processed",
                                                                    "error_reason": "x"})
        assert bad.status_code == 422
        memory = (await rest.post("/memories", json={
            "content": "Learning Rust", "category": "skill", "memory_key": "skill.rust", "project": project,
            "provenance": {"log_id": log_id, "task_id": "rest-1", "turns": [0]}})).json()
        result = await rest.post("/extraction-results", json={"log_id": log_id, "task_id": "rest-1",
                                                               "memory_ids": [memory["memory_id"]]})
        assert result.status_code == 200 and result.json()["created"]
        assert (await rest.post(f"/daily-logs/{log_id}/processed")).json()["log"]["processing_status"] == "processed"
        assert (await rest.post(f"/daily-logs/{log_id}/claim")).status_code == 409
        assert (await rest.get("/daily-logs/reconcile")).status_code == 405  # not a log id
        listed = (await rest.get("/extraction-results", params={"log_id": log_id, "task_id": "rest-1"})).json()
        assert [r["task_id"] for r in listed["results"]] == ["rest-1"]
        by_key = (await rest.get("/memories/by-key", params={"memory_key": "skill.rust", "project": project})).json()
        assert by_key["memory"]["provenance"]["log_date"] == "2025-02-03"
        assert (await rest.post("/daily-logs/reconcile", json={"project": project})).json()["count"] == 0
        assert (await rest.post("/daily-logs/recover", json={"timeout_minutes": 30, "project": project})
                ).json()["count"] == 0
        deleted = (await rest.delete("/daily-logs", params={"older_than": "2999-01-01T00:00:00Z",
                                                             "project": project})).json()
        assert log_id in deleted["ids"]
        assert (await rest.get(f"/daily-logs/{log_id}")).json()["found"] is False
        # the maintenance routes need memory:maintenance
        plain_key = (await asyncio.to_thread(running.stack.create_key, running.user_id, "plain-" + uuid.uuid4().hex[:6],
                                             ["memory:read", "memory:write"]))["key"]
        plain = {"Authorization": f"Bearer {plain_key}"}
        refused = await rest.get("/daily-logs/unprocessed", headers=plain)
        assert refused.status_code == 403 and "memory:maintenance" in refused.text



async def test_a_turn_taken_out_of_the_log_takes_what_was_learnt_from_it(running) -> None:  # type: ignore[no-untyped-def]
    """The agent learnt "Prefers green tea" from turn 0 and "Lives in Porto" from turn 1. The user saves
    the day again over MCP without turn 1: the Porto memory is forgotten and named in the answer; the
    tea memory stays. Then over REST without turn 0 as well. A key restricted to another project,
    saving the same date there, reaches none of it."""
    headers = await maintainer(running)
    project = "dl-" + uuid.uuid4().hex[:8]
    turns = ["user: I prefer green tea over coffee", "user: I live in Porto now"]
    async with session(running.mcp_url, headers) as client, rest_client(running, headers) as rest:
        await agents_only(rest, project)
        saved = await call(client, "save_daily_log", log_date="2025-02-05", turns="\n".join(turns), containerTag=project)
        await hand_over(rest, saved["id"])
        assert await extract(client, f"agent-{project}", project) == 1
        ours = {m["memory_key"]: m["id"] for m in (await call(client, "recall_memory", limit=100,
                                                              containerTag=project))["memories"]}
        city, drink = ours["profile.city"], ours["preference.drink"]

        pinned = {"Authorization": f"Bearer {await key_for_another_project(running)}"}
        elsewhere = (await rest.post("/daily-logs", headers=pinned, json={
            "log_date": "2025-02-05", "turns": [{"speaker": "user", "text": "Nothing here"}]})).json()
        assert elsewhere["project"] == "elsewhere" and "forgotten" not in elsewhere, elsewhere
        refused = await rest.post("/daily-logs", headers=pinned, json={"log_date": "2025-02-05", "project": project,
                                                                      "turns": [{"speaker": "user", "text": "x"}]})
        assert refused.status_code == 403, refused.text
        assert (await rest.get(f"/memories/{city}")).json()["status"] == "active"

        again = await call(client, "save_daily_log", log_date="2025-02-05", turns=turns[0], containerTag=project)
        assert again["id"] == saved["id"] and again["forgotten"] == [city], again
        gone = (await rest.get(f"/memories/{city}")).json()
        assert gone["status"] == "forgotten", gone
        assert (await rest.get(f"/memories/{drink}")).json()["status"] == "active"
        text = (await client.call_tool("recall", {"query": "where does the user live?",
                                                  "containerTag": project})).content[0].text
        assert "Porto" not in text

        last = (await rest.post("/daily-logs", json={"log_date": "2025-02-05", "project": project, "turns": [
            {"speaker": "user", "text": "We talked about the weather"}]})).json()
        assert last["forgotten"] == [drink], last
