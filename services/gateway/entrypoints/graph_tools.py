"""The memory graph over MCP, as an MCP App (the `io.modelcontextprotocol/ui` extension).

- ``memory-graph`` (read-only, offered to the model): the first page of the user's memory graph.
  Its ``_meta.ui.resourceUri`` (and the legacy flat ``ui/resourceUri``) names the app,
  ``ui://engram/memory-graph.html``; a host that shows apps renders it with the tool's
  ``structuredContent`` (nodes, edges, counts, next cursor), a host that does not reads the short
  text summary.
- ``fetch-graph-data`` (``_meta.ui.visibility: ["app"]``: hosts keep it out of the model's tool
  list): the app pages through the graph with it, ``{nodes, edges, next_cursor, total}``.
- the resource ``ui://engram/memory-graph.html`` (``text/html;profile=mcp-app``): one
  self-contained HTML file shipped in the package (``services/gateway/graph_app``), no CDN.

A pinned connection (``X-Engram-Project``) gets both tools without their project parameter; a
credential restricted to a project sees only that project (the operation resolves it).
"""

import functools
import inspect
from collections import Counter
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Annotated, Any

from mcp.server.apps import Apps
from mcp.server.extension import Extension
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from contracts.graph import (
    DEFAULT_GRAPH_PAGE,
    MAX_CURSOR_CHARS,
    MAX_GRAPH_PAGE,
    GraphEdge,
    GraphNode,
    GraphPage,
    GraphPageQuery,
    NodeType,
)
from contracts.memory import PROJECT_PATTERN
from services.gateway.catalogue import operation
from services.gateway.entrypoints.mcp_tools import READ, caller, contract, tool_errors
from services.gateway.operations import Caller, Operations
from services.gateway.toolsets import ASSISTANT

APP_URI = "ui://engram/memory-graph.html"
LEGACY_URI_KEY = "ui/resourceUri"  # the flat key of the Apps drafts, still read by some hosts
MAX_PAGE_NUMBER = 100  # `page` walks the keyset from the start: at most 100 pages deep

Limit = Annotated[int, Field(ge=1, le=MAX_GRAPH_PAGE, description=f"Nodes per page (1-{MAX_GRAPH_PAGE}, default "
                                                                  f"{DEFAULT_GRAPH_PAGE}).")]
Cursor = Annotated[str | None, Field(default=None, min_length=1, max_length=MAX_CURSOR_CHARS,
                                     description="next_cursor of the previous page; omit for the first page.")]
ProjectParam = Annotated[str | None, Field(default=None, pattern=PROJECT_PATTERN,
                                           description="Only this project (omit: every project you can see).")]
GraphContainerTag = Annotated[str | None, Field(default=None, pattern=PROJECT_PATTERN,
                                                description="Only this project (1-128 chars of letters, digits, "
                                                            "_ . : -). Omit for every project you can see.")]
AsOfParam = Annotated[str | None, Field(default=None, max_length=40, description=(
    "The graph as it stood at a past moment (ISO 8601 date or date-time, UTC unless an offset is given): memories "
    "said by then and not yet superseded, logs and projects made by then; a node changed since says so "
    "(detail.changed_since). Pass the same as_of with every page's cursor."))]
PageNumber = Annotated[int | None, Field(default=None, ge=1, le=MAX_PAGE_NUMBER,
                                         description="1-based page number, for clients without cursors (walks the "
                                                     "pages from the start; prefer cursor).")]


