"""The MCP utilities of issue 35 through the `mcp` SDK client: logging (``logging/setLevel`` on a
handshake connection, the per-request opt-in on the stateless revision), completion of the resource
templates' ``{project}`` (a restricted key and a pinned connection are offered their one project),
the templates read, and progress of a bulk save."""

from __future__ import annotations

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
from mcp.shared.exceptions import MCPError
from mcp_types import LoggingMessageNotificationParams, ResourceTemplateReference

pytestmark = pytest.mark.e2e

PROFILE = "engram://projects/{project}/profile"
MEMORIES = "engram://projects/{project}/memories"


@asynccontextmanager
async def client(running: Any, key: str, *, pin: str | None = None, mode: str = "auto",
                 log_level: str | None = None,
                 logs: list[LoggingMessageNotificationParams] | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}", **({"X-Engram-Project": pin} if pin else {})}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=60.0))

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        assert logs is not None
        logs.append(params)

    async with http, Client(streamable_http_client(running.mcp_url, http_client=http), mode=mode,  # type: ignore[arg-type]
                            log_level=log_level, logging_callback=on_log if logs is not None else None) as c:  # type: ignore[arg-type]
        yield c


@pytest.fixture(scope="module")
def user(running: Any) -> dict[str, str]:
    """A user of their own (so that their project list is theirs alone), with memories in two projects
    sharing a prefix and one other, and an admin key to mint restricted keys."""
    run = uuid.uuid4().hex[:6]
    made = running.stack.create_key(None, f"conformance-{run}")
    key, user_id = made["key"], made["view"]["user_id"]
    admin = running.stack.create_key(user_id, "admin", ["admin"])["key"]
    projects = {"alpha": f"cf{run}-alpha", "alps": f"cf{run}-alps", "other": f"zz{run}-other"}
    with httpx.Client(base_url=running.base_url, timeout=60, headers={"Authorization": f"Bearer {key}"}) as h:
        for name, project in projects.items():
            saved = h.post("/v1/memories", json={"content": f"the {name} project's fact {run}", "project": project})
            assert saved.status_code == 201, saved.text
        restricted = h.post("/v1/keys", headers={"Authorization": f"Bearer {admin}"}, json={
            "user_id": user_id, "name": "alps only", "scopes": ["memory:read", "memory:write"],
            "project": projects["alps"]})
        assert restricted.status_code == 201, restricted.text
    return {"key": key, "run": run, "restricted": restricted.json()["key"], **projects}


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # setLevel: gone in 2026-07-28
async def test_log_notification_after_set_level_on_a_handshake_connection(running: Any, user: dict[str, str]) -> None:
    logs: list[LoggingMessageNotificationParams] = []
    async with client(running, user["key"], mode="legacy", logs=logs) as c:
        assert c.protocol_version.startswith("2025"), c.protocol_version
        # before any level is set, nothing is sent
        await c.call_tool("save_memories", {"memories": [{"content": f"before setLevel {user['run']}"}],
                                            "containerTag": user["alpha"]})
        assert logs == []
        assert (await c.set_logging_level("info")).model_dump(exclude_none=True, by_alias=True) in ({}, {"resultType": "complete"})
        saved = await c.call_tool("save_memories", {"memories": [{"content": f"after setLevel {user['run']}"},
                                                                 {"content": f"after setLevel {user['run']}"}],
                                                    "containerTag": user["alpha"]})
        assert not saved.is_error, saved.content
        tallies = [m for m in logs if m.level == "info"]
        assert len(tallies) == 1, logs
        assert tallies[0].logger == "engram"
        assert tallies[0].data["message"] == "save_memories: 1 saved, 1 duplicate, 0 errors", tallies[0].data
        # a tool of a toolset this connection did not ask for: the error, and a warning saying why
        refused = await c.call_tool("claim_daily_log", {"log_id": str(uuid.uuid4()), "task_id": "t1"})
        assert refused.is_error
        warnings = [m for m in logs if m.level == "warning"]
        assert len(warnings) == 1 and "maintenance" in warnings[0].data["message"], logs
        assert "X-Engram-Toolsets" in warnings[0].data["message"]
        # at warning, the info tally is no longer sent
        await c.set_logging_level("warning")
        before = len(logs)
        await c.call_tool("save_memories", {"memories": [{"content": f"at warning {user['run']}"}],
                                            "containerTag": user["alpha"]})
        assert logs[before:] == []
        text = json.dumps([m.model_dump(mode="json") for m in logs])
        assert user["key"] not in text and user["restricted"] not in text  # never a secret


