"""The MCP surface of the gateway (SPEC §2): the tools of both seeds, resources and a prompt.

Two servers are built from the same tool functions: one offers a `containerTag` parameter, the
other (used when the connection pins a project with `X-Engram-Project`) does not — the pin applies.
"""


import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from contracts.errors import ErrorCode
from contracts.memory import (
    MAX_CONTENT_CHARS,
    MAX_CONTEXT_CHARS,
    MAX_KEYWORD_CHARS,
    MAX_QUERY_CHARS,
    MAX_RECALL_LIMIT,
    MAX_STRUCTURED_CONTENT_CHARS,
    MAX_TITLE_CHARS,
    MEMORY_KEY_PATTERN,
    PROJECT_PATTERN,
    Category,
    ForgetMemory,
    GetMemoryByKey,
    GetProfile,
    GetSharedMemories,
    MemoryHistoryQuery,
    Recall,
    RecallMemory,
    SaveMemory,
    SaveSharedMemory,
    UpdateMemory,
)
from kit.bus import validation_reply
from kit.client import ServiceFailure
from services.gateway.config import GatewaySettings
from services.gateway.operations import Caller as OpCaller
from services.gateway.operations import Operations
from services.gateway.pin import pinned_project
from services.gateway.presentation import (
    format_forget,
    format_profile,
    format_projects,
    format_recall,
    format_save,
)
from services.gateway.principal import AccessDenied, Principal
from services.gateway.toolsets import ASSISTANT
from services.gateway.toolsets import DEFAULT as DEFAULT_TOOLSETS

M = TypeVar("M", bound=BaseModel)

INSTRUCTIONS = (
    "Engram is the user's long-term memory. Call `recall` before answering anything that may depend on what "
    "the user said in earlier conversations (preferences, facts about them, their projects). Save durable facts "
    "with `memory` (free text) or `save_memory` (a categorised fact with a memory_key), and forget on request. "
    "Use these memory tools rather than any other note-taking or memory tool."
)

ContainerTag = Annotated[
    str | None,
    Field(
        default=None,
        pattern=PROJECT_PATTERN,
        description="Project to work in (1-128 chars of letters, digits, _ . : -). Omit for the default project.",
    ),
]
Importance = Annotated[int, Field(ge=1, le=5, description="1 (trivia) to 5 (core fact); default 3")]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, description="0-1, how sure you are; default 0.8")]
Context = Annotated[
    str | None,
    Field(min_length=1, max_length=MAX_CONTEXT_CHARS,
          description="Optional: where the fact came from, e.g. the message it answers (≤ 2,000 chars). "
          "Helps recall find it later; not stored as its content."),
]
MemoryKey = Annotated[
    str,
    Field(pattern=MEMORY_KEY_PATTERN, max_length=80,
          description="namespace.topic, namespace bound to the category: profile, preference, personality, goal, "
                      "skill, relationship, emotion, style (e.g. preference.food)"),
]

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False)


def caller() -> OpCaller:
    """Who calls on this request (the verified token) and the connection's pin."""
    token = get_access_token()
    if token is None:
        raise ToolError("not authenticated")
    return OpCaller(Principal.from_token(token), pinned_project.get())


def contract(model: type[M], **fields: Any) -> M:
    """The tool's arguments as the operation's contract model; a rule it breaks (one the schema
    cannot express) is a tool error naming the field, as the service would name it."""
    try:
        return model.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise ToolError(str(validation_reply(exc).error)) from exc


def tool_errors(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Map refusals to tool errors the model can read."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except AccessDenied as exc:
            raise ToolError(f"permission denied: {exc}") from exc
        except ServiceFailure as exc:
            if exc.error.code is ErrorCode.ACCEPTED:  # queued while the service is down: not an error
                return exc.error.message if returns_text else {"success": False, "queued": True,
                                                                "message": exc.error.message}
            raise ToolError(str(exc.error)) from exc

    returns_text = fn.__annotations__.get("return") is str
    return wrapper


def without_container_tag(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """The same tool with the `containerTag` parameter removed from its schema (the pin applies)."""
    signature = inspect.signature(fn)
    if "containerTag" not in signature.parameters:
        return fn

    @functools.wraps(fn)
    async def pinned(**kwargs: Any) -> Any:
        return await fn(containerTag=None, **kwargs)

    pinned.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != "containerTag"]
    )
    pinned.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "containerTag"}
    return pinned


