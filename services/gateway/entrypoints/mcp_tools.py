"""The MCP surface of the gateway: the tools of both source designs (seed 1 and seed 2, docs/design.md §3),
Engram's own, the resources and the prompt.

Two servers are built from the same tool functions: one offers a `containerTag` parameter, the
other (used when the connection pins a project with `X-Engram-Project`) does not — the pin applies.
"""


import asyncio
import contextvars
import copy
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from contracts.daily_logs import (
    MAX_LOG_FIELD_CHARS,
    TASK_ID_PATTERN,
    IsoDate,
    SaveDailyLog,
    Turn,
)
from contracts.errors import ErrorCode
from contracts.extraction_modes import GetExtractionModes
from contracts.memory import (
    MAX_CONTENT_CHARS,
    MAX_CONTEXT_CHARS,
    MAX_QUERY_CHARS,
    MAX_RECALL_LIMIT,
    MAX_STRUCTURED_CONTENT_CHARS,
    MEMORY_KEY_PATTERN,
    PROJECT_PATTERN,
    Category,
    ForgetMemory,
    GetProfile,
    Provenance,
    Recall,
    RecallMode,
    SaveMemory,
    UpdateMemory,
)
from kit.bus import validation_reply
from kit.client import ServiceFailure
from services.gateway.catalogue import DESTRUCTIVE, OPERATIONS, READ, WRITE, Operation, operation
from services.gateway.config import GatewaySettings
from services.gateway.entrypoints import mcp_extras
from services.gateway.entrypoints.portability import portability_tools
from services.gateway.operations import Caller as OpCaller
from services.gateway.operations import Operations
from services.gateway.pin import pinned_project
from services.gateway.presentation import (
    format_extraction_modes,
    format_forget,
    format_profile,
    format_projects,
    format_recall,
    format_save,
)
from services.gateway.principal import AccessDenied, Principal, session_client
from services.gateway.project_cache import describe_projects
from services.gateway.toolsets import ASSISTANT
from services.gateway.toolsets import DEFAULT as DEFAULT_TOOLSETS

M = TypeVar("M", bound=BaseModel)

INSTRUCTIONS = (
    "Engram is the user's long-term memory. Call `recall` before answering anything that may depend on what "
    "the user said in earlier conversations (preferences, facts about them, their projects). Save durable facts "
    "with `memory` (free text) or `save_memory` (a categorised fact with a memory_key), and forget on request. "
    "Use these memory tools rather than any other note-taking or memory tool."
)

CONTAINER_TAG_DESCRIPTION = "Project to work in (1-128 chars of letters, digits, _ . : -). Omit for the default project."
ContainerTag = Annotated[
    str | None,
    Field(default=None, pattern=PROJECT_PATTERN, description=CONTAINER_TAG_DESCRIPTION),
]
#: tools/list waits at most this long for the user's projects (else the description stays generic)
PROJECTS_FOR_DESCRIPTION_S = 1.0
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

LogText = Annotated[str | None, Field(min_length=1, max_length=MAX_LOG_FIELD_CHARS)]
LogId = Annotated[UUID, Field(description="The daily log's id (save_daily_log and get_unprocessed_logs give it).")]
TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN, description="The extraction run's id (1-128 of [A-Za-z0-9_.:-]).")]
ProvenanceParam = Annotated[
    Provenance | None,
    Field(description="For a fact extracted from a daily log: {log_id, task_id, turns: [indices of the log's turns "
          "it came from]}; shown with the memory in recall and history."),
]



def caller() -> OpCaller:
    """Who calls on this request (the verified token) and the connection's pin."""
    token = get_access_token()
    if token is None:
        raise ToolError("not authenticated")
    who = Principal.from_token(token)
    named = acting_for.get()
    return OpCaller(who.acting_for(named) if named is not None else who, pinned_project.get(), session_client.get())


#: the user a seed-2 call names (its ``user_id`` argument, docs/design.md §3), for this tool call
acting_for: contextvars.ContextVar[str | None] = contextvars.ContextVar("engram_acting_for", default=None)