def _inlined(schema: Any, resolve: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """The same JSON schema with every ``$ref`` replaced by its definition and each nullable type
    (``anyOf: [{type: T}, {type: null}]``) written as ``type: [T, null]``: the same constraints,
    which a JSON-schema validator checks in under half the time — MCP clients validate every result
    against the tool's ``outputSchema`` (the ``mcp`` SDK's client with ``jsonschema``: ~50 ms of CPU
    for a 200-node page as pydantic writes the schema, more than the rest of the call)."""
    if isinstance(schema, list):
        return [_inlined(item, resolve) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = resolve({"$ref": schema["$ref"]})
        return _inlined({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, resolve)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "anyOf" and all(isinstance(v, dict) and set(v) == {"type"} for v in value):
            out["type"] = [v["type"] for v in value]
        elif key == "properties":
            out[key] = {name: _inlined(sub, resolve) for name, sub in value.items()}
        else:
            out[key] = _inlined(value, resolve)
    return out


class _FlatSchema(BaseModel):
    """A tool result model whose JSON schema is written without references (see :func:`_inlined`)."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return _inlined(handler.resolve_ref_schema(handler(core_schema)), handler.resolve_ref_schema)  # type: ignore[no-any-return]


class GraphCounts(BaseModel):
    """What one page holds, by kind."""

    nodes: int
    edges: int
    by_type: dict[str, int] = Field(description="nodes per type: memory, log, project")
    by_state: dict[str, int] = Field(description="nodes per state: active, new, expiring, forgotten")
    edges_by_type: dict[str, int]


class GraphView(_FlatSchema):
    """The structured content of ``memory-graph``: the first page and what it holds."""

    nodes: list[GraphNode]
    edges: list[GraphEdge]
    next_cursor: str | None
    total: int = Field(description="nodes matching the filters, over all pages")
    counts: GraphCounts
    project: str | None = Field(description="the project shown (None: every project the caller can see)")


class GraphData(_FlatSchema):
    """The structured content of ``fetch-graph-data``: one page."""

    nodes: list[GraphNode]
    edges: list[GraphEdge]
    next_cursor: str | None
    total: int

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The page's schema with each node and edge held to its required keys: the app asks a page
        at a time and a client checks every one against this schema (the ``mcp`` SDK's client:
        ~25 ms of CPU for 200 nodes and their edges with every field described, ~3 ms so), while
        the fields are those of ``memory-graph``'s schema, which describes them in full."""
        schema = super().__get_pydantic_json_schema__(core_schema, handler)
        for key, what in (("nodes", "a node"), ("edges", "an edge")):
            items = schema["properties"][key]["items"]
            schema["properties"][key]["items"] = {
                "type": "object", "required": items["required"],
                "description": f"{what}, with the fields of memory-graph's outputSchema"}
        return schema


def app_html() -> str:
    """The app: one HTML file shipped as package data."""
    return _APP_HTML


_APP_HTML = resources.files("services.gateway.graph_app").joinpath("memory-graph.html").read_text(encoding="utf-8")


def counts_of(page: GraphPage) -> GraphCounts:
    return GraphCounts(
        nodes=len(page.nodes), edges=len(page.edges),
        by_type=dict(Counter(n.type.value for n in page.nodes)),
        by_state=dict(Counter(n.state.value for n in page.nodes)),
        edges_by_type=dict(Counter(e.type.value for e in page.edges)),
    )


def summary(page: GraphPage, project: str | None) -> str:
    """The text a client that cannot show apps reads (and the model sees)."""
    scope = f"project '{project}'" if project else "all projects"
    kinds = Counter(n.type for n in page.nodes)
    parts = [f"{kinds[NodeType.MEMORY]} memories", f"{kinds[NodeType.LOG]} daily logs",
             f"{kinds[NodeType.PROJECT]} projects"]
    lines = [f"Memory graph of {scope}: {len(page.nodes)} of {page.total} nodes ({', '.join(parts)}) and "
             f"{len(page.edges)} edges on this page."]
    edges = Counter(e.type.value for e in page.edges)
    if edges:
        lines.append("Edges: " + ", ".join(f"{n} {t}" for t, n in sorted(edges.items())) + ".")
    recent = [n for n in page.nodes if n.type is NodeType.MEMORY][-5:]
    if recent:
        lines.append("Some memories: " + "; ".join(f"“{_short(n.label)}”" for n in recent) + ".")
    lines.append("An MCP Apps host shows it as an interactive graph" +
                 (" (more pages with the app's fetch-graph-data)." if page.next_cursor else "."))
    return "\n".join(lines)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def page_of(ops: Operations, c: Caller, *, project: str | None, cursor: str | None, limit: int,
                  page: int | None = None, as_of: str | None = None) -> GraphPage:
    """One page by cursor, or by 1-based page number (walking the keyset from the start)."""
    if page is not None and cursor is not None:
        raise ToolError("give cursor or page, not both (page: a 1-based page number for clients without cursors)")
    for _ in range((page or 1) - 1):
        skipped = await ops.run(c, operation(GraphPageQuery),
                                contract(GraphPageQuery, cursor=cursor, limit=limit, as_of=as_of), project=project)
        if skipped.next_cursor is None:
            return GraphPage(nodes=[], edges=[], next_cursor=None, total=skipped.total)
        cursor = skipped.next_cursor
    return await ops.run(c, operation(GraphPageQuery), contract(GraphPageQuery, cursor=cursor, limit=limit,
                                                                as_of=as_of), project=project)


def graph_tools(ops: Operations) -> tuple[Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]]:
    """The two tool functions (``memory-graph``, ``fetch-graph-data``); docstrings are the model's manual."""

    @tool_errors
    async def memory_graph(
        containerTag: GraphContainerTag = None,
        limit: Limit = DEFAULT_GRAPH_PAGE,
        as_of: AsOfParam = None,
    ) -> Annotated[CallToolResult, GraphView]:
        """Show the user's memory graph: memories, the daily logs they came from and projects, linked by
        version chains (updates), related facts (extends), extraction (derives) and similarity.

        Opens an interactive graph in hosts that support MCP Apps (and summarises the first page in text
        otherwise). Use it when the user wants to see, browse or check what is remembered about them.
        """
        c = caller()
        project = c.search_project(containerTag)
        page = await page_of(ops, c, project=containerTag, cursor=None, limit=limit, as_of=as_of)
        view = GraphView(nodes=page.nodes, edges=page.edges, next_cursor=page.next_cursor, total=page.total,
                         counts=counts_of(page), project=project)
        return CallToolResult(content=[TextContent(type="text", text=summary(page, project))],
                              structured_content=view.model_dump(mode="json"))

    @tool_errors
    async def fetch_graph_data(
        cursor: Cursor = None,
        limit: Limit = DEFAULT_GRAPH_PAGE,
        project: ProjectParam = None,
        page: PageNumber = None,
        as_of: AsOfParam = None,
    ) -> Annotated[CallToolResult, GraphData]:
        """One page of the memory graph for the graph app: {nodes, edges, next_cursor, total}. Pass the previous
        page's next_cursor for the next page (every node comes exactly once across pages)."""
        found = await page_of(ops, caller(), project=project, cursor=cursor, limit=limit, page=page, as_of=as_of)
        data = GraphData(nodes=found.nodes, edges=found.edges, next_cursor=found.next_cursor, total=found.total)
        text = (f"{len(found.nodes)} nodes and {len(found.edges)} edges of {found.total}"
                + ("; more with next_cursor." if found.next_cursor else "; last page."))
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=data.model_dump(mode="json"))

    return memory_graph, fetch_graph_data


def _without(fn: Callable[..., Awaitable[Any]], parameter: str) -> Callable[..., Awaitable[Any]]:
    """The same tool with one parameter removed from its schema (a pinned connection's project applies)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    async def pinned(**kwargs: Any) -> Any:
        return await fn(**{parameter: None}, **kwargs)

    pinned.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != parameter]
    )
    pinned.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != parameter}
    return pinned


def graph_app(ops: Operations, *, pinned: bool = False,
              toolsets: frozenset[str] = frozenset({ASSISTANT})) -> list[Extension]:
    """The MCP Apps extension carrying the graph tools and the app (part of the ``assistant`` toolset);
    pass it to the MCP server's ``extensions``."""
    if ASSISTANT not in toolsets:
        return []
    memory_graph, fetch_graph_data = graph_tools(ops)
    if pinned:
        memory_graph, fetch_graph_data = _without(memory_graph, "containerTag"), _without(fetch_graph_data, "project")
    apps = Apps()
    apps.tool(resource_uri=APP_URI, meta={LEGACY_URI_KEY: APP_URI}, name="memory-graph",
              title="Memory graph", annotations=READ)(memory_graph)
    app_only = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
    apps.tool(resource_uri=APP_URI, visibility=["app"], meta={LEGACY_URI_KEY: APP_URI}, name="fetch-graph-data",
              title="Graph data (for the graph app)", annotations=app_only)(fetch_graph_data)
    apps.add_html_resource(APP_URI, app_html(), name="memory-graph", title="Memory graph",
                           description="Engram's interactive memory graph (force layout on canvas).",
                           prefers_border=True)
    return [apps]