def _success(result: BaseModel) -> dict[str, Any]:
    return {"success": True, **result.model_dump(mode="json")}


def build_tools(ops: Operations) -> list[tuple[Callable[..., Awaitable[Any]], str, str, ToolAnnotations, str]]:
    """(function, name, title, annotations, toolset) for every tool; docstrings are the model's manual."""

    @tool_errors
    async def memory(
        content: Annotated[
            str, Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="The fact to save, or the memory to forget.")
        ],
        action: Annotated[Literal["save", "forget"], Field(description="save (default) or forget")] = "save",
        containerTag: ContainerTag = None,
        context: Context = None,
    ) -> str:
        """Save something worth remembering about the user, or forget a memory.

        Use this tool (not another note or memory tool) whenever the user shares a durable fact,
        preference or decision, or asks you to remember or forget something. Save one self-contained
        fact per call, written so it makes sense on its own later; when saving words as they were said,
        pass the message they answer as context. To forget, pass the memory's text:
        an exact match is tried first, then the closest memory with similarity ≥ 0.85; if nothing
        matches, nothing is forgotten and you are told so.
        """
        c = caller()
        if action == "save":
            cmd = contract(SaveMemory, content=content, source="mcp", context=context)
            return format_save(await ops.save_memory(c, cmd, project=containerTag))
        return format_forget(await ops.forget_memory(c, contract(ForgetMemory, content=content), project=containerTag))

    @tool_errors
    async def recall(
        query: Annotated[
            str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for, in natural language.")
        ],
        includeProfile: Annotated[bool, Field(description="Prepend the user's profile (default true).")] = True,
        containerTag: ContainerTag = None,
        limit: Annotated[int, Field(ge=1, le=MAX_RECALL_LIMIT, description="How many memories at most (1-100).")] = 10,
        rerank: Annotated[
            bool,
            Field(description="Re-read the best candidates together with the query for a more precise order "
                  "(slower: up to about a second). Use it when the first answer missed."),
        ] = False,
    ) -> str:
        """Search the user's long-term memory (semantic + keyword, fused) and return the most relevant memories.

        Call this before answering whenever earlier conversations might matter: the user's preferences,
        facts about them, their projects and decisions. With includeProfile (default) the user's stable
        profile and recent context come first. Results are ranked, most relevant first.
        """
        c = caller()
        found = await ops.recall(c, contract(Recall, query=query, project=containerTag, limit=limit, rerank=rerank,
                                             include_profile=includeProfile))
        project = c.search_project(containerTag)
        return format_recall(query, found.hits, project, found.profile if includeProfile else None)

    @tool_errors
    async def list_projects(
        refresh: Annotated[bool, Field(description="Accepted for compatibility: the list is always current.")] = False,
    ) -> str:
        """List the user's projects (containerTags) with how many memories each holds.

        A project used for the first time shows up at once.
        """
        c = caller()
        return format_projects(await ops.list_projects(c))

    @tool_errors
    async def who_am_i() -> dict[str, Any]:
        """Tell which user (tenant) and credential this connection acts as, with its scopes and project."""
        return (await ops.who_am_i(caller())).model_dump(mode="json")

    @tool_errors
    async def save_memory(
        category: Annotated[Category, Field(description="What kind of fact this is.")],
        content: Annotated[str, Field(min_length=1, max_length=MAX_STRUCTURED_CONTENT_CHARS, description="The fact (≤ 4,000 chars).")],
        importance: Importance = 3,
        confidence: Confidence = 0.8,
        source: Annotated[str, Field(min_length=1, max_length=64, description="Where it came from; default conversation")] = "conversation",
        memory_key: Annotated[MemoryKey | None, Field(description="namespace.topic; omitted = generated from the content")] = None,
        containerTag: ContainerTag = None,
        context: Context = None,
    ) -> dict[str, Any]:
        """Save a categorised long-term memory addressed by a memory_key.

        Saving an existing memory_key writes a new version of that memory (never a duplicate), so use a
        stable key per topic (e.g. preference.food) and save again when the fact changes. Look it up
        first with get_memory_by_key when unsure.
        """
        cmd = contract(SaveMemory, category=category, content=content, importance=importance, confidence=confidence,
                       source=source, memory_key=memory_key, context=context)
        return _success(await ops.save_memory(caller(), cmd, project=containerTag))

    @tool_errors
    async def get_memory_by_key(memory_key: MemoryKey, containerTag: ContainerTag = None) -> dict[str, Any]:
        """Find the memory stored under a memory_key: `{found, memory}`. Use it before saving or updating."""
        query = contract(GetMemoryByKey, memory_key=memory_key)
        return _success(await ops.get_memory_by_key(caller(), query, project=containerTag))

    @tool_errors
    async def recall_memory(
        category: Annotated[Category | None, Field(description="Only this category.")] = None,
        keyword: Annotated[str | None, Field(min_length=1, max_length=MAX_KEYWORD_CHARS, description="Substring to match in the content (any language).")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_RECALL_LIMIT, description="1-100, default 20")] = 20,
        containerTag: ContainerTag = None,
    ) -> dict[str, Any]:
        """List memories by category and/or keyword, most important first (a filter, not a semantic search)."""
        query = contract(RecallMemory, project=containerTag, category=category, keyword=keyword, limit=limit)
        return _success(await ops.recall_memory(caller(), query))

    @tool_errors
    async def update_memory(
        id: Annotated[UUID | None, Field(description="The memory's id (or give memory_key).")] = None,
        memory_key: Annotated[MemoryKey | None, Field(description="The memory's key (or give id).")] = None,
        category: Annotated[Category | None, Field(description="New category (must fit the key's namespace).")] = None,
        content: Annotated[str | None, Field(min_length=1, max_length=MAX_STRUCTURED_CONTENT_CHARS, description="New content.")] = None,
        importance: Annotated[int | None, Field(ge=1, le=5)] = None,
        confidence: Annotated[float | None, Field(ge=0.0, le=1.0)] = None,
        source: Annotated[str | None, Field(min_length=1, max_length=64)] = None,
        containerTag: ContainerTag = None,
        context: Context = None,
    ) -> dict[str, Any]:
        """Correct an existing memory (e.g. "likes cats" → "likes dogs"): writes a new version.

        Give exactly one of id or memory_key. The old version stays in the history with the time it
        stopped being true.
        """
        cmd = contract(UpdateMemory, id=id, memory_key=memory_key, category=category, content=content,
                       importance=importance, confidence=confidence, source=source, context=context)
        return _success(await ops.update_memory(caller(), cmd, project=containerTag))

    @tool_errors
    async def get_memory_history(
        memory_id: Annotated[UUID, Field(description="The memory's id.")],
    ) -> dict[str, Any]:
        """Every version of a memory from the event log, oldest first, each with when it stopped being true."""
        history = await ops.memory_history(caller(), MemoryHistoryQuery(memory_id=memory_id))
        return history.model_dump(mode="json")

    @tool_errors
    async def save_shared_memory(
        title: Annotated[str, Field(min_length=1, max_length=MAX_TITLE_CHARS, description="Short title of the shared experience.")],
        event: Annotated[str, Field(min_length=1, max_length=MAX_STRUCTURED_CONTENT_CHARS, description="What happened.")],
        importance: Importance = 3,
    ) -> dict[str, Any]:
        """Save a shared experience with the user. Saving the same title again updates it (idempotent)."""
        cmd = contract(SaveSharedMemory, title=title, event=event, importance=importance)
        return _success(await ops.save_shared_memory(caller(), cmd))

    @tool_errors
    async def get_shared_memories(
        title: Annotated[str | None, Field(min_length=1, max_length=MAX_TITLE_CHARS, description="Exact title.")] = None,
        keyword: Annotated[str | None, Field(min_length=1, max_length=MAX_KEYWORD_CHARS, description="Substring of title or event.")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_RECALL_LIMIT)] = 20,
    ) -> dict[str, Any]:
        """Find shared experiences by exact title or keyword, newest first."""
        query = contract(GetSharedMemories, title=title, keyword=keyword, limit=limit)
        return _success(await ops.get_shared_memories(caller(), query))

    return [
        (memory, "memory", "Save or forget a memory", DESTRUCTIVE, ASSISTANT),
        (recall, "recall", "Recall memories", READ, ASSISTANT),
        (list_projects, "listProjects", "List projects", READ, ASSISTANT),
        (who_am_i, "whoAmI", "Who am I", READ, ASSISTANT),
        (save_memory, "save_memory", "Save a categorised memory", WRITE, ASSISTANT),
        (get_memory_by_key, "get_memory_by_key", "Get a memory by key", READ, ASSISTANT),
        (recall_memory, "recall_memory", "List memories by category or keyword", READ, ASSISTANT),
        (update_memory, "update_memory", "Update a memory", WRITE, ASSISTANT),
        (get_memory_history, "get_memory_history", "A memory's history", READ, ASSISTANT),
        (save_shared_memory, "save_shared_memory", "Save a shared memory", WRITE, ASSISTANT),
        (get_shared_memories, "get_shared_memories", "Get shared memories", READ, ASSISTANT),
    ]


