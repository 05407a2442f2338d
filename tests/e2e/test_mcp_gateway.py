"""Real MCP clients (the `mcp` SDK's Streamable HTTP client) and REST against the running stack."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def mcp_client(url: str, key: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def test_tools_are_listed_with_annotations(running) -> None:  # type: ignore[no-untyped-def]
    async with mcp_client(running.mcp_url, running.key) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"memory", "recall", "whoAmI"} <= set(tools)
    assert tools["recall"].annotations.read_only_hint is True
    assert tools["memory"].annotations.destructive_hint is True
    assert tools["memory"].input_schema["properties"]["content"]["maxLength"] == 200_000


async def test_save_then_recall_through_mcp(running) -> None:  # type: ignore[no-untyped-def]
    fact = f"My bicycle is a green Brompton {uuid.uuid4().hex[:6]}"
    async with mcp_client(running.mcp_url, running.key) as client:
        saved = await client.call_tool("memory", {"content": fact, "containerTag": "e2e"})
        assert not saved.is_error, text_of(saved)
        recalled = await client.call_tool("recall", {"query": "what bike do I ride?", "containerTag": "e2e"})
    assert fact in text_of(recalled)


async def test_whoami_names_the_keys_owner(running) -> None:  # type: ignore[no-untyped-def]
    async with mcp_client(running.mcp_url, running.key) as client:
        result = await client.call_tool("whoAmI", {})
    assert running.user_id in text_of(result)


async def test_another_tenant_never_sees_it(running) -> None:  # type: ignore[no-untyped-def]
    secret = f"The garage code is {uuid.uuid4().int % 10**6:06d}"
    # a project of this test's own: Bob's other memories (other tests save "garage code …" for him
    # too) cannot answer his forget, so only a leak of Alice's memory could
    tag = f"garage-{uuid.uuid4().hex[:8]}"
    async with mcp_client(running.mcp_url, running.key) as alice:
        await alice.call_tool("memory", {"content": secret, "containerTag": tag})
    async with mcp_client(running.mcp_url, running.other_key) as bob:
        seen = await bob.call_tool("recall", {"query": "garage code"})
        forgot = await bob.call_tool("memory", {"content": secret, "action": "forget", "containerTag": tag})
    assert secret not in text_of(seen)
    assert "nothing was forgotten" in text_of(forgot)
    async with mcp_client(running.mcp_url, running.key) as alice:
        assert secret in text_of(await alice.call_tool("recall", {"query": "garage code", "containerTag": tag}))


async def test_forget_through_mcp(running) -> None:  # type: ignore[no-untyped-def]
    fact = f"I am learning the oboe ({uuid.uuid4().hex[:6]})"
    async with mcp_client(running.mcp_url, running.key) as client:
        await client.call_tool("memory", {"content": fact, "containerTag": "forget-e2e"})
        forgot = await client.call_tool("memory", {"content": fact, "action": "forget", "containerTag": "forget-e2e"})
        assert "Forgotten" in text_of(forgot)
        after = await client.call_tool("recall", {"query": "oboe", "containerTag": "forget-e2e"})
    assert fact not in text_of(after)


async def test_bad_tool_input_is_a_clear_tool_error(running) -> None:  # type: ignore[no-untyped-def]
    async with mcp_client(running.mcp_url, running.key) as client:
        too_long = await client.call_tool("memory", {"content": "x" * 200_001})
        bad_action = await client.call_tool("memory", {"content": "hi", "action": "shout"})
        bad_tag = await client.call_tool("recall", {"query": "hi", "containerTag": "no spaces allowed"})
        empty = await client.call_tool("memory", {"content": ""})
        unknown = await client.call_tool("no_such_tool", {})
    assert too_long.is_error and "content" in text_of(too_long) and "200000" in text_of(too_long)
    assert bad_action.is_error and "action" in text_of(bad_action)
    assert bad_tag.is_error and "containerTag" in text_of(bad_tag)
    assert empty.is_error and "content" in text_of(empty)
    assert unknown.is_error and "no_such_tool" in text_of(unknown)


async def test_wrong_key_is_401_with_resource_metadata(running) -> None:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer egm_not-a-real-key-000000000000"}):
            r = await http.post(running.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                headers={**headers, "Accept": "application/json, text/event-stream"})
            assert r.status_code == 401
            assert "resource_metadata=" in r.headers["www-authenticate"]
        meta = (await http.get(running.base_url + "/.well-known/oauth-protected-resource/mcp")).json()
        assert meta["resource"] == running.mcp_url
        assert (await http.get(running.base_url + "/.well-known/oauth-protected-resource")).status_code == 200


async def test_rest_round_trip_and_errors(running) -> None:  # type: ignore[no-untyped-def]
    auth = {"Authorization": f"Bearer {running.key}"}
    async with httpx.AsyncClient(base_url=running.base_url, headers=auth, timeout=30) as http:
        r = await http.post("/v1/memories", json={"content": "I drink oat milk", "project": "rest"},
                            headers={"Idempotency-Key": "rest-oat-milk-1"})
        assert r.status_code == 201, r.text
        again = await http.post("/v1/memories", json={"content": "I drink oat milk", "project": "rest"},
                                headers={"Idempotency-Key": "rest-oat-milk-1"})
        assert again.json()["memory_id"] == r.json()["memory_id"]
        hits = (await http.post("/v1/recall", json={"query": "milk", "project": "rest"})).json()["hits"]
        assert hits[0]["memory"]["content"] == "I drink oat milk"
        big = await http.post("/v1/memories", json={"content": "x" * 200_001})
        assert big.status_code == 422 and big.json()["error"]["field"] == "content"
        bad_tag = await http.post("/v1/memories", json={"content": "x", "project": "a b"})
        assert bad_tag.status_code == 422 and bad_tag.json()["error"]["field"] == "project"
        not_json = await http.post("/v1/memories", content=b"{oops", headers={"Content-Type": "application/json"})
        assert not_json.status_code == 400
        limit = await http.post("/v1/recall", json={"query": "x", "limit": 101})
        assert limit.status_code == 422 and limit.json()["error"]["field"] == "limit"
        assert (await http.get("/openapi.json")).status_code == 200
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        assert (await http.get("/readyz")).status_code == 200
    async with httpx.AsyncClient(base_url=running.base_url) as anon:
        r = await anon.post("/v1/recall", json={"query": "milk"})
        assert r.status_code == 401 and "resource_metadata=" in r.headers["www-authenticate"]
