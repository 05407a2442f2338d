"""The graph's read model in Postgres (schema ``graph`` by default).

Every projection transaction takes one transaction-scoped advisory lock first, and a node's order
number is drawn from the sequence only under it: so order numbers are committed in the order they
were drawn, and a reader that has seen number n has already seen every committed node below n —
what makes "every node exactly once across pages" hold while memories are being written (and with
several graph replicas projecting).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from contracts.graph import EdgeType, GraphEdge, NodeType, SimilarMemoryList
from kit.command_log import OutcomeRecord, insert_outcome
from kit.pg import migrate
from services.graph.application.ports import PageFilter, SimilarTask
from services.graph.domain.model import NodeRow, project_row
from services.graph.domain.similar import offer

MIGRATIONS = Path(__file__).parent / "migrations"
_NODE_COLUMNS = ("seq, tenant, id, type, project, label, forgotten, category, memory_key, family, log_id, importance, "
                 "version, expires_at, created_at, updated_at, detail")


def _row(record: asyncpg.Record) -> NodeRow:
    return NodeRow(
        tenant=record["tenant"], id=record["id"], type=NodeType(record["type"]), label=record["label"],
        project=record["project"], created_at=record["created_at"], updated_at=record["updated_at"],
        forgotten=record["forgotten"], category=record["category"], memory_key=record["memory_key"],
        family=record["family"], log_id=record["log_id"], importance=record["importance"],
        version=record["version"], expires_at=record["expires_at"], detail=json.loads(record["detail"]),
    )


def _filter_sql(alias: str, f: PageFilter, args: list[Any]) -> str:
    """The page's filters on one aliased node (arguments appended to ``args``)."""
    args.append(f.tenant)
    parts = [f"{alias}.tenant = ${len(args)}"]
    if f.project is not None:
        args.append(f.project)
        parts.append(f"{alias}.project = ${len(args)}")
    if f.node_types:
        args.append([t.value for t in f.node_types])
        parts.append(f"{alias}.type = ANY(${len(args)}::text[])")
    if f.since is not None:
        args.append(f.since)
        parts.append(f"{alias}.updated_at >= ${len(args)}")
    if f.until is not None:
        args.append(f.until)
        parts.append(f"{alias}.updated_at < ${len(args)}")
    if f.as_of is not None:  # said by then (a memory extracted later from an older log: its log's day) ...
        args.append(f.as_of)
        at = f"${len(args)}"
        parts.append(f"LEAST({alias}.created_at, COALESCE(({alias}.detail->>'valid_from')::timestamptz,"
                     f" {alias}.created_at)) <= {at}")
        # ... not superseded then, and not forgotten (at any moment: forgetting is the user's wish)
        parts.append(f"(({alias}.detail->>'valid_until') IS NULL OR ({alias}.detail->>'valid_until')::timestamptz > {at})")
        parts.append(f"NOT {alias}.forgotten")
    return " AND ".join(parts)


def queue_similar_sql(s: str) -> str:
    """Queue (tenant, memory_id, project, version) for its neighbours, unless a newer version waits."""
    return (f"INSERT INTO {s}.similar_queue (tenant, memory_id, project, version) VALUES ($1, $2, $3, $4)"
            f" ON CONFLICT (tenant, memory_id) DO UPDATE SET project = EXCLUDED.project, version = EXCLUDED.version,"
            f" attempts = 0, next_at = now(), queued_at = now() WHERE {s}.similar_queue.version < EXCLUDED.version")


#: a page's edges in the order clients get them: by the later of their two ends, then type
_EDGE_ORDER = "greatest(s_seq, t_seq), type, s_seq, t_seq"


