"""The graph service on real JetStream and Postgres, next to the memory service (in-process, on
the bus, with the embedded Qdrant engine): pages hold every node exactly once while memories are
being written (a property over page sizes and concurrent writes), edges appear right after an
update, a forget and an extraction, every graph query is tenant- and project-isolated, a bad
cursor is refused naming ``cursor``, and a replay rebuilds the same graph."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import date
from functools import partial
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from contracts.daily_logs import RecordExtractionResult, SaveDailyLog, Turn
from contracts.errors import ErrorCode
from contracts.graph import (
    EdgeType,
    GraphPage,
    GraphPageQuery,
    NodeState,
    NodeType,
    RelatedMemories,
    RelatedMemoryList,
    SimilarMemories,
    SimilarMemoriesResult,
    SimilarOf,
)
from contracts.memory import Category, ForgetMemory, Provenance, SaveMemory, UpdateMemory
from kit.client import Client, ServiceFailure
from services.graph import main as graph_main
from services.graph.config import GraphSettings
from services.memory.config import MemorySettings
from services.memory.entrypoints import nats as memory_entry
from services.memory.main import memory_app

pytestmark = pytest.mark.integration
T = TypeVar("T")


class Stack:
    """The memory and graph services of one namespace, running on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: Client, graph: graph_main.GraphApp,
                 graph_settings: GraphSettings, memory: Any = None) -> None:
        self.memory = memory  # the memory service's MemoryApp
        self.loop = loop
        self.client = client
        self.graph = graph
        self.graph_settings = graph_settings
        self.graph_stop = asyncio.Event()
        self.graph_tasks: list[asyncio.Task[None]] = []

    def run(self, coro: Awaitable[T]) -> T:
        return self.loop.run_until_complete(coro)  # type: ignore[arg-type]

    async def save(self, tenant: str, content: str, **kw: Any) -> str:
        result = await self.client.send(tenant, SaveMemory(content=content, **kw))
        return str(result.memory_id)

    async def page(self, tenant: str, scope: str | None = None, **kw: Any) -> GraphPage:
        page: GraphPage = await self.client.ask(tenant, GraphPageQuery(**kw), project_scope=scope)
        return page

    async def everything(self, tenant: str, scope: str | None = None, **kw: Any) -> tuple[list[Any], list[Any]]:
        nodes, edges, cursor = [], [], None
        while True:
            page = await self.page(tenant, scope, cursor=cursor, **kw)
            nodes += page.nodes
            edges += page.edges
            cursor = page.next_cursor
            if cursor is None:
                return nodes, edges


@pytest.fixture(scope="module")
def stack(infra, tmp_path_factory) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    loop = asyncio.new_event_loop()
    namespace = infra.fresh_namespace()
    mem_settings = MemorySettings(
        home=tmp_path_factory.mktemp("graph"), nats_url=infra.nats_url, database_url=infra.database_url,
        namespace=namespace, memory_schema="gmem_" + uuid.uuid4().hex[:8], late_interaction="none", reranker="none",
    )
    graph_settings = GraphSettings(nats_url=infra.nats_url, database_url=infra.database_url, namespace=namespace,
                                   graph_schema="graph_" + uuid.uuid4().hex[:8])
    mem_cm = memory_app(mem_settings)
    graph_cm = graph_main.graph_app(graph_settings)
    mem_stop = asyncio.Event()

    async def setup() -> tuple[Any, list[asyncio.Task[None]], Stack]:
        mem = await mem_cm.__aenter__()
        mem_tasks = memory_entry.start(mem.bus, mem.service, mem_stop)
        await memory_entry.serve_queries(mem.bus, mem.service)
        graph = await graph_cm.__aenter__()
        s = Stack(loop, Client(mem.bus, command_timeout_s=30), graph, graph_settings, mem)
        s.graph_tasks = await graph_main.start(graph, s.graph_stop)
        return mem, mem_tasks, s

    mem, mem_tasks, s = loop.run_until_complete(setup())
    graph = s.graph
    try:
        yield s
    finally:
        s.graph_stop.set()
        mem_stop.set()
        loop.run_until_complete(asyncio.gather(*s.graph_tasks, *mem_tasks, return_exceptions=True))
        loop.run_until_complete(graph.pool.execute(f"DROP SCHEMA IF EXISTS {graph_settings.graph_schema} CASCADE"))
        loop.run_until_complete(graph_cm.__aexit__(None, None, None))
        loop.run_until_complete(mem.bus.delete_streams())
        loop.run_until_complete(mem_cm.__aexit__(None, None, None))
        loop.close()


