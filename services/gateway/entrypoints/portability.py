"""Portability over REST and MCP: bulk saves (``POST /v1/memories/bulk``, tool ``save_memories``),
the export stream (``GET /v1/export``) and the purge of a user (``POST /v1/users/{user_id}/purge``,
admin). Thin declarations over :mod:`services.gateway.portability`."""


from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from contracts.memory import PROJECT_PATTERN
from contracts.portability import (
    MAX_BULK_FORGET,
    MAX_BULK_MEMORIES,
    ForgetMemoriesRequest,
    ForgetMemoriesResult,
    PurgeReport,
    SaveMemoriesRequest,
    SaveMemoriesResult,
)
from kit.bus import validation_reply
from services.gateway.entrypoints import mcp_extras
from services.gateway.operations import Operations
from services.gateway.portability import PortabilityOperations
from services.gateway.toolsets import ASSISTANT

_MEDIA = {"jsonl": "application/x-ndjson", "markdown": "text/markdown; charset=utf-8"}
_BULK_DESCRIPTION = (
    f"Up to {MAX_BULK_MEMORIES:,} memories in one request, counted as one request by the rate limiter. Each item is "
    "what `POST /v1/memories` takes, plus an optional `idempotency_key`; an item without one gets "
    "`<Idempotency-Key>:<index>`, so a retried request saves nothing twice. Answered item by item: `saved`, "
    "`duplicate` (already held) or `error` with the code, message and field (`memories[i].<field>`)."
)
_FORGET_DESCRIPTION = (
    f"Forget up to {MAX_BULK_FORGET} memories by id, with one reason (`memory:write`). Each is forgotten as "
    "`POST /v1/memories/forget` would (its history remains); a memory outside the caller's project, or another "
    "user's, is `not_found`. Answered id by id: `forgotten`, `already_forgotten` or `error` with the code, message "
    "and field (`memory_ids[i]`). With an `Idempotency-Key`, each id gets `<key>:<index>`: a retried request "
    "answers the same and forgets nothing twice."
)
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)


def portability_routes(router: APIRouter, ops: Operations, Caller: Any, IdempotencyKey: Any, call: Any) -> None:
    """Bulk saves, export, purge."""
    port = PortabilityOperations(ops.client)

    @router.post("/memories/bulk", response_model=SaveMemoriesResult, summary="Save many memories",
                 description=_BULK_DESCRIPTION,
                 responses={413: {"description": "The body is larger than the gateway accepts"}})
    async def save_bulk(body: SaveMemoriesRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        return await call(port.save_memories(who, body, key=idempotency_key, source="api"))

    @router.post("/memories/forget/bulk", response_model=ForgetMemoriesResult, summary="Forget many memories",
                 description=_FORGET_DESCRIPTION)
    async def forget_bulk(body: ForgetMemoriesRequest, who: Caller, idempotency_key: IdempotencyKey = None) -> Any:
        return await call(port.forget_memories(who, body, key=idempotency_key))

    @router.get("/export", summary="Export everything of the caller", response_class=StreamingResponse,
                responses={200: {"content": {"application/x-ndjson": {}, "text/markdown": {}},
                                 "description": "the export, streamed line by line"}})
    async def export(
        who: Caller,
        project: Annotated[str | None, Query(pattern=PROJECT_PATTERN)] = None,
        format: Literal["jsonl", "markdown"] = "jsonl",
    ) -> Any:
        """Every memory with all its versions (context, provenance, project), shared memories, daily logs and
        extraction results, streamed: JSONL (a header line, then one record per line; what `engram import`
        reads back) or Markdown. Needs `memory:read`; a restricted credential exports its project only."""

        async def start() -> Any:
            return port.export(who, project=project, fmt=format)

        lines = await call(start())
        return StreamingResponse(lines, media_type=_MEDIA[format])

    @router.post("/users/{user_id}/purge", response_model=PurgeReport, tags=["admin"], summary="Purge a user")
    async def purge(user_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,128}$")], who: Caller) -> Any:
        """Remove everything of a user for good: their events, every service's rows (memories, logs, keys,
        OAuth grants, …), vectors and caches. Needs an unrestricted `admin` key. Idempotent."""
        return await call(port.purge_user(who, user_id))


def portability_tools(ops: Operations, tool_errors: Callable[..., Any], caller: Callable[[], Any]) -> list[
        tuple[Callable[..., Awaitable[Any]], str, str, ToolAnnotations, str]]:
    """The ``save_memories`` tool (assistant toolset)."""
    port = PortabilityOperations(ops.client)

    @tool_errors
    async def save_memories(
        memories: Annotated[
            list[dict[str, Any]],
            Field(min_length=1, max_length=MAX_BULK_MEMORIES,
                  description=f"1-{MAX_BULK_MEMORIES} memories, each an object: content (required), and optionally "
                  "context, category, memory_key, importance (1-5), confidence (0-1), source, idempotency_key"),
        ],
        containerTag: Annotated[str | None, Field(default=None, pattern=PROJECT_PATTERN,
                                                  description="Project of the items (default project if omitted).")] = None,
    ) -> dict[str, Any]:
        """Save many memories in one call (e.g. importing an old conversation or a list of facts).

        Use this instead of calling `memory` once per fact when there are several to save: one call counts as one
        request against the rate limit. Each item is saved as `memory`/`save_memory` would save it; the answer
        lists every item in order as saved, duplicate (already known) or error (with the field at fault).
        """
        try:
            req = SaveMemoriesRequest(memories=memories, project=containerTag)
        except ValidationError as exc:
            raise ToolError(str(validation_reply(exc).error)) from exc
        result = await port.save_memories(caller(), req, source="mcp", progress=mcp_extras.progress)
        await mcp_extras.notify("info", f"save_memories: {result.saved} saved, {result.duplicates} duplicate"
                                f"{'' if result.duplicates == 1 else 's'}, {result.errors} error"
                                f"{'' if result.errors == 1 else 's'}")
        return {"success": result.errors == 0, **result.model_dump(mode="json")}

    return [(save_memories, "save_memories", "Save many memories", WRITE, ASSISTANT)]
