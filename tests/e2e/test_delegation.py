"""Delegation (issue 27): a seed-2 backend (docs/design.md §3) serves many users through one
service credential that the operator gave ``memory:act-as``; each call names its user (``user_id``)
and runs as that user, every isolation rule applying as if the user had called, and the service
credential recorded as the actor.
From outside, with the `mcp` SDK client; isolation as a property over random calls of the users'
own keys and the service key acting for each of them."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.test_daily_log_tools import call, session

pytestmark = pytest.mark.e2e


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def service_key(running: Any, project: str | None = None) -> str:
    """A service credential of its own user, with memory:act-as (made by the operator)."""
    scopes = ["memory:read", "memory:write", "memory:act-as"]
    made = running.stack.create_key(None, "svc-" + uuid.uuid4().hex[:6], scopes)
    if project is None:
        return made["key"]  # type: ignore[no-any-return]
    admin = running.stack.create_key(made["view"]["user_id"], "operator", ["admin"])["key"]
    restricted = httpx.post(running.base_url + "/v1/keys", headers={"Authorization": f"Bearer {admin}"}, timeout=60,
                            json={"user_id": made["view"]["user_id"], "name": "svc-p", "scopes": scopes,
                                  "project": project})
    assert restricted.status_code == 201, restricted.text
    return restricted.json()["key"]  # type: ignore[no-any-return]


def test_a_service_key_acts_for_the_user_it_names_and_is_recorded(running) -> None:  # type: ignore[no-untyped-def]
    svc = service_key(running)

    async def case() -> None:
        async with session(running.mcp_url, bearer(svc)) as client:
            marker = uuid.uuid4().hex[:8]
            saved = await call(client, "save_memory", category="preference", content=f"Likes oolong {marker}",
                               user_id=running.user_id)
            who = await call(client, "whoAmI", user_id=running.user_id)
            assert who["user_id"] == running.user_id
            history = await call(client, "get_memory_history", memory_id=saved["memory_id"], user_id=running.user_id)
            assert "by user" in (history["versions"][-1]["client"] or ""), history
            # the service's own user sees nothing of it; bob's id named gets bob's world only
            mine = await call(client, "recall_memory", keyword=marker, limit=100)
            assert mine["memories"] == []
            bobs = await call(client, "recall_memory", keyword=marker, limit=100, user_id=running.other_user_id)
            assert bobs["memories"] == []
        async with session(running.mcp_url, bearer(running.key)) as client:  # alice's own key sees it
            found = await call(client, "recall_memory", keyword=marker, limit=100)
            assert [m["id"] for m in found["memories"]] == [saved["memory_id"]]
            # alice's key (no act-as) naming bob is refused, naming the scope
            refused = await client.call_tool("recall_memory", {"keyword": marker, "user_id": running.other_user_id})
            assert refused.is_error and "memory:act-as" in refused.content[0].text

    asyncio.run(case())


def test_a_project_restricted_service_key_keeps_its_project_for_every_user(running) -> None:  # type: ignore[no-untyped-def]
    project = "svc-" + uuid.uuid4().hex[:6]
    svc = service_key(running, project)

    async def case() -> None:
        async with session(running.mcp_url, bearer(svc)) as client:
            inside = await call(client, "save_memory", category="preference", content="Restricted write",
                                user_id=running.user_id)
            assert inside["project"] == project
            outside = await client.call_tool("memory", {"content": "elsewhere", "containerTag": "other",
                                                        "user_id": running.user_id})
            assert outside.is_error and project in outside.content[0].text

    asyncio.run(case())


# isolation as a property -------------------------------------------------------------------------------
ACTORS = ("alice", "bob", "svc-as-alice", "svc-as-bob")
op = st.tuples(st.sampled_from(ACTORS), st.sampled_from(("save", "recall", "list", "by_key")),
               st.sampled_from(("tea", "cello", "Berlin")))


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(op, min_size=4, max_size=10))
def test_isolation_holds_with_delegation(running, ops) -> None:  # type: ignore[no-untyped-def]
    """Whoever acts for a user (the user's key, the service acting for them) reads only that user's
    memories, and what the service writes for a user is that user's."""
    svc = service_key(running)
    run = uuid.uuid4().hex[:8]
    users = {"alice": running.user_id, "bob": running.other_user_id}
    written: dict[str, set[str]] = {"alice": set(), "bob": set()}

    async def case() -> None:
        async with AsyncExitStack() as stack:
            clients = {
                "alice": await stack.enter_async_context(session(running.mcp_url, bearer(running.key))),
                "bob": await stack.enter_async_context(session(running.mcp_url, bearer(running.other_key))),
                "svc": await stack.enter_async_context(session(running.mcp_url, bearer(svc))),
            }
            for actor, action, word in ops:
                user = actor.removeprefix("svc-as-")
                client = clients["svc" if actor.startswith("svc") else user]
                named = {"user_id": users[user]} if actor.startswith("svc") else {}
                content = f"{user} {word} {run}"
                if action == "save":
                    saved = await call(client, "save_memory", category="preference", content=content,
                                       memory_key=f"preference.{word.lower()}{run}", **named)
                    written[user].add(saved["memory_id"])
                    continue
                if action == "by_key":
                    found = await call(client, "get_memory_by_key", memory_key=f"preference.{word.lower()}{run}",
                                       **named)
                    seen = [found["memory"]] if found["found"] else []
                else:
                    seen = (await call(client, "recall_memory", keyword=run, limit=100, **named))["memories"]
                other = "bob" if user == "alice" else "alice"
                assert all(m["content"].startswith(f"{user} ") for m in seen), (actor, seen)
                assert not {m["id"] for m in seen} & written[other], (actor, seen)
            for user in ("alice", "bob"):  # each user's own key sees what was written for them
                own = (await call(clients[user], "recall_memory", keyword=run, limit=100))["memories"]
                assert {m["id"] for m in own} == written[user]

    asyncio.run(case())