async def until(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 30.0) -> T:
    """Poll until ``probe`` answers something (the bound only ends a hang; nothing is timed)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await probe()
        if found:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def tenant() -> str:
    return "g" + uuid.uuid4().hex[:10]


def edge_set(edges: list[Any], *types: EdgeType) -> set[tuple[str, str, str]]:
    return {(e.source, e.target, e.type.value) for e in edges if not types or e.type in types}


# pagination ----------------------------------------------------------------------------------------
@settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.generate],  # no shrinking: minutes
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(1, 7), before=st.integers(0, 8), during=st.integers(1, 12), types=st.booleans())
def test_every_node_once_across_pages_while_memories_are_written(
    stack: Stack, limit: int, before: int, during: int, types: bool,
) -> None:
    user = tenant()
    filters: dict[str, Any] = {"node_types": [NodeType.MEMORY]} if types else {}

    async def case() -> None:
        for i in range(before):
            await stack.save(user, f"earlier fact number {i} about {user}", project=("home", "work")[i % 2])
        expected_first = before + (0 if types else min(before, 2))
        await until(lambda: _total(stack, user, filters, expected_first), "the first saves in the graph")
        present = {n.id for n in (await stack.everything(user, **filters))[0]}
        assert len(present) == expected_first

        async def writer() -> None:
            for i in range(during):
                await stack.save(user, f"concurrent fact number {i} about {user}", project="home")

        writing = asyncio.create_task(writer())
        seen: list[str] = []
        cursor = None
        while True:
            page = await stack.page(user, cursor=cursor, limit=limit, **filters)
            assert len(page.nodes) <= limit
            seen += [n.id for n in page.nodes]
            cursor = page.next_cursor
            if cursor is None:
                break
            await asyncio.sleep(0)  # let the writer interleave
        await writing
        assert len(seen) == len(set(seen)), "a node was on two pages"
        assert present <= set(seen), "a node present throughout was on no page"
        final_total = before + during + (0 if types else (2 if before >= 2 else 1))
        await until(lambda: _total(stack, user, filters, final_total), "every save in the graph")
        all_nodes, _ = await stack.everything(user, **filters)
        ids = [n.id for n in all_nodes]
        assert len(ids) == len(set(ids)) == final_total
        assert set(seen) <= set(ids)
        page = await stack.page(user, limit=limit, **filters)
        assert page.total == final_total

    stack.run(case())


async def _total(stack: Stack, user: str, filters: dict[str, Any], want: int) -> bool:
    page = await stack.page(user, limit=1, **filters)
    return page.total >= want


# edges -----------------------------------------------------------------------------------------------
def test_edges_right_after_update_forget_and_extraction(stack: Stack) -> None:
    user = tenant()

    async def case() -> None:
        dog = await stack.save(user, "I have a dog named Rex", category=Category.PREFERENCE,
                               memory_key="preference.pet_dog")
        cat = await stack.save(user, "I also have a cat named Tom", category=Category.PREFERENCE,
                               memory_key="preference.pet_cat")

        async def edges() -> set[tuple[str, str, str]]:
            return edge_set((await stack.everything(user))[1])

        found = await until(lambda: _having(edges, {(cat, dog, "extends")}), "extends in the key family")
        assert (dog, "project:default", "in_project") in found and (cat, "project:default", "in_project") in found

        # update: the node shows the new version at once
        await stack.client.send(user, UpdateMemory(id=uuid.UUID(dog), content="I have a dog named Rex, a beagle"))

        async def updated() -> Any:
            nodes = {n.id: n for n in (await stack.everything(user))[0]}
            return nodes[dog] if nodes[dog].version == 2 else None

        node = await until(updated, "the update in the graph")
        assert node.label == "I have a dog named Rex, a beagle" and node.state is NodeState.NEW

        # forget: the node is forgotten, and the family's next memory updates it
        await stack.client.send(user, ForgetMemory(memory_id=uuid.UUID(dog), reason="Rex moved out"))
        await until(lambda: _having(edges, {(cat, dog, "updates")}), "updates after the forget")
        nodes = {n.id: n for n in (await stack.everything(user))[0]}
        assert nodes[dog].state is NodeState.FORGOTTEN and nodes[cat].state is NodeState.NEW
        assert not any(e[2] == "similar" and dog in e[:2] for e in await edges())

        # extraction: a log, memories with provenance, the task's result
        log = await stack.client.send(user, SaveDailyLog(
            log_date=date(2026, 11, 30), topics=["hiking"], turns=[Turn(speaker="user", text="I hiked the Alps")]))
        log_id = log.id
        facts = []
        for i, text in enumerate(("I hiked in the Alps", "I want to climb Mont Blanc next year")):
            facts.append(await stack.save(user, text, category=Category.GOAL, memory_key=f"goal.alps_{i}x",
                                          provenance=Provenance(log_id=log_id, task_id="t1", turns=[0])))
        other = await stack.save(user, "I prefer window seats", category=Category.PREFERENCE,
                                 memory_key="preference.seat")
        await stack.client.send(user, RecordExtractionResult(log_id=log_id, task_id="t1",
                                                             memory_ids=[uuid.UUID(facts[0]), uuid.UUID(other)]))
        lnode = f"log:{log_id}"
        want = {(lnode, facts[0], "derives"), (lnode, facts[1], "derives"), (lnode, other, "derives"),
                (facts[1], facts[0], "extends"), (lnode, "project:default", "in_project")}
        await until(lambda: _having(edges, want), "derives and extends after the extraction")
        nodes = {n.id: n for n in (await stack.everything(user))[0]}
        assert nodes[lnode].type is NodeType.LOG and nodes[lnode].detail["log_date"] == "2026-11-30"

    stack.run(case())


async def _having(edges: Callable[[], Awaitable[set[tuple[str, str, str]]]],
                  want: set[tuple[str, str, str]]) -> set[tuple[str, str, str]] | None:
    found = await edges()
    return found if want <= found else None


def test_similar_edges_come_from_the_memory_service_and_go_with_a_forget(stack: Stack) -> None:
    user = tenant()

    async def case() -> None:
        a = await stack.save(user, "My favourite drink is green tea")
        b = await stack.save(user, "I love drinking green tea every morning")
        c = await stack.save(user, "The quarterly tax report is due in April")

        async def similar() -> list[Any] | None:
            found = [e for e in (await stack.everything(user))[1] if e.type is EdgeType.SIMILAR]
            return found if {(e.source, e.target) for e in found} >= {(b, a)} else None

        found = await until(similar, "a similar edge")
        assert all(e.weight is not None and e.weight >= 0.6 for e in found)
        assert not any(c in (e.source, e.target) for e in found)
        await stack.client.send(user, ForgetMemory(memory_id=uuid.UUID(b)))

        async def gone() -> bool:
            edges = (await stack.everything(user))[1]
            return not any(e.type is EdgeType.SIMILAR and b in (e.source, e.target) for e in edges)

        await until(gone, "the forgotten memory's similar edges gone")

    stack.run(case())


def test_a_burst_of_saves_over_projects_and_users_gets_edges_within_each(stack: Stack) -> None:
    """The worker asks for a burst of saves together, a user's project at a time: near-identical
    texts saved at once in two projects of one user and in another user's account are each linked
    to their own project's texts only."""
    alice, bob = tenant(), tenant()
    texts = ["I drink green tea every morning", "Green tea is what I drink each morning",
             "Every morning I have a cup of green tea"]

    async def case() -> None:
        saved = await asyncio.gather(*(stack.save(user, text, project=project)
                                       for user, project in ((alice, "home"), (alice, "work"), (bob, "home"))
                                       for text in texts))
        groups = {alice: [set(saved[0:3]), set(saved[3:6])], bob: [set(saved[6:9])]}
        for user, projects in groups.items():
            want = {(a, b) for ids in projects for a in ids for b in ids if a != b}
            edges = await until(lambda u=user, w=want: _having_similar(lambda: _similar_edges(stack, u), w),
                                "each text linked to the others of its project")
            assert set(edges) == want, "no edge leaves its user's project"

    stack.run(case())