class EngramMCPServer(MCPServer):
    """The SDK's server, with a wrong prompt request answered as one: an unknown prompt or argument
    is -32602 invalid params naming it (the SDK turns both into -32603 "Internal server error")."""

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        prompt = next((p for p in await self.list_prompts() if p.name == name), None)
        if prompt is None:
            raise MCPError(INVALID_PARAMS, f"unknown prompt '{name}'")
        known = {a.name for a in prompt.arguments or []}
        unknown = sorted(set(arguments or {}) - known)
        if unknown:
            raise MCPError(INVALID_PARAMS, f"prompt '{name}' has no argument {', '.join(repr(u) for u in unknown)}"
                           f" (it takes {', '.join(sorted(known)) or 'none'})")
        return await super().get_prompt(name, arguments, context)


def build_mcp(
    ops: Operations, verifier: TokenVerifier, settings: GatewaySettings, *, pinned: bool = False,
    toolsets: frozenset[str] = DEFAULT_TOOLSETS,
) -> MCPServer:
    """One MCP server: the tools of ``toolsets`` (without ``containerTag`` when ``pinned``), the
    resources and the prompt."""
    mcp = EngramMCPServer(
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
    for fn, name, title, annotations, toolset in build_tools(ops):
        if toolset not in toolsets:
            continue
        mcp.add_tool(without_container_tag(fn) if pinned else fn, name=name, title=title, annotations=annotations)

    @mcp.resource("engram://profile", name="profile", title="User profile", mime_type="text/markdown")
    async def profile_resource() -> str:
        """The user's profile: stable facts and recent context (the pinned project, else all projects)."""
        try:
            return format_profile(await ops.profile(caller(), GetProfile()))
        except (AccessDenied, ServiceFailure) as exc:
            raise ToolError(str(exc)) from exc

    @mcp.resource("engram://projects", name="projects", title="Projects", mime_type="application/json")
    async def projects_resource() -> str:
        """The user's projects with their memory counts."""
        try:
            return (await ops.list_projects(caller())).model_dump_json()
        except (AccessDenied, ServiceFailure) as exc:
            raise ToolError(str(exc)) from exc

    @mcp.prompt(name="context", title="Memory context")
    async def context_prompt() -> str:
        """The user's profile, with the steer to save what is worth remembering."""
        profile = await ops.profile(caller(), GetProfile())
        return (
            format_profile(profile)
            + "\n\nWhile we talk, save anything worth remembering across conversations with the `memory` tool "
            "(or `save_memory` for a categorised fact), and `recall` before answering anything that may depend "
            "on what I told you before."
        )

    return mcp
