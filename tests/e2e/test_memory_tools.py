"""Every memory tool, resource and prompt through the `mcp` SDK client; the project pin; REST twins."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def connect(running, key: str | None = None, project: str | None = None) -> AsyncIterator[Client]:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {key or running.key}"}
    if project:
        headers["X-Engram-Project"] = project
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(running.mcp_url, http_client=http)) as client:
        yield client


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def data_of(result) -> dict:  # type: ignore[no-untyped-def,type-arg]
    assert not result.is_error, text_of(result)
    return result.structured_content or json.loads(text_of(result))


async def test_structured_memory_tools(running) -> None:  # type: ignore[no-untyped-def]
    tag = "tools-" + uuid.uuid4().hex[:6]
    async with connect(running) as c:
        saved = data_of(await c.call_tool("save_memory", {
            "category": "preference", "memory_key": "preference.drink", "content": "Drinks black coffee", "containerTag": tag,
        }))
        assert saved["created"] and saved["memory_key"] == "preference.drink"
        again = data_of(await c.call_tool("save_memory", {
            "category": "preference", "memory_key": "preference.drink", "content": "Switched to green tea", "containerTag": tag,
        }))
        assert again["updated"] and again["memory_id"] == saved["memory_id"] and again["version"] == 2
        found = data_of(await c.call_tool("get_memory_by_key", {"memory_key": "preference.drink", "containerTag": tag}))
        assert found["found"] and found["memory"]["content"] == "Switched to green tea"
        updated = data_of(await c.call_tool("update_memory", {"memory_key": "preference.drink", "importance": 5, "containerTag": tag}))
        assert updated["version"] == 3
        listed = data_of(await c.call_tool("recall_memory", {"category": "preference", "keyword": "green", "containerTag": tag}))
        assert [m["content"] for m in listed["memories"]] == ["Switched to green tea"]
        history = data_of(await c.call_tool("get_memory_history", {"memory_id": saved["memory_id"]}))
        assert [v["content"] for v in history["versions"]][:2] == ["Drinks black coffee", "Switched to green tea"]
        recalled = text_of(await c.call_tool("recall", {"query": "what do I drink", "containerTag": tag}))
        assert "green tea" in recalled and "↻v3" in recalled and "## Profile" in recalled
        bad_key = await c.call_tool("save_memory", {"category": "goal", "memory_key": "preference.x", "content": "x"})
        assert bad_key.is_error and "memory_key" in text_of(bad_key)
        bad_importance = await c.call_tool("save_memory", {"category": "goal", "content": "x", "importance": 9})
        assert bad_importance.is_error and "importance" in text_of(bad_importance)
        both = await c.call_tool("update_memory", {"id": saved["memory_id"], "memory_key": "preference.drink", "content": "y"})
        assert both.is_error and "exactly one of id or memory_key" in text_of(both)
        unknown = await c.call_tool("update_memory", {"id": str(uuid.uuid4()), "content": "y"})
        assert unknown.is_error and "not_found" in text_of(unknown)
        big = await c.call_tool("save_memory", {"category": "goal", "content": "x" * 4001})
        assert big.is_error and "4000" in text_of(big)


async def test_shared_memories_tools(running) -> None:  # type: ignore[no-untyped-def]
    title = f"Concert night {uuid.uuid4().hex[:6]}"
    async with connect(running) as c:
        first = data_of(await c.call_tool("save_shared_memory", {"title": title, "event": "We saw Radiohead"}))
        second = data_of(await c.call_tool("save_shared_memory", {"title": title, "event": "We saw Radiohead in Lisbon"}))
        assert first["shared_memory_id"] == second["shared_memory_id"] and second["updated"]
        exact = data_of(await c.call_tool("get_shared_memories", {"title": title}))
        assert [s["event"] for s in exact["shared_memories"]] == ["We saw Radiohead in Lisbon"]
        assert data_of(await c.call_tool("get_shared_memories", {"keyword": "radiohead"}))["shared_memories"]
    async with connect(running, key=running.other_key) as bob:
        assert data_of(await bob.call_tool("get_shared_memories", {"keyword": "radiohead"}))["shared_memories"] == []


async def test_projects_resources_and_prompt(running) -> None:  # type: ignore[no-untyped-def]
    tag = "proj-" + uuid.uuid4().hex[:6]
    async with connect(running) as c:
        await c.call_tool("memory", {"content": "Project kickoff is on Monday", "containerTag": tag})
        listing = text_of(await c.call_tool("listProjects", {"refresh": True}))
        assert tag in listing
        resources = {str(r.uri) for r in (await c.list_resources()).resources}
        assert {"engram://profile", "engram://projects"} <= resources
        projects = await c.read_resource("engram://projects")
        assert tag in projects.contents[0].text
        profile = await c.read_resource("engram://profile")
        assert "## Profile" in profile.contents[0].text
        prompt = await c.get_prompt("context", {})
        assert "memory" in prompt.messages[0].content.text


async def test_project_pin_hides_container_tag_and_applies(running) -> None:  # type: ignore[no-untyped-def]
    pin = "pinned-" + uuid.uuid4().hex[:6]
    async with connect(running, project=pin) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        for tool in tools.values():
            assert "containerTag" not in tool.input_schema.get("properties", {}), tool.name
        await c.call_tool("memory", {"content": "Pinned fact: the staging DB is read-only"})
        assert "staging DB" in text_of(await c.call_tool("recall", {"query": "staging database"}))
    async with connect(running) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "containerTag" in tools["memory"].input_schema["properties"]
        other = text_of(await c.call_tool("recall", {"query": "staging database", "containerTag": "default"}))
        assert "staging DB" not in other
        inside = text_of(await c.call_tool("recall", {"query": "staging database", "containerTag": pin}))
        assert "staging DB" in inside
    async with httpx.AsyncClient() as http:
        bad = await http.post(running.mcp_url, headers={"Authorization": f"Bearer {running.key}", "X-Engram-Project": "no spaces"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "X-Engram-Project"


async def test_rest_twins_of_the_tools(running) -> None:  # type: ignore[no-untyped-def]
    tag = "rest-" + uuid.uuid4().hex[:6]
    async with httpx.AsyncClient(base_url=running.base_url, headers={"Authorization": f"Bearer {running.key}"}, timeout=30) as h:
        r = await h.post("/v1/memories", json={"content": "Allergic to penicillin", "category": "user_profile",
                                                "memory_key": "profile.allergies", "project": tag, "importance": 5})
        assert r.status_code == 201, r.text
        mid = r.json()["memory_id"]
        u = await h.post("/v1/memories/update", json={"memory_key": "profile.allergies", "project": tag,
                                                       "content": "Allergic to penicillin and latex"})
        assert u.json()["version"] == 2
        assert (await h.get("/v1/memories/by-key", params={"memory_key": "profile.allergies", "project": tag})).json()["found"]
        listed = (await h.get("/v1/memories", params={"category": "user_profile", "project": tag})).json()["memories"]
        assert [m["content"] for m in listed] == ["Allergic to penicillin and latex"]
        versions = (await h.get(f"/v1/memories/{mid}/history")).json()["versions"]
        assert len(versions) == 2 and versions[0]["valid_until"]
        assert (await h.post("/v1/shared-memories", json={"title": f"t {tag}", "event": "e"})).status_code == 200
        assert (await h.get("/v1/shared-memories", params={"title": f"t {tag}"})).json()["shared_memories"]
        assert tag in {p["project"] for p in (await h.get("/v1/projects")).json()["projects"]}
        prof = (await h.get("/v1/profile", params={"project": tag})).json()
        assert prof["static"][0]["content"] == "Allergic to penicillin and latex"
        found = (await h.post("/v1/recall", json={"query": "allergies", "project": tag, "include_profile": True})).json()
        assert found["hits"][0]["memory"]["content"] == "Allergic to penicillin and latex"
        assert found["hits"][0]["memory"]["confidence"] == 0.8 and found["profile"] == prof
        assert (await h.post("/v1/recall", json={"query": "allergies", "project": tag})).json()["profile"] is None
        bad = await h.post("/v1/memories", json={"content": "x", "category": "goal", "memory_key": "profile.x"})
        assert bad.status_code == 422 and "memory_key" in bad.text
        both = await h.post("/v1/memories/update", json={"content": "x"})
        assert both.status_code == 422
        missing = await h.get(f"/v1/memories/{uuid.uuid4()}/history")
        assert missing.status_code == 404
        other = await h.get(f"/v1/memories/{mid}/history", headers={"Authorization": f"Bearer {running.other_key}"})
        assert other.status_code == 404


async def test_recall_with_rerank_through_mcp_and_rest(running) -> None:  # type: ignore[no-untyped-def]
    tag = "rerank-" + uuid.uuid4().hex[:6]
    async with connect(running) as c:
        for content in ("Nate: How long have you had your dog? How long do dogs live?",
                        "Nate: I've had my turtles for 3 years now, they are so calm."):
            assert not (await c.call_tool("memory", {"content": content, "containerTag": tag})).is_error
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["recall"].input_schema["properties"]["rerank"]["default"] is False
        text = text_of(await c.call_tool("recall", {
            "query": "For how long has Nate had his turtles?", "containerTag": tag, "rerank": True,
            "includeProfile": False, "limit": 1,
        }))
        assert text.count("\n[") == 1 and "[1] (" in text and "turtles for 3 years" in text
    async with httpx.AsyncClient(base_url=running.base_url, headers={"Authorization": f"Bearer {running.key}"}, timeout=30) as h:
        found = (await h.post("/v1/recall", json={"query": "For how long has Nate had his turtles?", "project": tag,
                                                   "rerank": True, "limit": 2})).json()
        assert [hit["memory"]["content"][:20] for hit in found["hits"]] == ["Nate: I've had my tu", "Nate: How long have "]
        assert 0 < found["hits"][1]["score"] < found["hits"][0]["score"] <= 1
        bad = await h.post("/v1/recall", json={"query": "x", "project": tag, "rerank": "maybe"})
        assert bad.status_code == 422 and "rerank" in bad.text


async def test_deep_recall_through_mcp_and_rest(running) -> None:  # type: ignore[no-untyped-def]
    # issue 34: John's one book among six turns of Tim's about books; deep recall puts John's first
    tag = "deep-" + uuid.uuid4().hex[:6]
    dune = "John: I just finished Dune by Frank Herbert, what a ride."
    turns = ["Tim: I have read so many fantasy books this year, John.", "Tim: Reading books before bed is my habit.",
             "Tim: John, have you read any good books lately? I read a lot.", "Tim: My bookshelf is full of books.",
             "Tim: I read books about dragons and wizards all the time.", "Tim: I've read every book by Rothfuss.",
             dune]
    question = "What books has John read?"
    async with connect(running) as c:
        for content in turns:
            assert not (await c.call_tool("memory", {"content": content, "containerTag": tag})).is_error
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["recall"].input_schema["properties"]["deep"]["default"] is False
        text = text_of(await c.call_tool("recall", {
            "query": question, "containerTag": tag, "deep": True, "includeProfile": False, "limit": 1,
        }))
        assert "[1] (" in text and "Dune" in text
    async with httpx.AsyncClient(base_url=running.base_url, headers={"Authorization": f"Bearer {running.key}"}, timeout=30) as h:
        found = (await h.post("/v1/recall", json={"query": question, "project": tag, "mode": "deep", "limit": 3})).json()
        assert found["hits"][0]["memory"]["content"] == dune
        bad = await h.post("/v1/recall", json={"query": "x", "project": tag, "mode": "deeper"})
        assert bad.status_code == 422 and "mode" in bad.text


async def test_context_helps_recall_and_is_not_content(running) -> None:  # type: ignore[no-untyped-def]
    tag = "context-" + uuid.uuid4().hex[:6]
    answer = "Nate: I've had them for 3 years now."
    async with connect(running) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        for name in ("memory", "save_memory", "update_memory"):
            prop = tools[name].input_schema["properties"]["context"]
            assert "2,000" in prop["description"]  # documented limit, optional
            assert "context" not in tools[name].input_schema.get("required", [])
        for content, context in ((answer, "Joanna: How long have you had your turtles?"),
                                 ("Nate: I feed my dog twice a day.", None)):
            args = {"content": content, "containerTag": tag}
            if context:
                args["context"] = context
            assert "Saved" in text_of(await c.call_tool("memory", args))
        # only the context names the turtles: recall finds the answer through it, and does not show it
        text = text_of(await c.call_tool("recall", {"query": "turtles", "containerTag": tag, "includeProfile": False}))
        first = next(line for line in text.splitlines() if line.startswith("[1]"))
        assert "3 years now" in first and "How long" not in text
        big = await c.call_tool("memory", {"content": "x", "context": "c" * 2001, "containerTag": tag})
        assert big.is_error and "context" in text_of(big) and "2000" in text_of(big)
        keyed = data_of(await c.call_tool("save_memory", {"category": "goal", "content": "Run a marathon",
                                                          "context": "Talking about the new year", "containerTag": tag}))
        updated = data_of(await c.call_tool("update_memory", {"id": keyed["memory_id"], "content": "Run two marathons",
                                                              "containerTag": tag}))
        history = data_of(await c.call_tool("get_memory_history", {"memory_id": updated["memory_id"]}))
        assert [(v["content"], v["context"]) for v in history["versions"]] == [
            ("Run a marathon", "Talking about the new year"), ("Run two marathons", "Talking about the new year")]
    async with httpx.AsyncClient(base_url=running.base_url, headers={"Authorization": f"Bearer {running.key}"}, timeout=30) as h:
        found = (await h.post("/v1/recall", json={"query": "turtles", "project": tag, "mode": "keyword"})).json()
        assert [(x["memory"]["content"], x["memory"]["context"]) for x in found["hits"]] == [
            (answer, "Joanna: How long have you had your turtles?")]
        r = await h.post("/v1/memories", json={"content": "Likes kayaking", "context": "Asked about weekend plans",
                                                "project": tag})
        assert r.status_code == 201, r.text
        bad = await h.post("/v1/memories", json={"content": "x", "context": "c" * 2001, "project": tag})
        assert bad.status_code == 422 and "context" in bad.text