def test_an_older_memory_gains_a_closer_neighbour_saved_after_it(stack: Stack) -> None:
    """Similarity is symmetric: a memory saved later is offered to its neighbours' lists, so the
    older memory gets the edge too; with a list of one, the closer newcomer replaces a weaker edge."""
    user = tenant()
    worker = stack.graph.similar

    similar_edges = partial(_similar_edges, stack, user)

    async def case() -> None:
        tea = await stack.save(user, "My favourite drink is green tea")
        drinks = await stack.save(user, "I love drinking green tea every morning")
        first = await until(lambda: _having_similar(similar_edges, {(drinks, tea), (tea, drinks)}),
                            "the older memory's edge to the newer one")
        assert first[(tea, drinks)] == pytest.approx(first[(drinks, tea)])
        worker.limit = 1  # every list keeps its single closest neighbour from here on
        try:
            # (not "Green tea is my favourite drink": the same fact said again is merged into `tea`, no new memory)
            closer = await stack.save(user, "Green tea is my favourite drink to have with friends")
            edges = await until(lambda: _having_similar(similar_edges, {(closer, tea)}), "the closer memory's edges")
            await until(lambda: _settled(stack), "the similar queue drained")
            edges = await similar_edges()
            assert edges[(closer, tea)] > first[(tea, drinks)], "the test's texts: the newcomer is the closer one"
            tea_list = {t: w for (src, t), w in edges.items() if src == tea}
            assert tea_list == {closer: pytest.approx(edges[(closer, tea)])}, tea_list
        finally:
            worker.limit = stack.graph_settings.graph_similar_limit

    stack.run(case())


def test_a_changed_memory_leaves_the_lists_its_old_text_was_on(stack: Stack) -> None:
    """An edge's weight is the similarity of two texts: when a memory's text changes, the edges into
    it that its old text earned are re-weighed by its new neighbours, or go if they no longer take it."""
    user = tenant()

    similar_edges = partial(_similar_edges, stack, user)

    async def case() -> None:
        tea = await stack.save(user, "My favourite drink is green tea")
        drinks = await stack.save(user, "I love drinking green tea every morning")
        herbal = await stack.save(user, "I drink green tea or herbal tea every evening")
        await until(lambda: _having_similar(similar_edges, {(tea, drinks), (herbal, drinks), (drinks, tea), (tea, herbal)}),
                    "the tea memories' edges")
        before = await similar_edges()
        await stack.client.send(user, UpdateMemory(id=uuid.UUID(drinks), content="The quarterly tax report is due in April"))

        async def moved_on() -> dict[tuple[str, str], float] | None:
            edges = await similar_edges()
            return edges if await _settled(stack) and not any(drinks in pair for pair in edges) else None

        after = await until(moved_on, "the changed memory's edges gone from the tea lists")
        assert after[(tea, herbal)] == pytest.approx(before[(tea, herbal)])  # the others' edges stay

    stack.run(case())


