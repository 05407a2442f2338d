"""Project restrictions as a property, where they are enforced (the memory service): generated
(caller's project scope, memory's project, operation, way of addressing) cases. A caller scoped to
one project never reads, changes or learns the existence of anything outside it — by id, key,
content or title — while an unscoped caller, or one scoped to the thing's own project, reaches it.

The gateway turns a key's restriction and a connection's pin into this one scope
(``tests/unit/test_project_scope_rules.py`` checks that rule)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.envelope import CommandEnvelope, QueryEnvelope
from services.memory.config import MemorySettings
from services.memory.main import memory_app

pytestmark = pytest.mark.integration

PROJECTS = ("home", "work", "default")
OPERATIONS = (
    "history_by_id", "update_by_id", "forget_by_id", "update_by_key", "get_by_key", "forget_by_content",
    "recall", "list", "profile", "projects", "shared_get", "shared_save", "export_inside_a_record",
)


@pytest.fixture(scope="module")
def loop_app(infra, tmp_path_factory):  # type: ignore[no-untyped-def]
    loop = asyncio.new_event_loop()
    settings_ = MemorySettings(home=tmp_path_factory.mktemp("scope"), nats_url=infra.nats_url,
                               database_url=infra.database_url, namespace=infra.fresh_namespace(),
                               memory_schema="scope_" + uuid.uuid4().hex[:8])
    cm = memory_app(settings_)
    app = loop.run_until_complete(cm.__aenter__())
    yield loop, app
    loop.run_until_complete(app.bus.delete_streams())
    loop.run_until_complete(cm.__aexit__(None, None, None))
    loop.close()


async def run_case(app, scope: str | None, where: str, operation: str, named: str | None) -> None:  # type: ignore[no-untyped-def]
    tenant = "t" + uuid.uuid4().hex[:12]
    secret = f"secret {uuid.uuid4().hex[:8]} the garage code is 4711"

    async def command(type_: str, payload: dict, project_scope: str | None = None):  # type: ignore[no-untyped-def,type-arg]
        return await app.service.handle_command(CommandEnvelope(
            command_id=uuid.uuid4().hex, type=type_, tenant=tenant, payload=payload, project_scope=project_scope))

    async def query(type_: str, payload: dict, project_scope: str | None = None):  # type: ignore[no-untyped-def,type-arg]
        return await app.service.handle_query(QueryEnvelope(
            type=type_, tenant=tenant, payload=payload, project_scope=project_scope))

    free = await command("save_memory", {"content": secret, "project": where})
    keyed = await command("save_memory", {"content": f"prefers oolong {secret}", "category": "preference",
                                          "memory_key": "preference.tea", "project": where})
    shared = await command("save_shared_memory", {"title": "Hotel", "event": f"room code 9911 {secret}"})
    assert free.ok and keyed.ok and shared.ok
    memory_id = free.result["memory_id"]
    reachable = scope is None or scope == where
    project = named if named is not None else (scope or where)  # what a request names (the gateway fills it)
    names_other = scope is not None and project != scope

    if operation == "history_by_id":
        reply = await query("memory_history", {"memory_id": memory_id}, scope)
        assert reply.ok == reachable, reply
        if not reachable:
            assert reply.error.code == "not_found"
    elif operation == "update_by_id":
        reply = await command("update_memory", {"id": memory_id, "content": "overwritten"}, scope)
        assert reply.ok == reachable, reply
        if not reachable:
            assert reply.error.code == "not_found"
    elif operation == "forget_by_id":
        reply = await command("forget_memory", {"memory_id": memory_id}, scope)
        assert reply.ok == reachable and (not reply.ok or reply.result["forgotten"]), reply
        if not reachable:
            assert reply.error.code == "not_found"
    elif operation == "update_by_key":
        reply = await command("update_memory", {"memory_key": "preference.tea", "project": project,
                                                "content": "overwritten"}, scope)
        if names_other:
            assert not reply.ok and reply.error.code == "permission_denied"
        else:
            assert reply.ok == (project == where), reply
    elif operation == "get_by_key":
        reply = await query("get_memory_by_key", {"memory_key": "preference.tea", "project": project}, scope)
        if names_other:
            assert not reply.ok and reply.error.code == "permission_denied"
        else:
            assert reply.ok and reply.result["found"] == (project == where)
    elif operation == "forget_by_content":
        reply = await command("forget_memory", {"content": secret, "project": project}, scope)
        if names_other:
            assert not reply.ok and reply.error.code == "permission_denied"
        else:
            assert reply.ok and reply.result["forgotten"] == (project == where)
    elif operation in ("recall", "list", "profile"):
        payload: dict = {"project": named}  # type: ignore[type-arg]
        if operation == "recall":
            reply = await query("recall", {**payload, "query": "garage code", "include_profile": True}, scope)
        elif operation == "list":
            reply = await query("recall_memory", {**payload, "keyword": "garage"}, scope)
        else:
            reply = await query("profile", payload, scope)
        if scope is not None and named is not None and named != scope:
            assert not reply.ok and reply.error.code == "permission_denied"
        else:
            assert reply.ok
            seen = secret in str(reply.result)
            assert seen == (reachable and (named is None or named == where)), (scope, where, named, reply.result)
    elif operation == "projects":
        reply = await query("list_projects", {}, scope)
        listed = {p["project"] for p in reply.result["projects"]}
        assert (where in listed) == reachable and (scope is None or listed <= {scope})
    elif operation == "export_inside_a_record":
        # an export page's cursor may go on inside a long memory's record (`<id>@<version>`): a cursor
        # naming a memory outside the scope (or the page's project) gives none of it
        twice = await command("save_memory", {"content": f"noted twice {secret}", "project": where})
        pinned = await command("pin_memory", {"memory_id": twice.result["memory_id"], "pinned": True, "project": where})
        assert twice.ok and pinned.ok
        reply = await query("export_page", {"kind": "memory", "project": named,
                                            "after": f"{twice.result['memory_id']}@1"}, scope)
        if scope is not None and named is not None and named != scope:
            assert not reply.ok and reply.error.code == "permission_denied"
        else:
            assert reply.ok
            seen = "noted twice" in str(reply.result)
            assert seen == (reachable and (named is None or named == where)), (scope, where, named, reply.result)
    elif operation == "shared_get":
        reply = await query("get_shared_memories", {"title": "Hotel"}, scope)
        assert reply.ok == (scope is None) and ("9911" in str(reply.result)) == (scope is None)
    elif operation == "shared_save":
        reply = await command("save_shared_memory", {"title": "Hotel", "event": "overwritten"}, scope)
        assert reply.ok == (scope is None)

    # nothing outside the scope changed: the owner (unscoped) still sees each thing as it was
    if not reachable:
        history = await query("memory_history", {"memory_id": memory_id})
        assert [v["content"] for v in history.result["versions"]] == [secret]
        by_key = await query("get_memory_by_key", {"memory_key": "preference.tea", "project": where})
        assert by_key.result["found"] and by_key.result["memory"]["version"] == 1
    if scope is not None:
        titles = await query("get_shared_memories", {"title": "Hotel"})
        assert titles.result["shared_memories"][0]["version"] == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    scope=st.one_of(st.none(), st.sampled_from(PROJECTS)),
    where=st.sampled_from(PROJECTS),
    operation=st.sampled_from(OPERATIONS),
    named=st.one_of(st.none(), st.sampled_from(PROJECTS)),
)
def test_nothing_outside_the_scope_is_read_changed_or_revealed(loop_app, scope, where, operation, named) -> None:  # type: ignore[no-untyped-def]
    loop, app = loop_app
    loop.run_until_complete(run_case(app, scope, where, operation, named))
