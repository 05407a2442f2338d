"""A graph page's edges cost what the page holds, not what the graph holds — also on tables that
have no statistics yet (a read model rebuilt in bulk, before anything analyzed it): the page's one
statement reaches the edges and their other ends through index lookups only, and a project node on
the page is not made to walk its members' in_project edges. Checked on the plans Postgres ran
(EXPLAIN ANALYZE: scan types and rows read), never on timings; and the page is the same as the
page's nodes and their edges asked separately."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from contracts.graph import NodeType
from kit.pg import create_pool
from services.graph.adapters.pg_store import PgGraphStore
from services.graph.application.ports import PageFilter

pytestmark = pytest.mark.integration
MEMORIES = 20_000
PROJECTS = 4
PAGE = 200


@pytest.fixture
async def store(infra) -> AsyncIterator[PgGraphStore]:  # type: ignore[no-untyped-def]
    pool = await create_pool(infra.database_url, max_size=2)
    schema = "gplan_" + uuid.uuid4().hex[:8]
    store = PgGraphStore(pool, schema)
    try:
        await store.migrate(owner=schema)
        await seed(pool, schema)
        yield store
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await pool.close()


async def seed(pool: asyncpg.Pool, s: str) -> None:
    """One tenant: PROJECTS project nodes first, then MEMORIES memories spread over them, each with
    its in_project edge, an extends edge to the memory before it and a similar edge to one 7 back
    (ids m<i>, order number = i + PROJECTS). No ANALYZE: the tables keep no statistics."""
    await pool.execute(
        f"INSERT INTO {s}.nodes (tenant, id, seq, type, project, label, created_at, updated_at)"
        f" SELECT 't', 'project:p' || i, i + 1, 'project', 'p' || i, 'p' || i, now(), now()"
        f" FROM generate_series(0, {PROJECTS - 1}) i")
    await pool.execute(
        f"INSERT INTO {s}.nodes (tenant, id, seq, type, project, label, detail, created_at, updated_at)"
        f" SELECT 't', 'm' || i, i + {PROJECTS}, 'memory', 'p' || (i % {PROJECTS}), 'memory number ' || i,"
        f" '{{\"source\": \"test\"}}', now(), now() FROM generate_series(1, {MEMORIES}) i")
    await pool.execute(
        f"INSERT INTO {s}.edges (tenant, source, target, type, weight)"
        f" SELECT 't', 'm' || i, 'project:p' || (i % {PROJECTS}), 'in_project', NULL::float8 FROM generate_series(1, {MEMORIES}) i"
        f" UNION ALL SELECT 't', 'm' || i, 'm' || (i - 1), 'extends', NULL::float8 FROM generate_series(2, {MEMORIES}) i"
        f" UNION ALL SELECT 't', 'm' || i, 'm' || (i - 7), 'similar', 0.7 FROM generate_series(8, {MEMORIES}) i")


class Explained:
    """A pool that runs each statement under EXPLAIN (ANALYZE, FORMAT JSON) and keeps the plans;
    the statement's own rows come from running it once more."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.plans: list[dict[str, Any]] = []

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        plan = await self.pool.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
        self.plans.append(json.loads(plan)[0]["Plan"])
        return await self.pool.fetch(sql, *args)  # type: ignore[no-any-return]


def nodes_of(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes_of(child)


def edge_reads(plan: dict[str, Any]) -> tuple[set[str], int]:
    """How the plan reached the edges table: the scan types, and the rows it read there."""
    scans = [n for n in nodes_of(plan) if n.get("Relation Name") == "edges"]
    return ({n["Node Type"] for n in scans},
            sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) + int(n.get("Rows Removed by Filter", 0)) for n in scans))


@pytest.mark.parametrize("project", [None, "p1"])
async def test_a_page_reads_its_edges_by_index_whatever_the_statistics(store: PgGraphStore, project: str | None) -> None:
    explained = Explained(store.pool)
    plain = PgGraphStore(explained, store.s)  # type: ignore[arg-type]
    f = PageFilter(tenant="t", project=project, node_types=None, since=None, until=None)
    after, seen = 0, set[str]()
    for number in range(3):  # the first page holds the project nodes (hubs of 5,000 members each)
        rows, edges = await plain.page_with_edges(f, after, PAGE)
        kinds, read = edge_reads(explained.plans[-1])
        assert kinds <= {"Index Scan", "Index Only Scan"}, kinds
        # a page of 200 nodes has ~3 edges a node: what is read stays near that, never the graph's 60,000
        assert 0 < read <= 10 * PAGE, (number, read)

        page = rows[:PAGE]
        assert len(rows) == PAGE + 1 and [seq for seq, _ in page] == sorted(seq for seq, _ in page)
        assert rows == await store.page(f, after, PAGE + 1)
        assert edges == await store.page_edges(f, [row.id for _, row in page], page[-1][0])
        on_page = {row.id for _, row in page}
        assert all({e.source, e.target} <= seen | on_page and {e.source, e.target} & on_page for e in edges)
        seen |= on_page
        after = page[-1][0]


async def test_a_memory_type_filter_keeps_project_edges_out(store: PgGraphStore) -> None:
    f = PageFilter(tenant="t", project=None, node_types=(NodeType.MEMORY,), since=None, until=None)
    rows, edges = await store.page_with_edges(f, 0, PAGE)
    assert {row.type for _, row in rows} == {NodeType.MEMORY}
    assert edges and all(e.type.value != "in_project" for e in edges)
    ids = {row.id for _, row in rows[:PAGE]}
    assert all(e.source in ids and e.target in ids for e in edges)