def test_a_list_that_lost_a_changed_memory_gets_a_new_round(stack: Stack) -> None:
    """Top-k is not symmetric: a changed memory's round removes an edge into it from a list that
    its new neighbours did not include, yet that list's own nearest neighbours may still hold the
    new text. The list's memory is queued again, so its round asks the memory service and the list
    holds the changed memory again, weighed against its new text."""
    user = tenant()
    worker = stack.graph.similar

    similar_edges = partial(_similar_edges, stack, user)

    async def case() -> None:
        tea = await stack.save(user, "I love drinking green tea every morning")
        changed = await stack.save(user, "My favourite drink is green tea")
        coffee = await stack.save(user, "I drink black coffee every morning")
        await until(lambda: _having_similar(similar_edges, {(tea, changed), (changed, tea)}), "the tea memories' edges")
        await until(lambda: _settled(stack), "the similar queue drained")
        before = await similar_edges()
        assert {t for s, t in before if s == tea} == {changed}, before  # the test's texts: coffee is too far
        worker.limit = 1  # every list keeps its single closest neighbour from here on
        try:
            # the new text's closest is coffee, so its round re-weighs nothing on the tea list and
            # removes the old edge from it; the tea memory's own closest is still the new text
            await stack.client.send(user, UpdateMemory(id=uuid.UUID(changed),
                                                       content="I drink green tea and black coffee every morning"))

            async def settled_after() -> dict[tuple[str, str], float] | None:
                edges = await similar_edges()
                return edges if await _settled(stack) and (changed, coffee) in edges else None

            after = await until(settled_after, "the changed memory's round and what it queued")
            assert {t for s, t in after if s == changed} == {coffee}, after  # tea is not on its list
            tea_list = {t: w for (s, t), w in after.items() if s == tea}
            assert set(tea_list) == {changed}, after  # without the new round: an empty list
            assert tea_list[changed] != pytest.approx(before[(tea, changed)])  # weighed against the new text
        finally:
            worker.limit = stack.graph_settings.graph_similar_limit

    stack.run(case())


def test_the_neighbours_query_answers_from_the_memorys_point_as_from_its_row(stack: Stack) -> None:
    """SimilarMemories reads the memory's vector and where it belongs from its point in the index;
    a memory the index does not hold (its projection behind) is answered from the read model, the
    vector computed as the projection computes it: the same neighbours, the same scores. A forgotten
    memory has none."""
    user = tenant()
    index = stack.memory.service.similar.index

    async def case() -> None:
        tea = await stack.save(user, "I drink green tea every morning", project="p")
        for text in ("Green tea is what I have at breakfast", "I brew a pot of herbal tea after lunch",
                     "The quarterly tax report is due in April", "My morning drink is a cup of tea"):
            await stack.save(user, text, project="p")
        ask = partial(similar_of, stack, user, tea, limit=3, min_score=-1.0)
        from_point = await ask()
        assert from_point.found and from_point.version == 1 and len(from_point.similar) == 3
        assert tea not in {str(s.memory_id) for s in from_point.similar}
        await index.delete([tea])  # as if its projection had not reached the index yet
        assert await index.stored_dense([tea], ["tenant"]) == {}
        from_row = await ask()
        assert from_row.found and from_row.version == 1
        assert [s.memory_id for s in from_row.similar] == [s.memory_id for s in from_point.similar]
        assert [round(s.score, 5) for s in from_row.similar] == [round(s.score, 5) for s in from_point.similar]
        # the other tenant's and another project's callers learn nothing of it either way
        assert not (await similar_of(stack, tenant(), tea, limit=3, min_score=-1.0)).found
        assert not (await ask(scope="elsewhere")).found

        # several at once (the graph's worker): each answered as alone, in the order asked — one from
        # the read model (tea), one from its point, one unknown, one in another project
        near = str(from_point.similar[0].memory_id)
        away = await stack.save(user, "I drink black tea in the evening", project="q")
        unknown = uuid.uuid4()
        many = SimilarMemories(memory_ids=[uuid.UUID(tea), uuid.UUID(near), unknown, uuid.UUID(away)],
                                   limit=3, min_score=-1.0)
        both: SimilarMemoriesResult = await stack.client.ask(user, many, project_scope="p")
        assert [m.memory_id for m in both.memories] == many.memory_ids
        alone = [await similar_of(stack, user, str(i), scope="p", limit=3, min_score=-1.0) for i in many.memory_ids]
        assert both.memories == alone
        assert [m.found for m in both.memories] == [True, True, False, False]
        assert not any(m.found for m in (await stack.client.ask(tenant(), many)).memories)

        drinks = str(from_point.similar[0].memory_id)
        await stack.client.send(user, UpdateMemory(project="p", id=uuid.UUID(drinks),
                                                   content="Coffee is what I have at breakfast"))
        updated = await similar_of(stack, user, drinks, limit=3, min_score=-1.0)
        assert updated.found and updated.version == 2  # the point's version is the memory's current one
        await stack.client.send(user, ForgetMemory(memory_id=uuid.UUID(drinks)))
        gone = await similar_of(stack, user, drinks, limit=3, min_score=-1.0)
        assert gone.found and gone.similar == [] and gone.version == 3

    stack.run(case())


