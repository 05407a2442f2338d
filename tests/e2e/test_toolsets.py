"""Toolsets from a table: `assistant` by default; `maintenance` on request (header or query
parameter) and only for a credential holding `memory:maintenance`."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.e2e

ASSISTANT_TOOLS = {"memory", "recall", "listProjects", "whoAmI", "save_memory", "get_memory_by_key", "recall_memory",
                   "update_memory", "get_memory_history", "save_shared_memory", "get_shared_memories"}


async def tool_names(url: str, headers: dict[str, str]) -> set[str]:
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        return {t.name for t in (await client.list_tools()).tools}


def initialize(url: str, headers: dict[str, str]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    return httpx.post(url, json=body, timeout=30, headers={
        **headers, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"})


async def test_assistant_by_default_and_maintenance_only_with_its_scope(running) -> None:  # type: ignore[no-untyped-def]
    bearer = {"Authorization": f"Bearer {running.key}"}
    assert await tool_names(running.mcp_url, bearer) >= ASSISTANT_TOOLS
    # memory:read + memory:write only: asking for maintenance is refused, naming the scope
    refused = initialize(running.mcp_url, {**bearer, "X-Engram-Toolsets": "maintenance"})
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]  # a JSON-RPC error (the SDK client shows its message), the REST body in its data
    assert "memory:maintenance" in error["message"] and error["data"]["error"]["field"] == "X-Engram-Toolsets"
    assert 'insufficient_scope' in refused.headers["www-authenticate"]
    assert initialize(running.mcp_url + "?toolsets=maintenance", bearer).status_code == 403
    unknown = initialize(running.mcp_url, {**bearer, "X-Engram-Toolsets": "assistant, everything"})
    assert unknown.status_code == 400 and "'everything'" in unknown.json()["error"]["message"]
    # a credential with the scope gets the assistant tools and the maintenance set on top
    maintainer = (await asyncio.to_thread(running.stack.create_key, running.user_id, "maintainer",
                                          ["memory:read", "memory:write", "memory:maintenance"]))["key"]
    headers = {"Authorization": f"Bearer {maintainer}", "X-Engram-Toolsets": "maintenance"}
    assert initialize(running.mcp_url, headers).status_code == 200
    assert await tool_names(running.mcp_url, headers) >= ASSISTANT_TOOLS