def _edges_sql(schema: str, f: PageFilter, args: list[Any]) -> str:
    """The edges of a page, as a query over the CTEs ``page`` (id, seq, type of the page's nodes)
    and ``bounds`` (first, last: the page's smallest and largest order numbers): each edge with one
    end on the page and the other on it or an earlier page (within the filters), with the order
    numbers of its source and target (``s_seq``, ``t_seq``). Arguments are appended to ``args``.

    Every step is an index lookup per page node or per edge, whatever the planner knows of the
    tables (a read model rebuilt in bulk has no statistics until it is analyzed, and a join planned
    without them read every edge of the tenant): a page node's edges through the edges' primary key
    (as source) and ``edges_target`` (as target), and each edge's other end by primary key (in a
    ``LIMIT 1`` subquery, so the filters, checked after, cannot steer it to another index). An edge
    with both ends on the page is taken from its source only (the target side wants the other end
    on an earlier page), so none comes twice. An ``in_project`` edge is found from its member only:
    a project's node is always older than its members (created first, in the member's
    transaction), so the edge belongs to the member's page — and a project on a page is not the
    target of its thousands of members' edges to walk."""
    tenant = f"${len(args) + 1}"  # the filters' first argument
    other = _filter_sql("o", f, args)
    args.append([t.value for t in EdgeType if t is not EdgeType.IN_PROJECT])
    into = f"${len(args)}::text[]"
    return (
        f"SELECT x.source, x.target, x.type, x.weight, p.seq AS s_seq, o.seq AS t_seq FROM page p CROSS JOIN bounds"
        f" CROSS JOIN LATERAL (SELECT source, target, type, weight FROM {schema}.edges"
        f"  WHERE tenant = {tenant} AND source = p.id OFFSET 0) x"
        f" CROSS JOIN LATERAL (SELECT * FROM {schema}.nodes WHERE tenant = {tenant} AND id = x.target LIMIT 1) o"
        f" WHERE o.seq <= bounds.last AND {other}"
        f" UNION ALL"
        f" SELECT x.source, x.target, x.type, x.weight, o.seq AS s_seq, p.seq AS t_seq FROM page p CROSS JOIN bounds"
        f" CROSS JOIN LATERAL (SELECT source, target, type, weight FROM {schema}.edges"
        f"  WHERE tenant = {tenant} AND target = p.id AND type = ANY({into}) OFFSET 0) x"
        f" CROSS JOIN LATERAL (SELECT * FROM {schema}.nodes WHERE tenant = {tenant} AND id = x.source LIMIT 1) o"
        f" WHERE p.type <> 'project' AND o.seq < bounds.first AND {other}"
    )


