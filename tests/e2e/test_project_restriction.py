"""A project-restricted key, and a connection pinned to a project, reach nothing outside that
project — tried from outside as an attacker would, per operation, over REST and through the `mcp`
SDK client, for every way a memory is addressed (id, key, content, title)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.e2e


def auth(key: str, pin: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if pin:
        headers["X-Engram-Project"] = pin
    return headers


@asynccontextmanager
async def mcp_client(running, key: str, pin: str | None = None) -> AsyncIterator[Client]:  # type: ignore[no-untyped-def]
    http = httpx2.AsyncClient(headers=auth(key, pin), timeout=httpx2.Timeout(30.0, read=60.0))
    async with http, Client(streamable_http_client(running.mcp_url, http_client=http)) as client:
        yield client


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


@dataclass
class Home:
    """What the owner keeps in project `home` (and tenant-wide), and a key restricted to `work`."""

    memory_id: str
    secret: str
    keyed_tag: str
    work_key: str


@pytest.fixture(scope="module")
def home(running) -> Home:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]
    admin = running.stack.create_key(running.user_id, "admin", ["admin"])["key"]
    secret = f"home secret {run}: the garage code is 4711"
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        saved = h.post("/v1/memories", json={"content": secret, "project": "home"}, headers=auth(running.key))
        assert saved.status_code == 201, saved.text
        keyed = h.post("/v1/memories", headers=auth(running.key), json={
            "category": "preference", "memory_key": f"preference.drink{run}", "content": f"oolong {secret}",
            "project": "home"})
        assert keyed.status_code == 201, keyed.text
        shared = h.post("/v1/shared-memories", headers=auth(running.key),
                        json={"title": f"Hotel {run}", "event": "room code 9911"})
        assert shared.status_code == 200, shared.text
        work = h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "work only", "scopes": ["memory:read", "memory:write"],
            "project": "work"})
        assert work.status_code == 201, work.text
        # admin and a project restriction do not mix: admin is the install operator's role
        mixed = h.post("/v1/keys", headers=auth(admin), json={
            "user_id": running.user_id, "name": "x", "scopes": ["admin"], "project": "work"})
        assert mixed.status_code == 422 and "admin" in mixed.text
    return Home(saved.json()["memory_id"], secret, run, work.json()["key"])


def owner_view(running, home: Home) -> tuple[list[str], int, int]:  # type: ignore[no-untyped-def]
    """The owner's view of the home things: the free memory's versions, the keyed one's version, the
    shared memory's version."""
    with httpx.Client(base_url=running.base_url, timeout=60) as h:
        history = h.get(f"/v1/memories/{home.memory_id}/history", headers=auth(running.key)).json()
        keyed = h.get("/v1/memories/by-key", headers=auth(running.key),
                      params={"memory_key": f"preference.drink{home.keyed_tag}", "project": "home"}).json()
        shared = h.get("/v1/shared-memories", headers=auth(running.key),
                       params={"title": f"Hotel {home.keyed_tag}"}).json()
    return ([v["content"] for v in history["versions"]], keyed["memory"]["version"],
            shared["shared_memories"][0]["version"])