def contract(model: type[M], *, keep_none: bool = False, **fields: Any) -> M:
    """The tool's arguments as the operation's contract model; a rule it breaks (one the schema
    cannot express) is a tool error naming the field, as the service would name it. Arguments left
    None take the contract's default, unless ``keep_none`` (a tool whose defaults are the contract's,
    where null can be meant: ``set_extraction_mode(mode=null)``)."""
    try:
        return model.model_validate(fields if keep_none else {k: v for k, v in fields.items() if v is not None})
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
                await mcp_extras.notify("warning", f"{fn.__name__}: {exc.error.message}")
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
    return memory_tools(ops) + daily_log_tools(ops) + portability_tools(ops, tool_errors, caller)


def memory_tools(ops: Operations) -> list[tuple[Callable[..., Awaitable[Any]], str, str, ToolAnnotations, str]]:
    """The memory tools of both source designs, the Supermemory-style and the AI-memory one (the assistant toolset;
    docs/design.md §3)."""

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
            return format_save(await ops.run(c, operation(SaveMemory), cmd, project=containerTag))
        forget = contract(ForgetMemory, content=content)
        return format_forget(await ops.run(c, operation(ForgetMemory), forget, project=containerTag))

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
        as_of: Annotated[
            str | None,
            Field(description="Answer as of a past moment (ISO 8601 date or date-time, UTC unless an offset is "
                  "given): only what was known then, each fact as it stood; facts replaced since are marked ⇒.",
                  max_length=40),
        ] = None,
        deep: Annotated[
            bool,
            Field(description="For questions that need several memories put together: rank up the memories about "
                  "the people the question names and, for a question joining two things ('X and Y', "
                  "'before/after X'), search each part on its own too (slower when there are parts)."),
        ] = False,
    ) -> str:
        """Search the user's long-term memory (semantic + keyword, fused) and return the most relevant memories.

        Call this before answering whenever earlier conversations might matter: the user's preferences,
        facts about them, their projects and decisions. With includeProfile (default) the user's stable
        profile and recent context come first. Results are ranked, most relevant first; a one-line legend
        explains the marks: the daily log a memory was extracted from, and under the best hits their
        relations (← the version it replaced, → a newer version, ~ a similar memory; at most 4 each).
        """
        c = caller()
        query_ = contract(Recall, query=query, limit=limit, rerank=rerank, include_profile=includeProfile, as_of=as_of,
                          mode=RecallMode.DEEP if deep else RecallMode.HYBRID)
        found = await ops.run(c, operation(Recall), query_, project=containerTag)
        project = c.search_project(containerTag)
        return format_recall(query, found.hits, project, found.profile if includeProfile else None)

    @tool_errors
    async def list_projects(
        refresh: Annotated[bool, Field(description="Read the list now instead of the copy cached for up to a "
                                             "minute (which the containerTag descriptions are written from).")] = False,
    ) -> str:
        """List the user's projects (containerTags) with how many memories each holds.

        The list is cached for up to a minute; a project this connection writes to for the first time
        shows up at once. Pass refresh: true for the current counts, or after another assistant created
        a project; the tools' containerTag descriptions are then updated from it too.
        """
        c = caller()
        listed = format_projects(await ops.list_projects(c, refresh=refresh))
        try:  # who learns from each project's daily logs (the extractor's; left out when it does not answer)
            modes = await asyncio.wait_for(ops.run(c, operation(GetExtractionModes), GetExtractionModes()),
                                           PROJECTS_FOR_DESCRIPTION_S)
        except (ServiceFailure, TimeoutError):
            return listed
        return listed + "\n" + format_extraction_modes(modes)

    @tool_errors
    async def who_am_i() -> dict[str, Any]:
        """Tell which user (tenant) and credential this connection acts as, with its scopes and project, and
        which assistant is calling (the MCP client's name and version from its initialize)."""
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
        provenance: ProvenanceParam = None,
    ) -> dict[str, Any]:
        """Save a categorised long-term memory addressed by a memory_key.

        Saving an existing memory_key writes a new version of that memory (never a duplicate), so use a
        stable key per topic (e.g. preference.food) and save again when the fact changes. Look it up
        first with get_memory_by_key when unsure.
        """
        cmd = contract(SaveMemory, category=category, content=content, importance=importance, confidence=confidence,
                       source=source, memory_key=memory_key, context=context, provenance=provenance)
        return _success(await ops.run(caller(), operation(SaveMemory), cmd, project=containerTag))

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
        provenance: ProvenanceParam = None,
    ) -> dict[str, Any]:
        """Correct an existing memory (e.g. "likes cats" → "likes dogs"): writes a new version.

        Give exactly one of id or memory_key. The old version stays in the history with the time it
        stopped being true.
        """
        cmd = contract(UpdateMemory, id=id, memory_key=memory_key, category=category, content=content,
                       importance=importance, confidence=confidence, source=source, context=context,
                       provenance=provenance)
        return _success(await ops.run(caller(), operation(UpdateMemory), cmd, project=containerTag))




    return [
        (memory, "memory", "Save or forget a memory", DESTRUCTIVE, ASSISTANT),
        (recall, "recall", "Recall memories", READ, ASSISTANT),
        (list_projects, "listProjects", "List projects", READ, ASSISTANT),
        (who_am_i, "whoAmI", "Who am I", READ, ASSISTANT),
        (save_memory, "save_memory", "Save a categorised memory", WRITE, ASSISTANT),
        (update_memory, "update_memory", "Update a memory", WRITE, ASSISTANT),
    ]


