"""Issue 18: the small promises of the two source designs (seed 1 and seed 2, docs/design.md),
through the `mcp` SDK client and plain HTTP against the running stack (and, where an install's
kind matters, one more gateway process).

1. relations in recall (← previous / → newer version, ~ similar, the daily logs) — MCP text and REST fields;
2. the project parameter names the user's projects (per user; refresh; gone under a pin);
3. who is calling: clientInfo in whoAmI and in a memory's history;
4. CORS for browser clients (preflight), GET / self-description, 401 with a JSON-RPC body;
5. POST / as an alias of /mcp, GET /health.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from tests.e2e.test_gateway_edge import gateway

pytestmark = pytest.mark.e2e

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LEGACY = "2025-06-18"
ME = Implementation(name="seed-fidelity-client", version="4.2.0")


@asynccontextmanager
async def connect(url: str, key: str, *, project: str | None = None,
                  client_info: Implementation | None = ME) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} | ({"X-Engram-Project": project} if project else {})
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(url, http_client=http), client_info=client_info) as client:
        yield client


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def data_of(result: Any) -> dict:  # type: ignore[type-arg]
    assert not result.is_error, text_of(result)
    return result.structured_content or json.loads(text_of(result))


def rpc(method: str, params: dict | None = None, request_id: int = 1) -> dict:  # type: ignore[type-arg]
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


def initialize(name: str, version: str) -> dict:  # type: ignore[type-arg]
    return rpc("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                              "clientInfo": {"name": name, "version": version}})


def tool_result(response: httpx.Response) -> dict:  # type: ignore[type-arg]
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert not result.get("isError"), result
    return result.get("structuredContent") or json.loads(result["content"][0]["text"])


# 1. relations in recall -----------------------------------------------------------------------------

async def test_recall_shows_the_previous_version_similar_memories_and_the_log_over_mcp_and_rest(running) -> None:  # type: ignore[no-untyped-def]
    tag = "rel-" + uuid.uuid4().hex[:6]
    async with connect(running.mcp_url, running.key) as c:
        log = data_of(await c.call_tool("save_daily_log", {
            "log_date": "2026-11-28", "events": "Talked about drinks", "containerTag": tag,
            "turns": [{"speaker": "user", "text": "I switched from coffee to green tea."}]}))
        provenance = {"log_id": log["id"], "task_id": "seed-test", "turns": [0]}
        data_of(await c.call_tool("save_memory", {"category": "preference", "memory_key": "preference.drink",
                                                  "content": "The user drinks black coffee every morning",
                                                  "containerTag": tag}))
        updated = data_of(await c.call_tool("save_memory", {
            "category": "preference", "memory_key": "preference.drink", "containerTag": tag,
            "content": "The user drinks green tea every morning", "provenance": provenance}))
        assert updated["version"] == 2
        data_of(await c.call_tool("save_memory", {"category": "preference", "memory_key": "preference.tea",
                                                  "content": "The user drinks green tea in the morning",
                                                  "containerTag": tag}))
        # the similar markers come from the graph's read model, which follows the log: a bounded wait
        # until it holds the memory saved last among the updated one's neighbours
        for _ in range(150):
            text = text_of(await c.call_tool("recall", {"query": "what does the user drink every morning?",
                                                        "containerTag": tag, "includeProfile": False}))
            lines = text.splitlines()
            at = next((i for i, line in enumerate(lines) if updated["memory_id"] in line), None)
            if at is not None and at + 1 < len(lines) and "~ [" in lines[at + 1]:
                break
            await asyncio.sleep(0.1)
    lines = text.splitlines()
    assert lines[1].startswith("Legend:") and "← vN" in lines[1] and "~ a similar memory" in lines[1]
    first = next(i for i, line in enumerate(lines) if updated["memory_id"] in line)
    assert "↻v2 · from log 2026-11-28 (turns 0)" in lines[first]
    # the hit's relations, on the line under it (the built-in extractor's memory of the log, when it
    # lands before the update, may add a ⇐ before them: the update supersedes it)
    related = lines[first + 1].strip().split(" · ")
    assert "← v1 “The user drinks black coffee every morning”" in related, text
    assert all(r[0] in "←~⇐" for r in related), text
    assert any(r.startswith("~ [") for r in related), text  # the other tea memory is a hit of the same recall

    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(running.base_url + "/v1/recall", headers={"Authorization": f"Bearer {running.key}"},
                            json={"query": "what does the user drink every morning?", "project": tag})
    assert r.status_code == 200, r.text
    hit = next(h for h in r.json()["hits"] if h["memory"]["id"] == updated["memory_id"])
    assert [r for r in hit["relations"] if r["kind"] == "previous_version"] == [{
        "kind": "previous_version", "memory_id": updated["memory_id"], "version": 1, "score": None, "rank": None,
        "excerpt": "The user drinks black coffee every morning"}]
    similar = [r for r in hit["relations"] if r["kind"] == "similar"]
    assert similar and similar[0]["score"] >= 0.6 and similar[0]["rank"] is not None
    assert len(hit["relations"]) <= 4 and len(hit["documents"]) <= 3
    assert hit["documents"][0] == {"log_id": log["id"], "log_date": "2026-11-28", "task_id": "seed-test",
                                   "turns": [0]}


# 2. the project parameter names the user's projects ---------------------------------------------------

def container_tag_description(tools: Any, name: str = "memory") -> str:
    tool = next(t for t in tools.tools if t.name == name)
    return tool.input_schema["properties"]["containerTag"]["description"]


async def test_each_user_sees_only_their_own_projects_in_the_tool_descriptions(running) -> None:  # type: ignore[no-untyped-def]
    alpha, beta = "alpha-" + uuid.uuid4().hex[:6], "beta-" + uuid.uuid4().hex[:6]
    async with connect(running.mcp_url, running.key) as alice, connect(running.mcp_url, running.other_key) as bob:
        assert not (await alice.call_tool("memory", {"content": f"Alice's note {alpha}", "containerTag": alpha})).is_error
        assert not (await bob.call_tool("memory", {"content": f"Bob's note {beta}", "containerTag": beta})).is_error
        seen_by_alice, seen_by_bob = container_tag_description(await alice.list_tools()), \
            container_tag_description(await bob.list_tools())
        recall_by_alice = container_tag_description(await alice.list_tools(), "recall")
    assert alpha in seen_by_alice and beta not in seen_by_alice and alpha in recall_by_alice
    assert beta in seen_by_bob and alpha not in seen_by_bob
    async with connect(running.mcp_url, running.key, project=alpha) as pinned:
        tools = (await pinned.list_tools()).tools
    assert all("containerTag" not in (t.input_schema.get("properties") or {}) for t in tools)

    async with httpx.AsyncClient(timeout=30) as http:  # plain HTTP: the same per-user description
        r = await http.post(running.mcp_url, json=rpc("tools/list"),
                            headers={**ACCEPT, "Authorization": f"Bearer {running.other_key}"})
    memory = next(t for t in r.json()["result"]["tools"] if t["name"] == "memory")
    assert beta in memory["inputSchema"]["properties"]["containerTag"]["description"]
    assert alpha not in memory["inputSchema"]["properties"]["containerTag"]["description"]


async def test_list_projects_refresh_reads_a_project_another_replica_created(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seen_first = "seen-" + uuid.uuid4().hex[:6]
    elsewhere = "elsewhere-" + uuid.uuid4().hex[:6]
    with gateway(running, tmp_path) as other_replica:  # started first: the cache's TTL (60 s) runs from below
        async with connect(running.mcp_url, running.key) as c:
            await c.call_tool("memory", {"content": f"First note {seen_first}", "containerTag": seen_first})
            assert seen_first in container_tag_description(await c.list_tools())  # cached now, with it
            async with httpx.AsyncClient(timeout=30) as http:
                r = await http.post(other_replica + "/v1/memories", headers={"Authorization": f"Bearer {running.key}"},
                                    json={"content": f"Made elsewhere {elsewhere}", "project": elsewhere})
                assert r.status_code == 201, r.text
            cached = text_of(await c.call_tool("listProjects", {}))
            assert seen_first in cached and elsewhere not in cached  # this replica's copy, within its TTL
            assert elsewhere not in container_tag_description(await c.list_tools())
            assert elsewhere in text_of(await c.call_tool("listProjects", {"refresh": True}))
            assert elsewhere in container_tag_description(await c.list_tools())  # the descriptions follow


# 3. who is calling -------------------------------------------------------------------------------------

async def test_who_am_i_and_the_history_name_the_mcp_client(running) -> None:  # type: ignore[no-untyped-def]
    tag = "who-" + uuid.uuid4().hex[:6]
    async with connect(running.mcp_url, running.key) as c:
        me = data_of(await c.call_tool("whoAmI", {}))
        saved = data_of(await c.call_tool("save_memory", {"category": "skill", "content": "The user plays the cello",
                                                          "memory_key": "skill.cello", "containerTag": tag}))
    async with connect(running.mcp_url, running.key, client_info=Implementation(name="other-assistant", version="1.0")) as c:
        data_of(await c.call_tool("update_memory", {"memory_key": "skill.cello", "containerTag": tag,
                                                    "content": "The user plays the cello in an orchestra"}))
        history = data_of(await c.call_tool("get_memory_history", {"memory_id": saved["memory_id"]}))
    assert me["user_id"] == running.user_id
    assert me["user_name"], me  # the user's display name, from auth's introspection
    assert (me["client_name"], me["client_version"]) == ("seed-fidelity-client", "4.2.0")
    assert [(v["version"], v["client"]) for v in history["versions"]] == [
        (1, "seed-fidelity-client/4.2.0"), (2, "other-assistant/1.0")]
    async with httpx.AsyncClient(timeout=30) as http:  # REST writes name no MCP client
        r = await http.post(running.base_url + "/v1/memories/update", headers={"Authorization": f"Bearer {running.key}"},
                            json={"id": saved["memory_id"], "project": tag, "importance": 5})
        assert r.status_code == 200, r.text
        versions = (await http.get(f"{running.base_url}/v1/memories/{saved['memory_id']}/history",
                                   headers={"Authorization": f"Bearer {running.key}"})).json()["versions"]
    assert versions[-1]["client"] is None and versions[1]["client"] == "other-assistant/1.0"


async def test_the_session_id_carries_the_client_over_plain_http_on_any_replica(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {running.key}"}
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(running.mcp_url, json=initialize("curl-like", "0.0.1"), headers={**ACCEPT, **auth})
        assert r.status_code == 200, r.text
        session = r.headers["mcp-session-id"]
        assert r.json()["result"]["serverInfo"]["name"] == "engram"
        call = rpc("tools/call", {"name": "whoAmI", "arguments": {}}, 2)
        headers = {**ACCEPT, **auth, "Mcp-Session-Id": session, "Mcp-Protocol-Version": LEGACY}
        with gateway(running, tmp_path) as other_replica:  # nothing kept in the first process
            me = tool_result(await http.post(other_replica + "/mcp", json=call, headers=headers))
        assert (me["client_name"], me["client_version"]) == ("curl-like", "0.0.1")
        anonymous = tool_result(await http.post(running.mcp_url, json=call, headers={**ACCEPT, **auth}))
        assert anonymous["client_name"] is None
        forged = tool_result(await http.post(running.mcp_url, json=call,
                                             headers={**ACCEPT, **auth, "Mcp-Session-Id": "egs1.x.not-base64!"}))
        assert forged["client_name"] is None


# 4. the edges a browser client meets -----------------------------------------------------------------

PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type, mcp-session-id, mcp-protocol-version"}


async def test_a_browser_on_this_machine_passes_preflight_and_reads_the_session_and_challenge(running) -> None:  # type: ignore[no-untyped-def]
    origin = "http://localhost:6274"  # e.g. the MCP Inspector
    async with httpx.AsyncClient(timeout=30) as http:
        pre = await http.options(running.mcp_url, headers={"Origin": origin, **PREFLIGHT})
        assert pre.status_code == 200, pre.text
        assert pre.headers["access-control-allow-origin"] == origin
        allowed = pre.headers["access-control-allow-headers"].lower()
        assert {"authorization", "mcp-session-id", "mcp-protocol-version"} <= {h.strip() for h in allowed.split(",")}
        r = await http.post(running.mcp_url, json=initialize("browser", "1"),
                            headers={**ACCEPT, "Origin": origin, "Authorization": f"Bearer {running.key}"})
        assert r.status_code == 200, r.text
        exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
        assert {"mcp-session-id", "www-authenticate"} <= exposed and r.headers["mcp-session-id"]
        refused = await http.post(running.mcp_url, json=rpc("tools/list"), headers={**ACCEPT, "Origin": origin})
        assert refused.status_code == 401
        assert refused.headers["access-control-allow-origin"] == origin and "resource_metadata=" in refused.headers["www-authenticate"]
        body = refused.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32000
        assert body["error"]["message"].startswith("Unauthorized")
        meta = await http.options(running.base_url + "/.well-known/oauth-protected-resource/mcp",
                                  headers={"Origin": "https://anywhere.example", "Access-Control-Request-Method": "GET"})
        assert meta.status_code == 200 and meta.headers["access-control-allow-origin"] == "*"


async def test_a_local_install_still_refuses_foreign_origins_and_rebinding_hosts(running) -> None:  # type: ignore[no-untyped-def]
    evil = "https://evil.example"
    auth = {"Authorization": f"Bearer {running.key}"}
    async with httpx.AsyncClient(timeout=30) as http:
        pre = await http.options(running.mcp_url, headers={"Origin": evil, **PREFLIGHT})
        assert pre.status_code == 400 and "access-control-allow-origin" not in pre.headers
        r = await http.post(running.mcp_url, json=rpc("tools/list"), headers={**ACCEPT, **auth, "Origin": evil})
        assert r.status_code == 403
        rebound = await http.post(running.mcp_url, json=rpc("tools/list"),
                                  headers={**ACCEPT, **auth, "Host": "evil.example:80", "Origin": "http://evil.example:80"})
        assert rebound.status_code == 421


async def test_a_public_install_serves_browser_clients_on_any_origin_and_keeps_the_host_check(running, tmp_path) -> None:  # type: ignore[no-untyped-def]
    origin = "https://app.example.org"
    with gateway(running, tmp_path, ENGRAM_PUBLIC_URL="https://memory.example.test",
                 ENGRAM_ALLOWED_HOSTS='["memory.example.test"]') as url:
        async with httpx.AsyncClient(timeout=30) as http:
            pre = await http.options(url + "/mcp", headers={"Origin": origin, **PREFLIGHT})
            assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "*"
            r = await http.post(url + "/mcp", json=rpc("tools/list"),
                                headers={**ACCEPT, "Origin": origin, "Authorization": f"Bearer {running.key}"})
            assert r.status_code == 200 and r.json()["result"]["tools"], r.text
            rebound = await http.post(url + "/mcp", json=rpc("tools/list"), headers={
                **ACCEPT, "Origin": origin, "Authorization": f"Bearer {running.key}", "Host": "evil.example"})
            assert rebound.status_code == 421
            about = (await http.get(url + "/", headers={"Origin": origin})).json()
        assert about["mcp"] == "https://memory.example.test/mcp" and about["name"] == "Engram"


async def test_root_describes_the_server(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.get(running.base_url + "/")
    assert r.status_code == 200
    about = r.json()
    assert about["name"] == "Engram" and about["version"] and about["mcp"] == running.mcp_url
    assert about["docs"].endswith("/docs") and about["health"].endswith("/health")
    async with httpx.AsyncClient(timeout=30) as http:  # the pages a person opens are named, and answer
        for page in ("console", "graph"):
            assert about[page] == running.base_url + "/" + page
            assert (await http.get(about[page])).status_code == 200, page


# 5. the AI-memory design's HTTP surface ---------------------------------------------------------------

async def test_post_root_is_the_mcp_endpoint_and_health_answers(running) -> None:  # type: ignore[no-untyped-def]
    async with connect(running.base_url + "/", running.key) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        me = data_of(await c.call_tool("whoAmI", {}))
    assert {"memory", "recall", "save_memory", "save_daily_log"} <= names and me["user_id"] == running.user_id
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(running.base_url + "/", json=rpc("tools/list"),
                            headers={**ACCEPT, "Authorization": f"Bearer {running.key}"})
        assert r.status_code == 200 and {t["name"] for t in r.json()["result"]["tools"]} == names
        assert (await http.post(running.base_url + "/", json=rpc("tools/list"), headers=ACCEPT)).status_code == 401
        health = await http.get(running.base_url + "/health")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
