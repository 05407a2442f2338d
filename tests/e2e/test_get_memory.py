"""get_memory (MCP) and GET /v1/memories/{memory_id} (REST): a memory by id as it stands now —
the public command added in three places (its contract, the memory service's query row, the
gateway's catalogue row). Tried from outside with the `mcp` SDK client and httpx: the owner reads
it on both; a project-restricted key, a connection pinned to another project and a key without
`memory:read` are refused it; a bad or unknown id is refused naming `memory_id`."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from tests.e2e.test_daily_log_tools import call
from tests.e2e.test_project_restriction import auth, mcp_client, text_of

pytestmark = pytest.mark.e2e


def _saved(running: Any, project: str, content: str) -> tuple[str, str]:
    """A memory saved then updated (version 2) in ``project``: its id and its current text."""
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        saved = h.post("/memories", json={"content": content, "project": project})
        assert saved.status_code == 201, saved.text
        memory_id = saved.json()["memory_id"]
        updated = h.post("/memories/update", json={"id": memory_id, "content": content + " (revised)",
                                                   "project": project})
        assert updated.status_code == 200 and updated.json()["version"] == 2, updated.text
    return memory_id, content + " (revised)"


def test_owner_reads_a_memory_by_id_on_rest_and_mcp(running) -> None:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    memory_id, text = _saved(running, "home", f"the bike lock code {run} is 2468")
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        got = h.get(f"/memories/{memory_id}")
        assert got.status_code == 200, got.text
        view = got.json()
        assert (view["id"], view["project"], view["content"], view["version"], view["status"]) == (
            memory_id, "home", text, 2, "active")
        # the route takes no query parameter: one sent is refused naming it
        extra = h.get(f"/memories/{memory_id}", params={"as_of": "2026-01-01"})
        assert extra.status_code == 422 and extra.json()["error"]["field"] == "as_of", extra.text
        # forgotten: still read by id, as forgotten
        forgot = h.post("/memories/forget", json={"memory_id": memory_id, "reason": "changed the lock"})
        assert forgot.status_code == 200, forgot.text
        after = h.get(f"/memories/{memory_id}").json()
        assert after["status"] == "forgotten" and after["version"] == 3, after

    async def over_mcp() -> None:
        async with mcp_client(running, running.key) as client:
            assert "get_memory" in {t.name for t in (await client.list_tools()).tools}
            view = await call(client, "get_memory", memory_id=memory_id)
            assert (view["id"], view["content"], view["status"], view["version"]) == (memory_id, text, "forgotten", 3)
            unknown = await client.call_tool("get_memory", {"memory_id": memory_id, "as_of": "2026-01-01"})
            assert unknown.is_error and "as_of" in text_of(unknown)

    asyncio.run(over_mcp())


def test_bad_and_unknown_ids_are_refused_naming_memory_id(running) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url + "/v1", headers=auth(running.key), timeout=60) as h:
        missing = h.get(f"/memories/{uuid.uuid4()}")
        assert missing.status_code == 404, missing.text
        assert missing.json()["error"]["field"] == "memory_id"
        bad = h.get("/memories/not-a-uuid")
        assert bad.status_code == 422 and "memory_id" in bad.text, bad.text
        unauthenticated = httpx.get(f"{running.base_url}/v1/memories/{uuid.uuid4()}?x=1", timeout=60)
        assert unauthenticated.status_code == 401, unauthenticated.text  # 401 before the query is checked

    async def over_mcp() -> None:
        async with mcp_client(running, running.key) as client:
            missing = await client.call_tool("get_memory", {"memory_id": str(uuid.uuid4())})
            assert missing.is_error and "not_found" in text_of(missing) and "memory_id" in text_of(missing)
            bad = await client.call_tool("get_memory", {"memory_id": "not-a-uuid"})
            assert bad.is_error and "memory_id" in text_of(bad)

    asyncio.run(over_mcp())


def test_restricted_key_and_pinned_connection_do_not_reach_another_project(running) -> None:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    memory_id, text = _saved(running, "home", f"home alarm code {run} is 1357")
    admin = running.stack.create_key(running.user_id, "admin", ["admin"])["key"]
    with httpx.Client(base_url=running.base_url + "/v1", timeout=60) as h:
        work = h.post("/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "work only", "scopes": ["memory:read"], "project": "work"})
        assert work.status_code == 201, work.text
        work_key = work.json()["key"]
        writer = h.post("/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "write only", "scopes": ["memory:write"]})
        assert writer.status_code == 201, writer.text
        # the restricted key, and the owner's key on a connection pinned to `work`: not found, nothing shown
        for headers in (auth(work_key), auth(running.key, pin="work")):
            refused = h.get(f"/memories/{memory_id}", headers=headers)
            assert refused.status_code == 404, refused.text
            assert text not in refused.text and "1357" not in refused.text
        # pinned to the memory's own project: found
        pinned_home = h.get(f"/memories/{memory_id}", headers=auth(running.key, pin="home"))
        assert pinned_home.status_code == 200 and pinned_home.json()["content"] == text, pinned_home.text
        # a key without memory:read is refused naming the scope
        no_read = h.get(f"/memories/{memory_id}", headers=auth(writer.json()["key"]))
        assert no_read.status_code == 403 and "memory:read" in no_read.text, no_read.text

    async def over_mcp() -> None:
        for key, pin in ((work_key, None), (running.key, "work")):
            async with mcp_client(running, key, pin) as client:
                refused = await client.call_tool("get_memory", {"memory_id": memory_id})
                assert refused.is_error and "not_found" in text_of(refused), text_of(refused)
                assert "1357" not in text_of(refused)
        async with mcp_client(running, running.key, "home") as client:
            assert (await call(client, "get_memory", memory_id=memory_id))["content"] == text

    asyncio.run(over_mcp())