def daily_log_tools(ops: Operations) -> list[tuple[Callable[..., Awaitable[Any]], str, str, ToolAnnotations, str]]:
    """The daily-log and extraction tools (the AI-memory design's workflow, docs/design.md §4), as
    (function, name, title, annotations, toolset): ``save_daily_log`` written by hand (its turns may be
    plain text), the rest derived from the catalogue (``catalogue.py``)."""

    @tool_errors
    async def save_daily_log(
        log_date: Annotated[IsoDate | None, Field(description="YYYY-MM-DD; default today (UTC); at most tomorrow.")] = None,
        events: Annotated[LogText, Field(description="What happened today.")] = None,
        user_state: Annotated[LogText, Field(description="How the user was (health, energy, situation).")] = None,
        mood_changes: Annotated[LogText, Field(description="How the user's mood moved during the day.")] = None,
        topics: Annotated[list[str] | str | None, Field(description="Topics talked about: a list or comma-separated.")] = None,
        relationship_state: Annotated[LogText, Field(description="How the relationship with the user stands.")] = None,
        mood: Annotated[int | None, Field(ge=-2, le=2, description="The day's mood, -2 (very bad) to 2 (very good).")] = None,
        turns: Annotated[
            list[Turn] | str | None,
            Field(description="The day's conversation: [{speaker, text, at?}] or plain text with 'Speaker: words' lines."),
        ] = None,
        containerTag: ContainerTag = None,
    ) -> dict[str, Any]:
        """Save today's conversation log (one per day and project) so that durable memories are extracted from it.

        Call it at the end of a conversation day with what happened and, ideally, the turns themselves.
        Saving the same date again updates the fields given; changed content is extracted again. Turns
        left out of a new save are unlearnt: memories learnt only from them are forgotten (listed in
        `forgotten`). Answers with the log's id.
        """
        cmd = contract(SaveDailyLog, log_date=log_date, events=events, user_state=user_state, mood_changes=mood_changes,
                       topics=topics, relationship_state=relationship_state, mood=mood, turns=turns)
        return _success(await ops.run(caller(), operation(SaveDailyLog), cmd, project=containerTag))

    # the extraction workflow's operations (memory:maintenance, offered with X-Engram-Toolsets:
    # maintenance), each derived from its catalogue row
    return [(save_daily_log, "save_daily_log", "Save the day's log", WRITE, ASSISTANT),
            *((catalogue_tool(ops, op), op.name, op.title, op.annotations, op.toolset) for op in OPERATIONS if op.mcp)]


