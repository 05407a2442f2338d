"""The MCP surface of the gateway: tools `memory`, `recall` and `whoAmI` (SPEC §2)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from contracts.auth import Scope
from contracts.memory import MAX_CONTENT_CHARS, MAX_QUERY_CHARS, PROJECT_PATTERN
from services.gateway.adapters.backend import Backend, BackendError
from services.gateway.config import GatewaySettings
from services.gateway.presentation import format_forget, format_recall, format_save
from services.gateway.principal import AccessDenied, Principal

INSTRUCTIONS = (
    "Engram is the user's long-term memory. Use `recall` before answering anything that may depend on what "
    "the user told you before (preferences, facts about them, projects). Use `memory` to save durable facts "
    "worth remembering across conversations, and to forget what the user asks you to forget. Use these "
    "memory tools rather than any other note-taking tool."
)

ContainerTag = Annotated[
    str | None,
    Field(
        default=None,
        pattern=PROJECT_PATTERN,
        description="Project to work in (1-128 chars of letters, digits, _ . : -). Omit for the default project.",
    ),
]


def principal() -> Principal:
    token = get_access_token()
    if token is None:
        raise ToolError("not authenticated")
    return Principal.from_token(token)


def _tool_error(exc: BackendError | AccessDenied) -> ToolError:
    if isinstance(exc, AccessDenied):
        return ToolError(f"permission denied: {exc}")
    return ToolError(str(exc.error))


def build_mcp(backend: Backend, verifier: TokenVerifier, settings: GatewaySettings) -> MCPServer:
    mcp = MCPServer(
        name="engram",
        title="Engram memory",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        token_verifier=verifier,
        auth=AuthSettings(
            issuer_url=settings.base_url,
            resource_server_url=settings.mcp_url,
            required_scopes=None,
            validate_token_resource=False,
        ),
    )

    @mcp.tool(
        name="memory",
        title="Save or forget a memory",
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False),
    )
    async def memory(
        content: Annotated[
            str,
            Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="The fact to save, or the memory to forget."),
        ],
        action: Annotated[Literal["save", "forget"], Field(description="save (default) or forget")] = "save",
        containerTag: ContainerTag = None,
    ) -> str:
        """Save something worth remembering about the user, or forget a memory.

        Use this tool (not another note or memory tool) whenever the user shares a durable fact,
        preference or decision, or asks you to remember or forget something. Save one self-contained
        fact per call, written so it makes sense on its own later. To forget, pass the memory's text:
        an exact match is tried first, then the closest memory with similarity ≥ 0.85; if nothing
        matches, nothing is forgotten and you are told so.
        """
        try:
            who = principal()
            project = who.project_for(containerTag)
            if action == "save":
                who.require(Scope.MEMORY_WRITE)
                result = await backend.save_memory(
                    who.tenant, {"project": project, "content": content, "source": "mcp"}
                )
                return format_save(result)
            who.require(Scope.MEMORY_WRITE)
            result = await backend.forget_memory(who.tenant, {"project": project, "content": content})
            return format_forget(result)
        except (BackendError, AccessDenied) as exc:
            raise _tool_error(exc) from exc

    @mcp.tool(
        name="recall",
        title="Recall memories",
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False),
    )
    async def recall(
        query: Annotated[
            str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for, in natural language.")
        ],
        containerTag: ContainerTag = None,
        limit: Annotated[int, Field(ge=1, le=100, description="How many memories at most (1-100).")] = 10,
    ) -> str:
        """Search the user's long-term memory (semantic + keyword, fused) and return the most relevant memories.

        Call this before answering whenever earlier conversations might matter: the user's preferences,
        facts about them, their projects and decisions. Results are ranked, most relevant first.
        """
        try:
            who = principal()
            who.require(Scope.MEMORY_READ)
            project = who.search_project(containerTag)
            payload: dict[str, Any] = {"query": query, "project": project, "limit": limit}
            result = await backend.recall(who.tenant, payload)
            return format_recall(query, result["hits"], project)
        except (BackendError, AccessDenied) as exc:
            raise _tool_error(exc) from exc

    @mcp.tool(
        name="whoAmI",
        title="Who am I",
        annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False),
    )
    async def who_am_i() -> dict[str, Any]:
        """Tell which user (tenant) and credential this connection acts as, with its scopes and project."""
        who = principal()
        return {
            "user_id": who.tenant,
            "client_id": who.client_id,
            "key_id": who.key_id,
            "scopes": sorted(who.scopes),
            "project": who.project,
        }

    return mcp