class PgGraphTx:
    def __init__(self, conn: asyncpg.Connection, schema: str) -> None:
        self.c = conn
        self.s = schema

    async def advance_checkpoint(self, projection: str, seq: int) -> None:
        await self.c.execute(
            f"INSERT INTO {self.s}.checkpoints (projection, last_seq) VALUES ($1, $2) ON CONFLICT (projection) "
            f"DO UPDATE SET last_seq = GREATEST({self.s}.checkpoints.last_seq, $2), updated_at = now()",
            projection, seq,
        )

    async def record_outcome(self, outcome: OutcomeRecord) -> None:
        """Record a command's outcome in this transaction (kit's command log, in the graph's schema,
        where its purge command's outcomes live too)."""
        await self.c.execute(insert_outcome(self.s), *outcome.args())

    async def lock(self, tenant: str, key: str) -> int | None:
        # one statement: the row is created or locked (DO UPDATE takes the row lock), its sequence returned
        seq = await self.c.fetchval(
            f"INSERT INTO {self.s}.applied AS a (tenant, key) VALUES ($1, $2) ON CONFLICT (tenant, key)"
            f" DO UPDATE SET last_seq = a.last_seq RETURNING a.last_seq", tenant, key,
        )
        return int(seq) or None

    async def mark_applied(self, tenant: str, key: str, seq: int) -> None:
        await self.c.execute(f"UPDATE {self.s}.applied SET last_seq = $3 WHERE tenant = $1 AND key = $2",
                             tenant, key, seq)

    async def upsert_node(self, row: NodeRow, seq: int) -> tuple[int, NodeRow | None]:
        before = await self.c.fetchrow(f"SELECT {_NODE_COLUMNS} FROM {self.s}.nodes WHERE tenant = $1 AND id = $2",
                                       row.tenant, row.id)
        values = (row.tenant, row.id, row.type.value, row.project, row.label, row.forgotten, row.category,
                  row.memory_key, row.family, row.log_id, row.importance, row.version, row.expires_at,
                  row.created_at, row.updated_at, json.dumps(row.detail))
        if before is None:
            order = await self.c.fetchval(
                f"WITH ins AS (INSERT INTO {self.s}.nodes (seq, tenant, id, type, project, label, forgotten, category,"
                f" memory_key, family, log_id, importance, version, expires_at, created_at, updated_at, detail) VALUES"
                f" (nextval('{self.s}.node_order'), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,"
                f" $16::jsonb) RETURNING seq), cnt AS ({self._count_sql('$1', '$4', '$3')})"
                f" SELECT seq FROM ins", *values,
            )
            return int(order), None
        await self.c.execute(
            f"UPDATE {self.s}.nodes SET type = $3, project = $4, label = $5, forgotten = $6, category = $7,"
            f" memory_key = $8, family = $9, log_id = $10, importance = $11, version = $12, expires_at = $13,"
            f" created_at = $14, updated_at = $15, detail = $16::jsonb WHERE tenant = $1 AND id = $2", *values,
        )
        return int(before["seq"]), _row(before)

    async def _count(self, tenant: str, project: str, type: str, delta: int) -> None:
        await self.c.execute(
            f"INSERT INTO {self.s}.node_counts (tenant, project, type, n) VALUES ($1, $2, $3, $4)"
            f" ON CONFLICT (tenant, project, type) DO UPDATE SET n = {self.s}.node_counts.n + $4",
            tenant, project, type, delta,
        )

    def _count_sql(self, tenant: str, project: str, type: str) -> str:
        """A data-modifying CTE adding one node to the counts when the CTE ``ins`` inserted one."""
        return (f"INSERT INTO {self.s}.node_counts AS c (tenant, project, type, n) SELECT {tenant}, {project}, {type}, 1"
                f" FROM ins ON CONFLICT (tenant, project, type) DO UPDATE SET n = c.n + 1")

    async def touch_project(self, tenant: str, project: str, at: datetime, seq: int) -> None:
        row = project_row(tenant, project, at)
        # one statement: create the node (and count it) if missing, else move its updated_at (the
        # CTEs share one snapshot: the UPDATE sees only a node that existed before)
        await self.c.execute(
            f"WITH ins AS (INSERT INTO {self.s}.nodes (seq, tenant, id, type, project, label, created_at, updated_at)"
            f"  SELECT nextval('{self.s}.node_order'), $1, $2, $3, $4, $4, $5, $5"
            f"  WHERE NOT EXISTS (SELECT 1 FROM {self.s}.nodes WHERE tenant = $1 AND id = $2) RETURNING seq),"
            f" cnt AS ({self._count_sql('$1', '$4', '$3')}),"
            f" upd AS (UPDATE {self.s}.nodes SET updated_at = $5 WHERE tenant = $1 AND id = $2 AND updated_at < $5)"
            f" SELECT 1", tenant, row.id, NodeType.PROJECT.value, project, at,
        )

    async def delete_node(self, tenant: str, node_id: str) -> None:
        await self.c.execute(f"DELETE FROM {self.s}.edges WHERE tenant = $1 AND (source = $2 OR target = $2)",
                             tenant, node_id)
        gone = await self.c.fetchrow(f"DELETE FROM {self.s}.nodes WHERE tenant = $1 AND id = $2 RETURNING project, type",
                                     tenant, node_id)
        if gone is not None:
            await self._count(tenant, gone["project"], gone["type"], -1)

    async def set_edges(self, tenant: str, source: str, type: EdgeType, targets: Sequence[str]) -> None:
        # one statement: the edges to other targets go, the missing ones come (disjoint rows)
        await self.c.execute(
            f"WITH del AS (DELETE FROM {self.s}.edges WHERE tenant = $1 AND source = $2 AND type = $3"
            f"  AND NOT target = ANY($4::text[]))"
            f" INSERT INTO {self.s}.edges (tenant, source, target, type) SELECT $1, $2, t, $3 FROM unnest($4::text[]) t"
            f" ON CONFLICT (tenant, source, type, target) DO NOTHING", tenant, source, type.value, list(targets),
        )

    async def add_edges(self, tenant: str, edges: Sequence[GraphEdge]) -> None:
        if not edges:
            return
        await self.c.executemany(
            f"INSERT INTO {self.s}.edges (tenant, source, target, type, weight) VALUES ($1, $2, $3, $4, $5)"
            f" ON CONFLICT (tenant, source, type, target) DO UPDATE SET weight = EXCLUDED.weight",
            [(tenant, e.source, e.target, e.type.value, e.weight) for e in edges],
        )

    async def drop_edges_touching(self, tenant: str, node_id: str, type: EdgeType) -> None:
        await self.c.execute(
            f"DELETE FROM {self.s}.edges WHERE tenant = $1 AND type = $3 AND (source = $2 OR target = $2)",
            tenant, node_id, type.value,
        )

    async def drop_edges_into(self, tenant: str, target: str, type: EdgeType) -> None:
        await self.c.execute(f"DELETE FROM {self.s}.edges WHERE tenant = $1 AND target = $2 AND type = $3",
                             tenant, target, type.value)

    async def previous_in_family(self, tenant: str, project: str, family: str, before: int) -> str | None:
        return await self.c.fetchval(  # type: ignore[no-any-return]
            f"SELECT id FROM {self.s}.nodes WHERE tenant = $1 AND project = $2 AND family = $3 AND seq < $4"
            f" ORDER BY seq DESC LIMIT 1", tenant, project, family, before,
        )

    async def previous_from_log(self, tenant: str, log_id: str, before: int) -> str | None:
        return await self.c.fetchval(  # type: ignore[no-any-return]
            f"SELECT id FROM {self.s}.nodes WHERE tenant = $1 AND log_id = $2 AND seq < $3 ORDER BY seq DESC LIMIT 1",
            tenant, log_id, before,
        )

    async def next_in_family(self, tenant: str, project: str, family: str, after: int) -> str | None:
        return await self.c.fetchval(  # type: ignore[no-any-return]
            f"SELECT id FROM {self.s}.nodes WHERE tenant = $1 AND project = $2 AND family = $3 AND seq > $4"
            f" ORDER BY seq LIMIT 1", tenant, project, family, after,
        )

    async def forgotten_without_successor(self, tenant: str, project: str, family: str, before: int) -> list[str]:
        rows = await self.c.fetch(
            f"SELECT n.id FROM {self.s}.nodes n WHERE n.tenant = $1 AND n.project = $2 AND n.family = $3"
            f" AND n.seq < $4 AND n.forgotten AND NOT EXISTS (SELECT 1 FROM {self.s}.edges e WHERE e.tenant = $1"
            f" AND e.target = n.id AND e.type = 'updates') ORDER BY n.seq", tenant, project, family, before,
        )
        return [r["id"] for r in rows]

    async def queue_similar(self, task: SimilarTask) -> None:
        await self.c.execute(queue_similar_sql(self.s), task.tenant, task.memory_id, task.project, task.version)

    async def unqueue_similar(self, tenant: str, memory_id: str) -> None:
        await self.c.execute(f"DELETE FROM {self.s}.similar_queue WHERE tenant = $1 AND memory_id = $2",
                             tenant, memory_id)


