"""Tenant isolation as a property: random sequences of every memory command and query, issued as
two tenants over shared projects, keys and titles; neither tenant ever reads, matches, forgets or
counts the other's data."""

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

TENANTS = ("alice", "bob")
PROJECTS = ("default", "work", "shared-name")
WORDS = ("tea", "coffee", "cats", "dogs", "Berlin", "Lisbon", "绿茶", "猫", "marathon", "piano")
KEYS = ("preference.drink", "preference.pets", "goal.sport")

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
tenant = st.sampled_from(TENANTS)
project = st.sampled_from(PROJECTS)
op = st.one_of(
    st.tuples(st.just("save"), tenant, project, text),
    st.tuples(st.just("save_keyed"), tenant, project, st.sampled_from(KEYS), text),
    st.tuples(st.just("update_keyed"), tenant, project, st.sampled_from(KEYS), text),
    st.tuples(st.just("forget"), tenant, project, text),
    st.tuples(st.just("shared"), tenant, st.sampled_from(("Trip", "Concert")), text),
    st.tuples(st.just("recall"), tenant, st.one_of(st.none(), project), text),
    st.tuples(st.just("by_key"), tenant, project, st.sampled_from(KEYS)),
    st.tuples(st.just("list"), tenant, st.one_of(st.none(), project), st.one_of(st.none(), st.sampled_from(WORDS))),
    st.tuples(st.just("shared_get"), tenant, st.one_of(st.none(), st.sampled_from(WORDS))),
    st.tuples(st.just("projects"), tenant),
    st.tuples(st.just("profile"), tenant, st.one_of(st.none(), project)),
)


@pytest.fixture(scope="module")
def loop_app(infra, tmp_path_factory):  # type: ignore[no-untyped-def]
    """One memory app for all generated cases (each case uses fresh tenant names)."""
    loop = asyncio.new_event_loop()
    settings_ = MemorySettings(home=tmp_path_factory.mktemp("iso"), nats_url=infra.nats_url,
                               database_url=infra.database_url, namespace=infra.fresh_namespace(),
                               memory_schema="iso_" + uuid.uuid4().hex[:8])
    cm = memory_app(settings_)
    app = loop.run_until_complete(cm.__aenter__())
    yield loop, app
    loop.run_until_complete(app.bus.delete_streams())
    loop.run_until_complete(cm.__aexit__(None, None, None))
    loop.close()


def owned_ids(owner: dict[str, set[str]], tenant_name: str) -> set[str]:
    return owner.setdefault(tenant_name, set())


async def run_case(app, ops, suffix: str) -> None:  # type: ignore[no-untyped-def]
    names = {t: f"{t}{suffix}" for t in TENANTS}
    owner: dict[str, set[str]] = {}
    contents: dict[str, set[str]] = {}

    async def command(t: str, type_: str, payload: dict) -> dict:  # type: ignore[type-arg]
        reply = await app.service.handle_command(
            CommandEnvelope(command_id=uuid.uuid4().hex, type=type_, tenant=names[t], payload=payload)
        )
        return reply.result if reply.ok else {}

    async def query(t: str, type_: str, payload: dict) -> dict:  # type: ignore[type-arg]
        reply = await app.service.handle_query(QueryEnvelope(type=type_, tenant=names[t], payload=payload))
        assert reply.ok or reply.error.code == "not_found", reply.error
        return reply.result or {}

    def check_ids(t: str, ids: list[str]) -> None:
        other = TENANTS[1 - TENANTS.index(t)]
        leaked = set(ids) & owned_ids(owner, other)
        assert not leaked, f"{t} saw {other}'s memories {leaked}"

    for o in ops:
        kind, t = o[0], o[1]
        if kind == "save":
            r = await command(t, "save_memory", {"project": o[2], "content": o[3]})
            if r:
                owned_ids(owner, t).add(r["memory_id"])
                contents.setdefault(t, set()).add(o[3])
        elif kind == "save_keyed":
            r = await command(t, "save_memory", {"project": o[2], "category": o[3].split(".")[0].replace("goal", "goal"),
                                                 "memory_key": o[3], "content": o[4]})
            if r:
                owned_ids(owner, t).add(r["memory_id"])
        elif kind == "update_keyed":
            r = await command(t, "update_memory", {"project": o[2], "memory_key": o[3], "content": o[4]})
            if r:
                assert r["memory_id"] in owned_ids(owner, t), "updated another tenant's memory"
        elif kind == "forget":
            r = await command(t, "forget_memory", {"project": o[2], "content": o[3]})
            if r.get("forgotten"):
                assert r["memory_id"] in owned_ids(owner, t), "forgot another tenant's memory"
        elif kind == "shared":
            r = await command(t, "save_shared_memory", {"title": o[2], "event": o[3]})
            if r:
                owned_ids(owner, t).add(r["shared_memory_id"])
        elif kind == "recall":
            r = await query(t, "recall", {"query": o[3], "project": o[2], "limit": 20})
            check_ids(t, [h["memory"]["id"] for h in r.get("hits", [])])
        elif kind == "by_key":
            r = await query(t, "get_memory_by_key", {"project": o[2], "memory_key": o[3]})
            if r.get("found"):
                check_ids(t, [r["memory"]["id"]])
        elif kind == "list":
            r = await query(t, "recall_memory", {"project": o[2], "keyword": o[3], "limit": 100})
            check_ids(t, [m["id"] for m in r.get("memories", [])])
        elif kind == "shared_get":
            r = await query(t, "get_shared_memories", {"keyword": o[2]})
            check_ids(t, [m["id"] for m in r.get("shared_memories", [])])
        elif kind == "projects":
            r = await query(t, "list_projects", {})
            total = sum(p["memories"] for p in r.get("projects", []))
            assert total <= len(owned_ids(owner, t)), "project counts include another tenant's memories"
        elif kind == "profile":
            r = await query(t, "profile", {"project": o[2]})
            check_ids(t, [m["id"] for m in r.get("static", []) + r.get("dynamic", [])])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=5, max_size=25))
def test_tenants_never_see_each_other(loop_app, ops) -> None:  # type: ignore[no-untyped-def]
    loop, app = loop_app
    loop.run_until_complete(run_case(app, ops, uuid.uuid4().hex[:8]))