async def similar_of(stack: Stack, user: str, memory_id: str, *, scope: str | None = None, **kw: Any) -> SimilarOf:
    """The memory service's neighbours of one memory (``SimilarMemories`` asked for it alone)."""
    found: SimilarMemoriesResult = await stack.client.ask(
        user, SimilarMemories(memory_ids=[uuid.UUID(memory_id)], **kw), project_scope=scope)
    (one,) = found.memories
    return one


async def _similar_edges(stack: Stack, user: str) -> dict[tuple[str, str], float]:
    """The user's similar edges: (source, target) → weight."""
    return {(e.source, e.target): e.weight for e in (await stack.everything(user))[1] if e.type is EdgeType.SIMILAR}


async def _having_similar(edges: Callable[[], Awaitable[dict[tuple[str, str], float]]],
                          want: set[tuple[str, str]]) -> dict[tuple[str, str], float] | None:
    found = await edges()
    return found if want <= set(found) else None


async def _settled(stack: Stack) -> bool:
    return await stack.graph.store.similar_backlog() == 0


def test_related_memories_serve_a_recalls_markers_from_the_similar_edges(stack: Stack) -> None:
    """The graph's RelatedMemories (a recall's ``~`` markers, issue 33): the similar edges its read
    model holds for several memories in one call — the same neighbours, closest first, as the
    memory service's vector index gives, within the caller's project; version None while a newer
    round is queued; a forgotten neighbour left out; a memory outside the scope not found."""
    user = tenant()

    async def related(ids: list[str], scope: str | None = None, limit: int = 3) -> RelatedMemoryList:
        result: RelatedMemoryList = await stack.client.ask(
            user, RelatedMemories(memory_ids=[uuid.UUID(i) for i in ids], limit=limit), project_scope=scope)
        return result

    async def case() -> None:
        tea = await stack.save(user, "My favourite drink is green tea", project="home")
        drinks = await stack.save(user, "I love drinking green tea every morning", project="home")
        closer = await stack.save(user, "I brew a pot of green tea after lunch", project="home")
        tax = await stack.save(user, "The quarterly tax report is due in April", project="home")
        other = await stack.save(user, "Green tea is my favourite drink at work", project="work")
        await until(lambda: _settled(stack), "the similar queue drained", timeout=60)
        await until(lambda: _having_similar(partial(_similar_edges, stack, user), {(tea, drinks)}), "tea's edges")
        index = await similar_of(stack, user, tea, limit=4)
        nearest = [str(s.memory_id) for s in index.similar if str(s.memory_id) != tea][:3]

        async def caught_up() -> bool:  # the last save's round can still be queued behind the first ones'
            return [str(s.memory_id) for s in (await related([tea])).memories[0].similar] == nearest

        await until(caught_up, "tea's similar edges are the index's nearest", timeout=60)

        async def held() -> RelatedMemoryList | None:  # the graph follows the log: a node may still be on its way
            found = await related([tea, tax, other, drinks])
            return found if all(r.found for r in found.memories) else None

        answer = await until(held, "every memory's node in the graph")
        assert [str(r.memory_id) for r in answer.memories] == [tea, tax, other, drinks]  # the order asked
        first, lone = answer.memories[0], answer.memories[1]
        assert first.found and first.version == 1 and lone.found and lone.similar == []
        assert [str(s.memory_id) for s in first.similar] == nearest
        assert [s.score for s in first.similar] == sorted((s.score for s in first.similar), reverse=True)
        assert str(first.similar[0].memory_id) == drinks and all(s.score >= 0.6 for s in first.similar)
        assert other not in {str(s.memory_id) for s in first.similar}  # neighbours stay within a project
        assert [len(r.similar) for r in (await related([tea], limit=1)).memories] == [1]

        async def in_work() -> RelatedMemoryList | None:  # (saved last: the graph may not hold it yet)
            found = await related([tea, other], scope="work")
            return found if found.memories[1].found else None

        scoped = await until(in_work, "the work memory's node")
        assert [r.found for r in scoped.memories] == [False, True] and scoped.memories[0].similar == []

        await stack.client.send(user, ForgetMemory(memory_id=uuid.UUID(closer)))

        async def without_closer() -> RelatedMemoryList | None:
            found = await related([drinks, closer])
            return found if closer not in {str(s.memory_id) for s in found.memories[0].similar} else None

        after = await until(without_closer, "the forgotten neighbour gone from the markers")
        assert not after.memories[1].found

        await stack.client.send(user, UpdateMemory(id=uuid.UUID(tea), content="I drink green tea daily", project="home"))

        async def changed() -> RelatedMemoryList | None:
            found = await related([tea])
            return found if found.memories[0].version == 2 else None

        await until(changed, "the changed memory's new round")

    stack.run(case())