class PgGraphStore:
    def __init__(self, pool: asyncpg.Pool, schema: str = "graph") -> None:
        self.pool = pool
        self.s = schema

    async def migrate(self, owner: str) -> list[str]:
        return await migrate(self.pool, self.s, MIGRATIONS, owner=owner)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PgGraphTx]:
        async with self.pool.acquire() as conn, conn.transaction():
            # order numbers are drawn and committed one transaction at a time (see the module's doc)
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"engram-graph-order-{self.s}")
            yield PgGraphTx(conn, self.s)

    async def checkpoint(self, projection: str) -> int:
        return int(await self.pool.fetchval(
            f"SELECT coalesce(max(last_seq), 0) FROM {self.s}.checkpoints WHERE projection = $1", projection))

    async def applied(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        rows = await self.pool.fetch(
            f"SELECT a.tenant, a.key, a.last_seq FROM {self.s}.applied a JOIN unnest($1::text[], $2::text[]) AS k(tenant, key)"
            f" ON a.tenant = k.tenant AND a.key = k.key", [t for t, _ in keys], [k for _, k in keys],
        )
        return {(r["tenant"], r["key"]): int(r["last_seq"]) for r in rows}

    async def page(self, f: PageFilter, after: int, limit: int) -> list[tuple[int, NodeRow]]:
        args: list[Any] = []
        rows = await self.pool.fetch(self._nodes_sql(f, after, limit, args), *args)
        return [(int(r["seq"]), _row(r)) for r in rows]

    def _nodes_sql(self, f: PageFilter, after: int, limit: int, args: list[Any]) -> str:
        """The nodes after ``after`` within the filters, ``limit`` of them in order (through the
        index on (tenant, seq), or (tenant, project, seq) with a project)."""
        where = _filter_sql("n", f, args)
        args += [after, limit]
        return (f"SELECT {_NODE_COLUMNS} FROM {self.s}.nodes n WHERE {where} AND n.seq > ${len(args) - 1}"
                f" ORDER BY n.seq LIMIT ${len(args)}")

    async def analyze(self) -> None:
        """Statistics of the read model for the planner: after a bulk load (a replay) the tables have
        none until autovacuum gets to them (never, where it is off), and the page query, planned
        without them, sorts every node after the cursor instead of reading 200 in index order."""
        await self.pool.execute(f"ANALYZE {self.s}.nodes, {self.s}.edges, {self.s}.node_counts")

    async def count(self, f: PageFilter) -> int:
        if f.since is None and f.until is None and f.as_of is None:  # the kept counts (exact: written with the nodes)
            args: list[Any] = [f.tenant]
            where = "tenant = $1"
            if f.project is not None:
                args.append(f.project)
                where += " AND project = $2"
            if f.node_types:
                args.append([t.value for t in f.node_types])
                where += f" AND type = ANY(${len(args)}::text[])"
            return int(await self.pool.fetchval(
                f"SELECT coalesce(sum(n), 0) FROM {self.s}.node_counts WHERE {where}", *args))
        args = []
        where = _filter_sql("n", f, args)
        return int(await self.pool.fetchval(f"SELECT count(*) FROM {self.s}.nodes n WHERE {where}", *args))

    async def page_edges(self, f: PageFilter, ids: Sequence[str], last: int) -> list[GraphEdge]:
        """Edges with one end among ``ids`` (this page) and the other on this page or an earlier one
        (order number ≤ ``last``, within the filters)."""
        args: list[Any] = [list(ids), last]
        edges = _edges_sql(self.s, f, args)
        rows = await self.pool.fetch(
            f"WITH page AS MATERIALIZED (SELECT n.id, n.seq, n.type FROM unnest($1::text[]) AS i(id) CROSS JOIN LATERAL"
            f"  (SELECT id, seq, type FROM {self.s}.nodes WHERE tenant = $3 AND id = i.id LIMIT 1) n),"
            f" bounds AS (SELECT min(seq) AS first, $2::bigint AS last FROM page), e AS ({edges})"
            f" SELECT source, target, type, weight FROM e ORDER BY {_EDGE_ORDER}", *args,
        )
        return [GraphEdge(source=r["source"], target=r["target"], type=EdgeType(r["type"]), weight=r["weight"])
                for r in rows]

    async def page_with_edges(self, f: PageFilter, after: int, limit: int) -> tuple[list[tuple[int, NodeRow]], list[GraphEdge]]:
        """One statement: the nodes after ``after`` in order (``limit`` + 1 of them at most: the
        extra one says a next page exists) and the edges of the first ``limit`` (as
        :meth:`page_edges` finds them), which come as arrays on the first node's row."""
        args: list[Any] = [limit]
        nodes = self._nodes_sql(f, after, limit + 1, args)
        edges = _edges_sql(self.s, f, args)
        rows = await self.pool.fetch(
            f"WITH pg AS MATERIALIZED ({nodes}),"
            f" page AS MATERIALIZED (SELECT id, seq, type FROM pg ORDER BY seq LIMIT $1),"
            f" bounds AS (SELECT min(seq) AS first, max(seq) AS last FROM page), e AS ({edges}),"
            f" ea AS MATERIALIZED (SELECT array_agg(source ORDER BY {_EDGE_ORDER}) AS e_source,"
            f"  array_agg(target ORDER BY {_EDGE_ORDER}) AS e_target, array_agg(type ORDER BY {_EDGE_ORDER}) AS e_type,"
            f"  array_agg(weight ORDER BY {_EDGE_ORDER}) AS e_weight FROM e)"
            f" SELECT pg.*, ea.* FROM pg LEFT JOIN bounds ON pg.seq = bounds.first LEFT JOIN ea ON bounds.first IS NOT NULL"
            f" ORDER BY pg.seq", *args,
        )
        found: list[GraphEdge] = []
        if rows and rows[0]["e_source"] is not None:
            r = rows[0]
            found = [GraphEdge(source=src, target=dst, type=EdgeType(kind), weight=weight)
                     for src, dst, kind, weight in zip(r["e_source"], r["e_target"], r["e_type"], r["e_weight"], strict=True)]
        return [(int(r["seq"]), _row(r)) for r in rows], found

    # similar edges -------------------------------------------------------------------------
    async def related(self, tenant: str, project: str | None, ids: Sequence[str], limit: int,
                      min_score: float) -> dict[str, tuple[int | None, bool, list[tuple[str, float]]]]:
        """See :meth:`GraphStore.related`: index lookups only (nodes and edges by primary key, the
        queue by its key), whatever the graph's size."""
        args: list[Any] = [tenant, list(ids), min_score, limit]
        scope = ""
        if project is not None:
            args.append(project)
            scope = f" AND n.project = ${len(args)}"
        rows = await self.pool.fetch(
            f"SELECT n.id, n.version, NOT EXISTS (SELECT 1 FROM {self.s}.similar_queue q"
            f"  WHERE q.tenant = n.tenant AND q.memory_id = n.id) AS current, x.target, x.weight"
            f" FROM {self.s}.nodes n LEFT JOIN LATERAL (SELECT e.target, e.weight FROM {self.s}.edges e"
            f"  JOIN {self.s}.nodes t ON t.tenant = e.tenant AND t.id = e.target"
            f"  WHERE e.tenant = n.tenant AND e.source = n.id AND e.type = 'similar' AND e.weight >= $3"
            f"  AND NOT t.forgotten ORDER BY e.weight DESC, e.target LIMIT $4) x ON true"
            f" WHERE n.tenant = $1 AND n.id = ANY($2::text[]) AND n.type = 'memory' AND NOT n.forgotten{scope}",
            *args,
        )
        out: dict[str, tuple[int | None, bool, list[tuple[str, float]]]] = {}
        for r in rows:
            version, current, edges = out.setdefault(r["id"], (r["version"], r["current"], []))
            if r["target"] is not None:
                edges.append((r["target"], r["weight"]))
        return out

    async def claim_similar(self, limit: int) -> list[SimilarTask]:
        rows = await self.pool.fetch(
            f"UPDATE {self.s}.similar_queue q SET next_at = now() + interval '30 seconds' FROM ("
            f" SELECT tenant, memory_id FROM {self.s}.similar_queue WHERE next_at <= now() ORDER BY next_at"
            f" LIMIT $1 FOR UPDATE SKIP LOCKED) c WHERE q.tenant = c.tenant AND q.memory_id = c.memory_id"
            f" RETURNING q.tenant, q.memory_id, q.project, q.version, q.attempts", limit,
        )
        return [SimilarTask(r["tenant"], r["memory_id"], r["project"], r["version"], r["attempts"]) for r in rows]

    async def set_similar(self, task: SimilarTask, found: SimilarMemoryList | None, *, offer_limit: int = 0) -> bool:
        """See :meth:`GraphStore.set_similar`. Locks, in key order, the nodes of the memory, of its
        neighbours and of the sources of its stale incoming edges (a changed memory's), before any
        edge row: the projection locks a node before it unqueues it and drops its edges, so a forget
        projected meanwhile waits for this round or went first — never a lock cycle with it."""
        neighbours = {str(n.memory_id): n.score for n in (found.similar if found else [])
                      if str(n.memory_id) != task.memory_id}
        async with self.pool.acquire() as conn, conn.transaction():
            # a changed memory: the sources of the edges into it that an older version of it earned
            # (their weight is another text's), read before the locks so their nodes are locked too
            stale_sql = ("tenant = $1 AND target = $2 AND type = 'similar'"
                         " AND (target_version IS NULL OR target_version < $3)")
            stale = {r["source"] for r in await conn.fetch(
                f"SELECT source FROM {self.s}.edges WHERE {stale_sql}", task.tenant, task.memory_id, task.version,
            )} if found is not None and task.version > 1 else set()
            # the memories' nodes first, in key order, as the projection locks a node before its
            # queue row: a forget projected meanwhile waits for this round (and then drops its edges)
            # or went first (and the forgotten neighbour is passed over)
            locked = await conn.fetch(
                f"SELECT id, forgotten, version, project FROM {self.s}.nodes WHERE tenant = $1"
                f' AND id = ANY($2::text[]) ORDER BY id COLLATE "C" FOR UPDATE',
                task.tenant, sorted({task.memory_id, *neighbours, *stale}),
            )  # (its own node even alone: another round re-queuing it holds that before its queue row)
            live = {r["id"] for r in locked if not r["forgotten"]} if offer_limit else set()
            versions = {r["id"]: r["version"] for r in locked}
            version = await conn.fetchval(
                f"SELECT version FROM {self.s}.similar_queue WHERE tenant = $1 AND memory_id = $2 FOR UPDATE",
                task.tenant, task.memory_id,
            )
            if version != task.version:
                return False  # forgotten since (unqueued), or a newer version waits for its own round
            await conn.execute(f"DELETE FROM {self.s}.edges WHERE tenant = $1 AND source = $2 AND type = 'similar'",
                               task.tenant, task.memory_id)
            upsert = (f"INSERT INTO {self.s}.edges (tenant, source, target, type, weight, target_version) VALUES"
                      f" ($1, $2, $3, 'similar', $4, $5) ON CONFLICT (tenant, source, type, target)"
                      f" DO UPDATE SET weight = EXCLUDED.weight, target_version = EXCLUDED.target_version")
            if found is not None:
                await conn.executemany(upsert, [(task.tenant, task.memory_id, n, score, versions.get(n))
                                                for n, score in neighbours.items()])
            offered = [n for n in neighbours if n in live] if task.memory_id in live else []
            if offered:  # similarity is symmetric: each neighbour's list may take this memory (domain rule)
                lists: dict[str, dict[str, float | None]] = {n: {} for n in offered}
                for r in await conn.fetch(
                    f"SELECT source, target, weight FROM {self.s}.edges WHERE tenant = $1 AND source = ANY($2::text[])"
                    f" AND type = 'similar'", task.tenant, offered,
                ):
                    lists[r["source"]][r["target"]] = r["weight"]
                taken, dropped = [], []
                for n in offered:
                    decided = offer(lists[n], task.memory_id, neighbours[n], offer_limit)
                    if decided.take:
                        taken.append((task.tenant, n, task.memory_id, neighbours[n], task.version))
                    dropped += [(task.tenant, n, d) for d in decided.drop]
                if dropped:
                    await conn.executemany(f"DELETE FROM {self.s}.edges WHERE tenant = $1 AND source = $2"
                                           f" AND type = 'similar' AND target = $3", dropped)
                if taken:
                    await conn.executemany(upsert, taken)
            if stale:
                # the stale edges its new neighbours did not take again just above (re-weighed there)
                # go, from the locked sources only; each live source whose edge went is queued for a
                # round of its own: its own nearest neighbours may well still hold this memory's new
                # text (top-k is not symmetric). No cascade: that round only removes the edges into
                # its source weighed against an older version of it, and writes current versions.
                gone = {r["source"] for r in await conn.fetch(
                    f"DELETE FROM {self.s}.edges WHERE {stale_sql} AND source = ANY($4::text[]) RETURNING source",
                    task.tenant, task.memory_id, task.version, sorted(stale),
                )}
                requeue = [(task.tenant, r["id"], r["project"], r["version"]) for r in locked
                           if r["id"] in gone and not r["forgotten"]]
                if requeue:
                    await conn.executemany(queue_similar_sql(self.s), requeue)
            await conn.execute(f"DELETE FROM {self.s}.similar_queue WHERE tenant = $1 AND memory_id = $2",
                               task.tenant, task.memory_id)
            return True

    async def retry_similar(self, task: SimilarTask, delay_s: float, max_attempts: int) -> None:
        if task.attempts + 1 >= max_attempts:
            await self.set_similar(task, None)
            return
        await self.pool.execute(
            f"UPDATE {self.s}.similar_queue SET attempts = attempts + 1, next_at = now() + make_interval(secs => $4)"
            f" WHERE tenant = $1 AND memory_id = $2 AND version = $3",
            task.tenant, task.memory_id, task.version, delay_s,
        )

    async def similar_backlog(self) -> int:
        return int(await self.pool.fetchval(f"SELECT count(*) FROM {self.s}.similar_queue"))

    async def counts(self) -> dict[str, int]:
        """Nodes by type and edges by type, over every tenant (for `engram status` and the bench)."""
        nodes = await self.pool.fetch(f"SELECT type, count(*) AS n FROM {self.s}.nodes GROUP BY type")
        edges = await self.pool.fetch(f"SELECT type, count(*) AS n FROM {self.s}.edges GROUP BY type")
        return {**{f"nodes.{r['type']}": r["n"] for r in nodes}, **{f"edges.{r['type']}": r["n"] for r in edges}}

    async def drop_read_model(self) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"TRUNCATE {self.s}.nodes, {self.s}.edges, {self.s}.applied, {self.s}.checkpoints,"
                               f" {self.s}.similar_queue, {self.s}.node_counts")
            await conn.execute(f"ALTER SEQUENCE {self.s}.node_order RESTART WITH 1")