async def test_log_notification_on_the_stateless_revision_is_a_per_request_opt_in(
        running: Any, user: dict[str, str]) -> None:
    logs: list[LoggingMessageNotificationParams] = []
    async with client(running, user["key"], log_level="info", logs=logs) as c:
        assert not c.protocol_version.startswith("2025"), c.protocol_version
        await c.call_tool("save_memories", {"memories": [{"content": f"stateless opt-in {user['run']}"}],
                                            "containerTag": user["alpha"]})
    assert [m.data["message"] for m in logs] == ["save_memories: 1 saved, 0 duplicates, 0 errors"], logs
    quiet: list[LoggingMessageNotificationParams] = []
    async with client(running, user["key"], logs=quiet) as c:  # no opt-in: nothing
        await c.call_tool("save_memories", {"memories": [{"content": f"stateless no opt-in {user['run']}"}],
                                            "containerTag": user["alpha"]})
    assert quiet == []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_bulk_save_reports_progress(running: Any, user: dict[str, str], mode: str) -> None:
    steps: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        steps.append((done, total, message))

    items = [{"content": f"progress item {i} {mode} {user['run']}"} for i in range(12)]
    async with client(running, user["key"], mode=mode) as c:
        saved = await c.call_tool("save_memories", {"memories": items, "containerTag": user["alpha"]},
                                  progress_callback=on_progress)
        assert not saved.is_error, saved.content
        assert saved.structured_content is not None and saved.structured_content["saved"] == 12
    assert steps, "no progress notification"
    assert all(total == 12 for _, total, _ in steps), steps
    assert [done for done, _, _ in steps] == sorted(done for done, _, _ in steps), steps
    assert steps[-1][0] == 12, steps


async def completions(c: Client, uri: str, typed: str) -> list[str]:
    result = await c.complete(ResourceTemplateReference(uri=uri), {"name": "project", "value": typed})
    return result.completion.values


async def test_a_project_name_is_completed(running: Any, user: dict[str, str]) -> None:
    async with client(running, user["key"]) as c:
        templates = {t.uri_template for t in (await c.list_resource_templates()).resource_templates}
        assert {PROFILE, MEMORIES} <= templates
        assert await completions(c, PROFILE, f"cf{user['run']}-alp") == [user["alpha"], user["alps"]]
        assert await completions(c, MEMORIES, f"CF{user['run']}-ALPH") == [user["alpha"]]  # any case
        assert await completions(c, PROFILE, f"{user['run']}-oth") == [user["other"]]  # contained
        assert await completions(c, PROFILE, "no-such-project-prefix") == []
        everything = await completions(c, PROFILE, "")
        assert {user["alpha"], user["alps"], user["other"]} <= set(everything)
        # a reference Engram does not complete: no values, not an error
        other = await c.complete(ResourceTemplateReference(uri="engram://nothing/{x}"), {"name": "x", "value": ""})
        assert other.completion.values == []
        # the templates read: the project's memories, and only that project's
        memories = await c.read_resource(MEMORIES.format(project=user["alpha"]))
        listed = json.loads(memories.contents[0].text)  # type: ignore[union-attr]
        contents = [m["content"] for m in listed["memories"]]
        assert f"the alpha project's fact {user['run']}" in contents
        assert not any("alps" in text or "other" in text for text in contents), contents
        profile = await c.read_resource(PROFILE.format(project=user["alps"]))
        assert f"the alps project's fact {user['run']}" in profile.contents[0].text  # type: ignore[union-attr]


async def test_a_restricted_key_is_offered_only_its_project(running: Any, user: dict[str, str]) -> None:
    async with client(running, user["restricted"]) as c:
        assert await completions(c, PROFILE, "") == [user["alps"]]
        assert await completions(c, MEMORIES, f"cf{user['run']}-alp") == [user["alps"]]
        assert await completions(c, PROFILE, f"cf{user['run']}-alph") == []
        assert await completions(c, PROFILE, f"zz{user['run']}") == []
        with pytest.raises(MCPError) as refused:
            await c.read_resource(MEMORIES.format(project=user["alpha"]))
        assert "restricted to project" in str(refused.value)
        assert f"the alpha project's fact {user['run']}" not in str(refused.value)


async def test_a_pinned_connection_is_offered_only_its_project(running: Any, user: dict[str, str]) -> None:
    async with client(running, user["key"], pin=user["other"]) as c:
        assert await completions(c, PROFILE, "") == [user["other"]]
        assert await completions(c, MEMORIES, f"cf{user['run']}") == []
        with pytest.raises(MCPError):
            await c.read_resource(PROFILE.format(project=user["alpha"]))
