"""Who is calling and what they have (issue 18 items 2 and 3): the session id carrying clientInfo,
the project cache and the containerTag description, and the time box on a recall's relations."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from contracts.errors import ErrorBody, ErrorCode
from contracts.graph import (
    RelatedMemories,
    RelatedMemory,
    RelatedMemoryList,
    SimilarMemories,
    SimilarMemoriesResult,
    SimilarMemory,
    SimilarOf,
)
from contracts.memory import MemoryHistoryQuery, ProjectInfo, ProjectList, RecallHit, RecallResult
from kit.client import ServiceFailure
from services.gateway.catalogue import operation
from services.gateway.operations import Caller, Operations
from services.gateway.principal import (
    ClientInfo,
    Principal,
    client_from_initialize,
    client_from_session_id,
    session_id_for,
)
from services.gateway.project_cache import MAX_NAMES_IN_DESCRIPTION, ProjectCache, describe_projects

pytestmark = pytest.mark.unit
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def initialize(client_info: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client_info}}).encode()


def test_client_info_round_trips_through_a_visible_ascii_session_id() -> None:
    client = client_from_initialize(initialize({"name": "Claude Desktop — 日本", "version": "0.9.1"}))
    assert client == ClientInfo("Claude Desktop — 日本", "0.9.1") and client.label == "Claude Desktop — 日本/0.9.1"
    session = session_id_for(client)
    assert all(0x21 <= ord(ch) <= 0x7E for ch in session)  # the MCP spec's rule for session ids
    assert client_from_session_id(session) == client
    assert session_id_for(client) != session  # one id per session


@pytest.mark.parametrize("body", [
    b"not json", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(),
    initialize("a string"), initialize({"name": ""}), initialize({"name": "x" * 101}), initialize({"name": "a\x00b"}),
])
def test_anything_but_a_sane_initialize_gives_no_client(body: bytes) -> None:
    assert client_from_initialize(body) is None


def test_a_bad_version_is_dropped_but_the_name_kept() -> None:
    assert client_from_initialize(initialize({"name": "cli", "version": 3})) == ClientInfo("cli", None)


@pytest.mark.parametrize("value", [None, "", "abc", "egs1.x", "egs1.x.!!!", "egs1.x.bm90IGpzb24", "other.x.e30",
                                   "egs1.x." + "A" * 2000])
def test_foreign_or_broken_session_ids_give_no_client(value: str | None) -> None:
    assert client_from_session_id(value) is None


def projects(*names: str) -> ProjectList:
    return ProjectList(projects=[ProjectInfo(project=n, memories=1, last_updated=NOW - timedelta(days=i))
                                 for i, n in enumerate(names)])


async def test_cache_serves_within_the_ttl_refreshes_on_demand_and_forgets_on_a_new_project() -> None:
    now = [0.0]
    cache = ProjectCache(ttl_s=60, clock=lambda: now[0])
    fetched: list[ProjectList] = [projects("a"), projects("a", "b"), projects("a", "b", "c"), projects("x")]

    async def fetch() -> ProjectList:
        return fetched.pop(0)

    key = ("alice", None)
    assert [p.project for p in (await cache.get(key, fetch)).projects] == ["a"]
    assert [p.project for p in (await cache.get(key, fetch)).projects] == ["a"]  # cached
    assert [p.project for p in (await cache.get(key, fetch, refresh=True)).projects] == ["a", "b"]
    cache.saw(key, "b")  # known: still cached
    assert len((await cache.get(key, fetch)).projects) == 2
    cache.saw(key, "c")  # new: read again
    assert len((await cache.get(key, fetch)).projects) == 3
    now[0] = 61.0  # expired
    assert [p.project for p in (await cache.get(key, fetch)).projects] == ["x"]


async def test_cache_entries_are_per_tenant_and_scope_and_bounded() -> None:
    cache = ProjectCache(max_entries=2)
    cache.store(("alice", None), projects("home"))
    cache.store(("bob", None), projects("work"))
    cache.store(("alice", "home"), projects("home"))
    assert cache.fresh(("alice", None)) is None  # the oldest went
    assert cache.fresh(("bob", None)) == projects("work")


def test_description_names_projects_newest_first_and_is_bounded() -> None:
    assert describe_projects("Base.", None) == "Base."
    assert "no projects yet" in describe_projects("Base.", projects())
    assert describe_projects("Base.", projects("new", "old")) == "Base. The user's projects: new, old."
    many = describe_projects("Base.", projects(*(f"p{i}" for i in range(MAX_NAMES_IN_DESCRIPTION + 7))))
    assert many.endswith("and 7 more (listProjects).") and f"p{MAX_NAMES_IN_DESCRIPTION}," not in many


HIT = {"memory": {"id": "00000000-0000-0000-0000-000000000001", "content": "Likes green tea", "project": "default",
                  "importance": 3, "confidence": 1.0, "source": "mcp", "version": 2, "status": "active",
                  "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}, "score": 0.5}


class SlowClient:
    """Answers recall at once; relations slowly, or with a refusal; the graph holds ``graph`` (the
    neighbours of the hit at that version) or does not know the hit."""

    def __init__(self, delay_s: float, similar_error: ErrorCode | None = None,
                 graph: tuple[int | None, list[SimilarMemory]] | None = None) -> None:
        self.delay_s = delay_s
        self.similar_error = similar_error
        self.graph = graph
        self.asked: list[type[BaseModel]] = []

    async def ask(self, tenant: str | None, query: BaseModel, *, project_scope: str | None = None) -> Any:
        self.asked.append(type(query))
        if isinstance(query, RelatedMemories):
            await asyncio.sleep(self.delay_s)
            return RelatedMemoryList(memories=[
                RelatedMemory(memory_id=i, found=self.graph is not None, version=self.graph[0] if self.graph else None,
                              similar=self.graph[1] if self.graph else []) for i in query.memory_ids])
        if isinstance(query, SimilarMemories) and self.similar_error is not None:
            raise ServiceFailure(ErrorBody(code=self.similar_error, message="unknown query 'similar_memories'"))
        if isinstance(query, SimilarMemories | MemoryHistoryQuery):
            await asyncio.sleep(self.delay_s)
            return SimilarMemoriesResult(memories=[SimilarOf(memory_id=i, found=True, similar=[])
                                                   for i in query.memory_ids]) \
                if isinstance(query, SimilarMemories) else None
        return RecallResult(hits=[RecallHit.model_validate(HIT)])


CALLER = Caller(Principal(tenant="alice", client_id="c", scopes=frozenset({"memory:read"})))


async def test_relations_late_past_the_budget_are_left_out() -> None:
    from contracts.memory import Recall

    client = SlowClient(delay_s=5.0)
    ops = Operations(client)  # type: ignore[arg-type]
    result = await asyncio.wait_for(ops.run(CALLER, operation(Recall), Recall(query="tea")), timeout=2.0)
    assert result.hits[0].relations == [] and result.hits[0].memory.content == "Likes green tea"


async def test_a_memory_service_without_similar_memories_is_not_asked_again_at_once() -> None:
    from contracts.memory import Recall

    client = SlowClient(delay_s=0.0, similar_error=ErrorCode.INVALID_ARGUMENT)
    ops = Operations(client)  # type: ignore[arg-type]
    await ops.run(CALLER, operation(Recall), Recall(query="tea"))
    await ops.run(CALLER, operation(Recall), Recall(query="tea"))
    assert client.asked.count(SimilarMemories) == 1


NEIGHBOUR = SimilarMemory(memory_id=uuid.UUID("00000000-0000-0000-0000-000000000002"), score=0.8123)


async def test_similar_memories_come_from_the_graph_in_one_call_without_a_vector_search() -> None:
    from contracts.memory import Recall

    client = SlowClient(delay_s=0.0, graph=(2, [NEIGHBOUR]))  # the hit is at version 2, its edges too
    result = await Operations(client).run(CALLER, operation(Recall), Recall(query="tea"))  # type: ignore[arg-type]
    assert client.asked.count(RelatedMemories) == 1 and SimilarMemories not in client.asked
    similar = [r for r in result.hits[0].relations if r.kind.value == "similar"]
    assert [(r.memory_id, r.score) for r in similar] == [(NEIGHBOUR.memory_id, 0.812)]


@pytest.mark.parametrize("graph", [None, (1, [NEIGHBOUR]), (None, [NEIGHBOUR])])
async def test_a_hit_the_graph_has_not_caught_up_with_is_asked_of_the_vector_index(graph: Any) -> None:
    """Not in the graph yet, its edges found for an older version, or a newer round queued."""
    from contracts.memory import Recall

    client = SlowClient(delay_s=0.0, graph=graph)
    result = await Operations(client).run(CALLER, operation(Recall), Recall(query="tea"))  # type: ignore[arg-type]
    assert client.asked.count(SimilarMemories) == 1
    assert not [r for r in result.hits[0].relations if r.kind.value == "similar"]  # the index found none


async def test_who_am_i_names_the_user_and_the_calling_client() -> None:
    from mcp.server.auth.provider import AccessToken

    token = AccessToken(token="k", client_id="key", scopes=["memory:read"], subject="u1",
                        claims={"key_id": None, "project": None, "user_name": "Alice"})
    caller = Caller(Principal.from_token(token), client=ClientInfo("Claude Code", "2.0.1"))
    me = await Operations(None).who_am_i(caller)  # type: ignore[arg-type]
    assert (me.user_id, me.user_name, me.client_name, me.client_version) == ("u1", "Alice", "Claude Code", "2.0.1")
    plain = await Operations(None).who_am_i(Caller(Principal.from_token(token.model_copy(update={"claims": {}}))))  # type: ignore[arg-type]
    assert (plain.user_name, plain.client_name) == (None, None)