# isolation and refusals ------------------------------------------------------------------------------
def test_tenant_and_project_isolation_of_every_graph_query(stack: Stack) -> None:
    alice, bob = tenant(), tenant()

    async def case() -> None:
        home = await stack.save(alice, "Alice waters the plants at home", project="home")
        work = await stack.save(alice, "Alice presents the roadmap at work", project="work")
        await stack.save(bob, "Bob's secret is the garage code zebra-quokka", project="home")
        await until(lambda: _total(stack, alice, {}, 4), "alice's graph")
        await until(lambda: _total(stack, bob, {}, 2), "bob's graph")

        nodes, edges = await stack.everything(alice)
        assert {n.id for n in nodes} == {home, work, "project:home", "project:work"}
        assert "zebra-quokka" not in json.dumps([n.model_dump(mode="json") for n in nodes])
        bob_nodes, _ = await stack.everything(bob)
        assert {n.id for n in bob_nodes}.isdisjoint({home, work})

        for scope, named in (("home", None), ("home", "home"), (None, "home")):
            nodes, edges = await stack.everything(alice, scope, project=named)
            assert {n.id for n in nodes} == {home, "project:home"}, (scope, named)
            assert all(e.source in {home, "project:home"} and e.target in {home, "project:home"} for e in edges)
            page = await stack.page(alice, scope, project=named, node_types=[NodeType.MEMORY])
            assert page.total == 1 and [n.id for n in page.nodes] == [home]

        with pytest.raises(ServiceFailure) as refused:
            await stack.page(alice, "home", project="work")
        assert refused.value.error.code is ErrorCode.PERMISSION_DENIED and refused.value.error.field == "project"

        # the memory service's neighbours query (behind 'similar' edges) keeps the same walls
        for asker, scope in ((bob, None), (alice, "work")):
            found = await similar_of(stack, asker, home, scope=scope, min_score=-1.0)
            assert not found.found and found.similar == []
        found = await similar_of(stack, alice, home, scope="home", min_score=-1.0)
        assert found.found and found.version == 1 and work not in {str(s.memory_id) for s in found.similar}
        many = SimilarMemories(memory_ids=[uuid.UUID(home), uuid.UUID(work)], min_score=-1.0)
        for asker, scope, sees in ((bob, None, None), (alice, "work", work), (alice, "home", home)):
            answer: SimilarMemoriesResult = await stack.client.ask(asker, many, project_scope=scope)
            assert [str(m.memory_id) for m in answer.memories if m.found] == ([sees] if sees else [])
            assert all(not m.similar for m in answer.memories if not m.found)
            near = {str(s.memory_id) for m in answer.memories for s in m.similar}
            assert not near & ({home, work} - {sees}), (asker, scope)  # nothing of the other project

        # a cursor of an unscoped walk does not open the other project to a scoped caller
        first = await stack.page(alice, limit=1)
        assert first.next_cursor is not None
        with pytest.raises(ServiceFailure) as refused:
            await stack.page(alice, "home", cursor=first.next_cursor)
        assert refused.value.error.field == "cursor"

    stack.run(case())


def test_a_bad_cursor_or_limit_is_refused_naming_the_field(stack: Stack) -> None:
    user = tenant()

    async def case() -> None:
        for i in range(3):
            await stack.save(user, f"cursor fact {i}")
        await until(lambda: _total(stack, user, {}, 4), "the graph")
        for bad in ("nonsense", "eyJ2IjoxfQ", "eyJ2IjoxLCJzIjotMSwiZiI6IngifQ"):
            with pytest.raises(ServiceFailure) as refused:
                await stack.page(user, cursor=bad)
            assert refused.value.error.field == "cursor" and refused.value.error.code is ErrorCode.INVALID_ARGUMENT
        memories_only = await stack.page(user, limit=1, node_types=[NodeType.MEMORY])
        with pytest.raises(ServiceFailure) as refused:
            await stack.page(user, cursor=memories_only.next_cursor)  # issued for other filters
        assert refused.value.error.field == "cursor"
        reply = await stack.client.bus.query("graph", "graph_page", _envelope(user, {"limit": 1001}))
        assert not reply.ok and reply.error.field == "limit" and "1000" in reply.error.message

    stack.run(case())