def catalogue_tool(ops: Operations, op: Operation) -> Callable[..., Awaitable[Any]]:
    """The MCP tool of a catalogue row, derived from its contract model: each field a parameter with
    the contract's own type, constraints and default (``project`` offered as ``containerTag``), the
    row's descriptions; the call builds the contract and runs it (``Operations.run``)."""
    parameters: list[inspect.Parameter] = []
    annotations: dict[str, Any] = {}
    for field_name, info in op.model.model_fields.items():
        if field_name == "project":
            name, annotation, default = "containerTag", ContainerTag, None
        else:
            name = field_name
            annotation = Annotated[(info.annotation, *info.metadata, Field(description=op.params.get(field_name)))]
            default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=annotation))
        annotations[name] = annotation
    parameters.sort(key=lambda p: p.default is not inspect.Parameter.empty)  # required ones first, as written

    async def run_operation(**arguments: Any) -> dict[str, Any]:
        project = arguments.pop("containerTag", None)
        message = contract(op.model, keep_none=True, **arguments)
        result = await ops.run(caller(), op, message, project=project)
        return result.model_dump(mode="json") if op.plain else _success(result)

    run_operation.__name__ = run_operation.__qualname__ = op.name
    run_operation.__doc__ = inspect.cleandoc(op.doc)
    run_operation.__signature__ = inspect.Signature(parameters, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    run_operation.__annotations__ = {**annotations, "return": dict[str, Any]}
    return tool_errors(run_operation)


class EngramMCPServer(MCPServer):
    """The SDK's server, with a wrong prompt request answered as one: an unknown prompt or argument
    is -32602 invalid params naming it (the SDK turns both into -32603 "Internal server error"), and
    the tools' ``containerTag`` described with the calling user's projects."""

    ops: Operations | None = None
    #: the tools of the toolsets this server does not offer (name → toolset), to say why one is unknown
    elsewhere: dict[str, str] = {}  # (each server's own, set in build_mcp)

    def _known_arguments(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments a tool declares, and ``user_id`` (checked by :meth:`call_tool`); an argument
        the tool does not have is refused naming it (it used to be dropped without a word, so that
        ``recall(..., as_of=…)`` answered as if ``as_of`` had not been sent). On a pinned connection
        ``containerTag`` is gone from every tool: naming the pinned project is accepted, another refused."""
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return arguments  # the SDK answers an unknown tool itself
        declared = set((tool.parameters or {}).get("properties", {}))
        unknown = sorted(k for k in arguments if k not in declared and k != "user_id")
        pin = pinned_project.get()
        if "containerTag" in unknown and pin is not None:
            if arguments["containerTag"] not in (None, pin):
                raise ToolError(f"permission_denied (containerTag): this connection is pinned to project '{pin}' "
                                f"(X-Engram-Project); it reaches no other project")
            unknown.remove("containerTag")
            arguments = {k: v for k, v in arguments.items() if k != "containerTag"}
        if unknown:
            known = ", ".join(sorted(declared)) or "none"
            raise ToolError(f"invalid_argument ({unknown[0]}): {name} has no argument "
                            f"{', '.join(repr(k) for k in unknown)}; its arguments are: {known}")
        return arguments

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """The call, with its request known to the tools' notifications (``mcp_extras``)."""
        try:
            request = context.request_context if context is not None else None
        except ValueError:  # a context outside a request
            request = None
        token = mcp_extras.current_request.set(request)
        try:
            return await self._call_tool(name, arguments, context)
        finally:
            mcp_extras.current_request.reset(token)

    async def _call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """A seed-2 ``user_id`` argument is checked, never silently dropped: the caller's own user
        is accepted; another user only by a credential with ``memory:act-as`` (a seed-2 backend
        serving many users), the call then running as that user; anyone else is refused naming
        ``user_id``, so that such a backend learns at its first call that it needs the scope."""
        await mcp_extras.warn_if_rate_low()
        if name in self.elsewhere and self._tool_manager.get_tool(name) is None:
            await mcp_extras.notify("warning", f"{name} is in the '{self.elsewhere[name]}' toolset, which this "
                                    f"connection did not ask for: connect with the header X-Engram-Toolsets: "
                                    f"{self.elsewhere[name]} (the key needs the matching scope)")
        if isinstance(arguments, dict):
            arguments = self._known_arguments(name, arguments)
        if not (isinstance(arguments, dict) and "user_id" in arguments):
            return await super().call_tool(name, arguments, context)
        arguments = dict(arguments)
        named = arguments.pop("user_id")
        if named is None:
            return await super().call_tool(name, arguments, context)
        if not isinstance(named, str):
            raise ToolError("invalid_argument (user_id): user_id must be a string")
        try:
            caller().who.acting_for(named)
        except AccessDenied as exc:
            raise ToolError(f"permission_denied (user_id): {exc}") from exc
        token = acting_for.set(named)
        try:
            return await super().call_tool(name, arguments, context)
        finally:
            acting_for.reset(token)

    async def list_tools(self) -> list[Any]:
        """The tools, each ``containerTag`` description naming the caller's current projects (this
        request's copy: the registered tools are shared by every user and never changed)."""
        tools = await super().list_tools()
        if self.ops is None or not any("containerTag" in (t.input_schema or {}).get("properties", {}) for t in tools):
            return tools  # a pinned connection's tools have no containerTag
        try:
            projects = await asyncio.wait_for(self.ops.list_projects(caller(), refresh=False),
                                              PROJECTS_FOR_DESCRIPTION_S)
        except (AccessDenied, ServiceFailure, ToolError, TimeoutError):
            return tools
        description = describe_projects(CONTAINER_TAG_DESCRIPTION, projects)
        described = []
        for t in tools:
            properties = (t.input_schema or {}).get("properties", {})
            if "containerTag" not in properties:
                described.append(t)
                continue
            schema = copy.deepcopy(t.input_schema)
            schema["properties"]["containerTag"]["description"] = description
            described.append(t.model_copy(update={"input_schema": schema}))
        return described

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


def strict_numbers(mcp: MCPServer) -> None:
    """Numbers and booleans of every tool's arguments must be JSON numbers and booleans, as over
    REST (``rest.strict_body``): ``limit: "10"`` is refused naming ``limit``, never read as 10."""
    from services.gateway.entrypoints.rest import strict_body

    for tool in mcp._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        tool.fn_metadata.arg_model = strict_body(model, model.__name__)


def build_mcp(
    ops: Operations, verifier: TokenVerifier, settings: GatewaySettings, *, pinned: bool = False,
    toolsets: frozenset[str] = DEFAULT_TOOLSETS, extensions: Sequence[Extension] = (),
) -> MCPServer:
    """One MCP server: the tools of ``toolsets`` (without ``containerTag`` when ``pinned``), the
    resources, the prompt, and the ``extensions`` (the memory-graph app: ``graph_tools.graph_app``)."""
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
        extensions=list(extensions),
    )
    mcp.ops = ops
    mcp.elsewhere = {}
    for fn, name, title, annotations, toolset in build_tools(ops):
        if toolset not in toolsets:
            mcp.elsewhere[name] = toolset
            continue
        mcp.add_tool(without_container_tag(fn) if pinned else fn, name=name, title=title, annotations=annotations)
    strict_numbers(mcp)

    @mcp.resource("engram://profile", name="profile", title="User profile", mime_type="text/markdown")
    async def profile_resource() -> str:
        """The user's profile: stable facts and recent context (the pinned project, else all projects)."""
        try:
            return format_profile(await ops.run(caller(), operation(GetProfile), GetProfile()))
        except (AccessDenied, ServiceFailure) as exc:
            raise ToolError(str(exc)) from exc

    @mcp.resource("engram://projects", name="projects", title="Projects", mime_type="application/json")
    async def projects_resource() -> str:
        """The user's projects with their memory counts."""
        try:
            return (await ops.list_projects(caller())).model_dump_json()
        except (AccessDenied, ServiceFailure) as exc:
            raise ToolError(str(exc)) from exc

    mcp_extras.add_logging(mcp)
    mcp_extras.add_project_templates(mcp, ops, caller)

    @mcp.prompt(name="context", title="Memory context")
    async def context_prompt() -> str:
        """The user's profile, with the steer to save what is worth remembering."""
        profile = await ops.run(caller(), operation(GetProfile), GetProfile())
        return (
            format_profile(profile)
            + "\n\nWhile we talk, save anything worth remembering across conversations with the `memory` tool "
            "(or `save_memory` for a categorised fact), and `recall` before answering anything that may depend "
            "on what I told you before."
        )

    return mcp