@pytest.mark.parametrize("who", ["restricted key", "pinned connection"])
def test_rest_reaches_nothing_outside_the_project(running, home: Home, who: str) -> None:  # type: ignore[no-untyped-def]
    headers = auth(home.work_key) if who == "restricted key" else auth(running.key, pin="work")
    key = f"preference.drink{home.keyed_tag}"
    before = owner_view(running, home)
    with httpx.Client(base_url=running.base_url, timeout=60, headers=headers) as h:
        # by id: "not found", exactly as for an id that does not exist
        history = h.get(f"/v1/memories/{home.memory_id}/history")
        assert history.status_code == 404 and home.secret not in history.text
        assert h.post("/v1/memories/update", json={"id": home.memory_id, "content": "hijacked"}).status_code == 404
        assert h.post("/v1/memories/forget", json={"memory_id": home.memory_id}).status_code == 404
        # by key and by content, naming the other project: refused
        assert h.post("/v1/memories/update", json={"memory_key": key, "project": "home", "content": "x"}).status_code == 403
        assert h.get("/v1/memories/by-key", params={"memory_key": key, "project": "home"}).status_code == 403
        assert h.post("/v1/memories/forget", json={"content": home.secret, "project": "home"}).status_code == 403
        # by key and by content in its own project: nothing there
        assert h.get("/v1/memories/by-key", params={"memory_key": key}).json()["found"] is False
        assert h.post("/v1/memories/forget", json={"content": home.secret}).json()["forgotten"] is False
        # searches stay inside
        assert h.post("/v1/recall", json={"query": "garage code", "project": "home"}).status_code == 403
        assert home.secret not in h.post("/v1/recall", json={"query": "garage code"}).text
        assert home.secret not in h.get("/v1/memories", params={"keyword": "garage"}).text
        assert h.get("/v1/profile", params={"project": "home"}).status_code == 403
        # as of any moment, the same (the as_of read path has its own query)
        assert home.secret not in h.get("/v1/memories", params={"keyword": "garage", "as_of": "2100-01-01"}).text
        assert h.get("/v1/memories", params={"project": "home", "as_of": "2100-01-01"}).status_code == 403
        assert home.secret not in h.get("/v1/memories", params={"keyword": "garage", "status": "all"}).text
        assert home.secret not in h.get("/v1/profile", params={"as_of": "2100-01-01"}).text
        assert h.get("/v1/profile", params={"project": "home", "as_of": "2100-01-01"}).status_code == 403
        assert home.secret not in h.post("/v1/recall", json={"query": "garage code", "as_of": "2100-01-01"}).text
        assert {p["project"] for p in h.get("/v1/projects").json()["projects"]} <= {"work"}
        # shared memories belong to no project: neither read nor overwritten
        shared = h.get("/v1/shared-memories", params={"title": f"Hotel {home.keyed_tag}"})
        assert shared.status_code == 403 and "9911" not in shared.text
        assert h.post("/v1/shared-memories", json={"title": f"Hotel {home.keyed_tag}", "event": "x"}).status_code == 403
    assert owner_view(running, home) == before


@pytest.mark.parametrize("who", ["restricted key", "pinned connection"])
async def test_mcp_reaches_nothing_outside_the_project(running, home: Home, who: str) -> None:  # type: ignore[no-untyped-def]
    key, pin = (home.work_key, None) if who == "restricted key" else (running.key, "work")
    before = await asyncio.to_thread(owner_view, running, home)
    async with mcp_client(running, key, pin) as c:
        history = await c.call_tool("get_memory_history", {"memory_id": home.memory_id})
        assert history.is_error and "not_found" in text_of(history) and home.secret not in text_of(history)
        update = await c.call_tool("update_memory", {"id": home.memory_id, "content": "hijacked"})
        assert update.is_error and "not_found" in text_of(update)
        forget = await c.call_tool("memory", {"content": home.secret, "action": "forget"})
        assert not forget.is_error and "nothing was forgotten" in text_of(forget)
        by_key = await c.call_tool("get_memory_by_key", {"memory_key": f"preference.drink{home.keyed_tag}"})
        assert not by_key.is_error and '"found":false' in text_of(by_key).replace(" ", "")
        recalled = await c.call_tool("recall", {"query": "garage code"})
        assert home.secret not in text_of(recalled)
        listed = await c.call_tool("recall_memory", {"keyword": "garage"})
        assert home.secret not in text_of(listed)
        listed = await c.call_tool("recall_memory", {"keyword": "garage", "as_of": "2100-01-01"})
        assert not listed.is_error and home.secret not in text_of(listed)
        shared = await c.call_tool("get_shared_memories", {"title": f"Hotel {home.keyed_tag}"})
        assert shared.is_error and "9911" not in text_of(shared)
        overwrite = await c.call_tool("save_shared_memory", {"title": f"Hotel {home.keyed_tag}", "event": "x"})
        assert overwrite.is_error
        projects = await c.read_resource("engram://projects")
        listed_projects = {p["project"] for p in json.loads(projects.contents[0].text)["projects"]}
        assert listed_projects <= {"work"}
        assert "home" not in text_of(await c.call_tool("listProjects", {}))
    if who == "restricted key":  # the tools that take a containerTag refuse the other project outright
        async with mcp_client(running, key) as c:
            other = await c.call_tool("recall", {"query": "garage code", "containerTag": "home"})
            assert other.is_error and "permission denied" in text_of(other)
    assert await asyncio.to_thread(owner_view, running, home) == before


def test_the_owner_still_reaches_everything(running, home: Home) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=running.base_url, timeout=60, headers=auth(running.key)) as h:
        assert h.get(f"/v1/memories/{home.memory_id}/history").status_code == 200
        assert "home" in {p["project"] for p in h.get("/v1/projects").json()["projects"]}
        assert "9911" in h.get("/v1/shared-memories", params={"title": f"Hotel {home.keyed_tag}"}).text