def test_a_page_too_big_for_one_bus_message_is_cut_and_continues(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page larger than one NATS message would be lost on the wire: it holds fewer nodes, and the
    next page starts right after the last one sent (here with the budget lowered to a few nodes)."""
    from services.graph.application import pages

    user = tenant()

    async def case() -> None:
        for i in range(12):
            await stack.save(user, f"a fact long enough to weigh something on the wire, number {i}")
        await until(lambda: _total(stack, user, {}, 13), "the graph")
        whole = [n.id for n in (await stack.everything(user, limit=1000))[0]]
        monkeypatch.setattr(pages, "MAX_PAGE_BYTES", 3_000)
        first = await stack.page(user, limit=1000)
        assert 1 <= len(first.nodes) < 13 and first.next_cursor is not None and first.total == 13
        assert len(first.model_dump_json()) <= 3_000 or len(first.nodes) == 1
        cut = [n.id for n in (await stack.everything(user, limit=1000))[0]]
        assert cut == whole

    stack.run(case())


def _envelope(user: str, payload: dict[str, Any]) -> Any:
    from contracts.envelope import QueryEnvelope

    return QueryEnvelope(type="graph_page", tenant=user, payload=payload)


def test_a_backlog_reaches_the_graph_in_batches(stack: Stack) -> None:
    """Saves made while the graph's consumer is stopped wait on its durable consumer; on restart
    they are fetched together and projected a batch a transaction (with the same edges)."""
    user = tenant()
    batches: list[int] = []
    projection = stack.graph.projection
    bulk = projection.apply_batch

    async def counted(batch: Any, checkpoint: str) -> int:
        batches.append(len(batch))
        return await bulk(batch, checkpoint)

    async def case() -> None:
        stack.graph_stop.set()
        await asyncio.gather(*stack.graph_tasks, return_exceptions=True)
        ids = [await stack.save(user, f"backlog fact {i}", category=Category.SKILL, memory_key=f"skill.go_{i}x")
               for i in range(6)]
        projection.apply_batch = counted  # type: ignore[method-assign]
        try:
            stack.graph_stop = asyncio.Event()
            stack.graph_tasks = await graph_main.start(stack.graph, stack.graph_stop)
            await until(lambda: _total(stack, user, {}, 7), "the backlog in the graph")
        finally:
            projection.apply_batch = bulk  # type: ignore[method-assign]
        assert batches and max(batches) > 1, batches
        edges = edge_set((await stack.everything(user))[1], EdgeType.EXTENDS)
        assert edges == {(ids[i], ids[i - 1], "extends") for i in range(1, 6)}

    stack.run(case())


# replay (last: it stops the graph's consumer) --------------------------------------------------------
async def _digest(stack: Stack) -> str:
    """Every node in order (without its order number) and every edge but 'similar' (a replay queues
    those to be asked again), over every tenant of the namespace."""
    s = stack.graph_settings.graph_schema
    nodes = await stack.graph.pool.fetch(
        f"SELECT tenant, id, type, project, label, forgotten, category, memory_key, family, log_id, importance,"
        f" version, expires_at, created_at, updated_at, detail FROM {s}.nodes ORDER BY tenant, seq")
    edges = await stack.graph.pool.fetch(
        f"SELECT tenant, source, target, type FROM {s}.edges WHERE type <> 'similar' ORDER BY tenant, source, target, type")
    text = json.dumps([[list(r.values()) for r in nodes], [list(r.values()) for r in edges]], default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def test_replay_rebuilds_the_same_graph(stack: Stack) -> None:
    user = tenant()

    async def case() -> None:
        for i in range(5):
            await stack.save(user, f"replayed fact {i}", category=Category.SKILL, memory_key=f"skill.chess_{i}x")
        await until(lambda: _total(stack, user, {}, 6), "the graph")
        stack.graph_stop.set()
        await asyncio.gather(*stack.graph_tasks, return_exceptions=True)
        before = await _digest(stack)
        progress: list[tuple[int, int]] = []

        async def replayed() -> Any:
            try:
                return await graph_main.replay(stack.graph_settings, lambda d, t: progress.append((d, t)))
            except graph_main.runner.ServiceRunning:  # the stopped consumer's last pull has not expired yet
                return None

        report = await until(replayed, "the replay", timeout=60)
        assert report.events > 0 and progress[-1][0] == progress[-1][1] == report.events
        assert await _digest(stack) == before
        count = await stack.graph.pool.fetchval(f"SELECT count(*) FROM {stack.graph_settings.graph_schema}.nodes")
        assert count > 0

    stack.run(case())


# the bulk projection (replay, backlog) is the event-by-event projection ------------------------------
def _event_sequence(seed: int, n: int = 400) -> list[tuple[Any, int]]:
    """A random event log touching every edge rule: two tenants, three projects, key families that
    collide, memories from daily logs, updates (moving a memory to another family too), forgets,
    saves after a forget, extraction results, and logs deleted by retention."""
    import random
    from datetime import UTC, datetime, timedelta

    from contracts.daily_logs import (
        DAILY_LOG_AGGREGATE,
        EXTRACTION_RESULT_AGGREGATE,
        DailyLogState,
        ExtractionResultState,
        ProcessingStatus,
    )
    from contracts.envelope import EventEnvelope
    from contracts.graph import MEMORY_AGGREGATE
    from contracts.memory import MemoryState, MemoryStatus

    rng = random.Random(seed)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    memories: dict[str, MemoryState] = {}
    logs: dict[str, DailyLogState] = {}
    out: list[tuple[Any, int]] = []

    def emit(aggregate: str, state: Any) -> None:
        out.append((EventEnvelope(event_id=uuid.uuid4(), type="x", occurred_at=state.updated_at, tenant=state.tenant,
                                  aggregate=aggregate, aggregate_id=str(state.id), correlation_id="t", causation_id="t",
                                  data=state.model_dump(mode="json")), len(out) + 1))

    for i in range(n):
        at = start + timedelta(minutes=i)
        roll = rng.random()
        live = [m for m in memories.values() if m.status is MemoryStatus.ACTIVE]
        if roll < 0.08 or not logs:
            log = DailyLogState(id=uuid.uuid4(), tenant=rng.choice("ab"), project=rng.choice(["p", "q", "r"]),
                                log_date=at.date(), topics=[f"topic{i}"], processing_status=ProcessingStatus.PROCESSED,
                                processed_at=at, created_at=at, updated_at=at)
            logs[str(log.id)] = log
            emit(DAILY_LOG_AGGREGATE, log)
        elif roll < 0.11:
            log = rng.choice(list(logs.values()))
            log = log.model_copy(update={"deleted": rng.random() < 0.5, "version": log.version + 1, "updated_at": at})
            logs[str(log.id)] = log
            emit(DAILY_LOG_AGGREGATE, log)
        elif roll < 0.15 and live:
            log = rng.choice(list(logs.values()))
            picked = rng.sample(live, min(len(live), rng.randint(1, 3)))
            emit(EXTRACTION_RESULT_AGGREGATE, ExtractionResultState(
                id=uuid.uuid4(), tenant=log.tenant, project=log.project, log_id=log.id, task_id=f"t{i}",
                memory_ids=[m.id for m in picked if m.tenant == log.tenant], created_at=at, updated_at=at))
        elif roll < 0.30 and memories:
            m = rng.choice(list(memories.values()))
            change: dict[str, Any] = {"version": m.version + 1, "updated_at": at}
            if m.status is MemoryStatus.FORGOTTEN:
                change["status"] = MemoryStatus.ACTIVE  # saved again
            elif rng.random() < 0.5:
                change |= {"status": MemoryStatus.FORGOTTEN, "forget_reason": "test"}
            else:
                change["content"] = m.content + " (updated)"
                if rng.random() < 0.3:
                    change["memory_key"] = f"preference.{rng.choice(['pet', 'food', 'car'])}_{i}"
            m = m.model_copy(update=change)
            memories[str(m.id)] = m
            emit(MEMORY_AGGREGATE, m)
        else:
            tenant_ = rng.choice("ab")
            log = rng.choice([x for x in logs.values() if x.tenant == tenant_] or [None])
            from_log = log is not None and rng.random() < 0.4
            keyed = rng.random() < 0.6
            m = MemoryState(
                id=uuid.uuid4(), tenant=tenant_, project=log.project if from_log and log else rng.choice(["p", "q"]),
                content=f"fact {i}", created_at=at, updated_at=at,
                category=Category.PREFERENCE if keyed else None,
                memory_key=f"preference.{rng.choice(['pet', 'food', 'car'])}_{i}" if keyed else None,
                provenance=Provenance(log_id=log.id, task_id="t", turns=[0]) if from_log and log else None,
            )
            memories[str(m.id)] = m
            emit(MEMORY_AGGREGATE, m)
    return out


async def _read_model(pool: Any, s: str) -> list[Any]:
    """Everything the projection writes, order numbers included."""
    tables = [
        f"SELECT seq, tenant, id, type, project, label, forgotten, category, memory_key, family, log_id, importance,"
        f" version, expires_at, created_at, updated_at, detail FROM {s}.nodes ORDER BY tenant, seq",
        f"SELECT tenant, source, type, target, weight FROM {s}.edges ORDER BY tenant, source, type, target",
        f"SELECT tenant, project, type, n FROM {s}.node_counts ORDER BY tenant, project, type",
        f"SELECT tenant, key, last_seq FROM {s}.applied ORDER BY tenant, key",
        f"SELECT tenant, memory_id, project, version, attempts FROM {s}.similar_queue ORDER BY tenant, memory_id",
        f"SELECT projection, last_seq FROM {s}.checkpoints ORDER BY projection",
        f"SELECT last_value FROM {s}.node_order",
    ]
    return [[list(r.values()) for r in await pool.fetch(q)] for q in tables]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_batch_in_bulk_builds_the_graph_event_by_event_builds(infra: Any, seed: int) -> None:
    """The same random event log projected one event a transaction, and in batches of random
    sizes (1 to 150, so a rule often reads what an earlier batch wrote): the same nodes with the
    same order numbers, the same edges, counts, applied sequences, similar queue and checkpoint."""
    import random

    from kit.pg import create_pool
    from services.graph.adapters.pg_bulk import PgGraphBulkStore
    from services.graph.application.projection import GraphProjection

    events = _event_sequence(seed)
    pool = await create_pool(infra.database_url, max_size=2)
    schemas = ["gone_" + uuid.uuid4().hex[:8], "gbulk_" + uuid.uuid4().hex[:8]]
    try:
        stores = [PgGraphBulkStore(pool, s) for s in schemas]
        for store in stores:
            await store.migrate(owner="test")
        one, bulk = (GraphProjection(store) for store in stores)
        for event, seq in events:
            await one.project(event, seq, "graph-test")
        rng, i, written = random.Random(seed), 0, 0
        while i < len(events):
            size = rng.choice([1, 2, 7, 40, 150])
            written += await bulk.apply_batch(events[i : i + size], "graph-test")
            i += size
        assert written == len(events)
        assert await bulk.apply_batch(events[:50], "graph-test") == 0  # again: nothing new
        first, second = [await _read_model(pool, s) for s in schemas]
        for name, a, b in zip(("nodes", "edges", "counts", "applied", "queue", "checkpoints", "order"), first, second,
                              strict=True):
            assert a == b, name
        kinds = {row[2] for row in first[1]}
        assert kinds >= {"in_project", "derives", "extends", "updates"}, kinds  # the log exercised every rule
    finally:
        for s in schemas:
            await pool.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        await pool.close()
