"""The MCP utilities beyond tools, resources and prompts (issue 35): logging, completion, progress.

* **Logging** (``logging/setLevel``, ``notifications/message``): a client sets a level for its
  session; from then on the tools tell it, at or above that level, what it should know and the
  result alone does not say: a save queued while the memory service is down (warning), a tool of a
  toolset this connection did not ask for (warning), the credential's rate limit nearly reached
  (warning; a request refused by the limiter is an error, answered before any session), a bulk
  save's tally (info). Only the caller's own: counts, tool and project names, never a secret nor
  another user's data. The gateway is stateless (every POST is a session of its own to the SDK), so
  the level is kept here, keyed by the connection's ``Mcp-Session-Id`` and the credential, in this
  replica's memory (bounded): behind several replicas without sticky sessions a replica that did
  not receive ``setLevel`` sends nothing. A client of the stateless revision (2026-07-28) opts in
  per request instead (``io.modelcontextprotocol/logLevel`` in ``_meta``), which any replica honours.
* **Completion** (``completion/complete``): the ``{project}`` of the resource templates
  ``engram://projects/{project}/profile`` and ``engram://projects/{project}/memories``, from the
  caller's own projects after the key's restriction and the connection's pin (a restricted key, or a
  pinned connection, is offered its one project). A reference Engram does not complete (another
  prompt, another argument) is answered with no values, as the spec allows.
* **Progress** (``notifications/progress``): a long tool reports its steps when the client sent a
  ``progressToken`` (``save_memories``: one step per item saved).

A notification can only travel on a streamed answer: the gateway answers a POST with a stream
(``text/event-stream``) only when it may carry one (:func:`may_notify`), else with plain JSON as
before. Sending a notification never fails the tool: a client gone, it is dropped.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, get_args

import mcp_types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from contracts.memory import MAX_RECALL_LIMIT, GetProfile, RecallMemory
from kit.client import ServiceFailure
from kit.edge import RATE_LEFT
from services.gateway.catalogue import operation
from services.gateway.operations import Caller, Operations
from services.gateway.presentation import format_profile
from services.gateway.principal import AccessDenied

log = logging.getLogger("engram.gateway.mcp")

LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # debug < info < notice < warning < error < ...
LOGGER = "engram"
#: the ``_meta`` key a client of the stateless revision opts in to log messages with
LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"
#: sessions whose level is held (least recently used dropped first)
MAX_SESSIONS = 10_000
#: a session's level is forgotten after this long without a request (the session is gone)
SESSION_TTL_S = 24 * 3600.0
MAX_COMPLETIONS = 100  # the spec's limit on completion values
PROFILE_TEMPLATE = "engram://projects/{project}/profile"
MEMORIES_TEMPLATE = "engram://projects/{project}/memories"
#: the requests whose answer may carry notifications (the tools send them)
NOTIFYING_METHODS = frozenset({"tools/call"})

#: the request being served (set by ``EngramMCPServer`` around every tool call and resource read)
current_request: contextvars.ContextVar[ServerRequestContext[Any, Any] | None] = contextvars.ContextVar(
    "engram_mcp_request", default=None)


class SessionLevels:
    """The level each session set with ``logging/setLevel``, keyed by (credential, session id)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, ttl_s: float = SESSION_TTL_S) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self._levels: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()

    def set(self, key: tuple[str, str], level: str, now: float | None = None) -> None:
        self._levels[key] = (level, time.monotonic() if now is None else now)
        self._levels.move_to_end(key)
        while len(self._levels) > self.max_sessions:
            self._levels.popitem(last=False)

    def get(self, key: tuple[str, str] | None, now: float | None = None) -> str | None:
        if key is None or key not in self._levels:
            return None
        level, at = self._levels[key]
        now = time.monotonic() if now is None else now
        if now - at > self.ttl_s:
            del self._levels[key]
            return None
        self._levels[key] = (level, now)  # in use: kept
        self._levels.move_to_end(key)
        return level


#: one table for every MCP server of this gateway (pinned or not, every toolset): a session set its
#: level on whichever of them answered its setLevel
LEVELS_SET = SessionLevels()


def at_or_above(level: str, threshold: str) -> bool:
    return LEVELS.index(level) >= LEVELS.index(threshold)


def credential_of_request() -> str | None:
    token = get_access_token()
    if token is None:
        return None
    claims = token.claims or {}
    return f"{claims.get('key_id') or token.client_id}:{token.subject}"


def session_key(headers: Mapping[str, str] | None) -> tuple[str, str] | None:
    """(credential, Mcp-Session-Id) of this request, or None without either."""
    session_id = (headers or {}).get("mcp-session-id")
    credential = credential_of_request()
    if not session_id or credential is None:
        return None
    return credential, session_id


def _headers(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, str] | None:
    return getattr(ctx.request, "headers", None)


def may_notify(body: bytes | None, headers: Mapping[str, str]) -> bool:
    """Whether a POST's answer may carry notifications, so it must be streamed: a request with a
    progress token, or one of a session that set a log level (or, on the stateless revision, that
    opts in to log messages in its ``_meta``); a tool call only (only the tools send notifications), and
    only when the client accepts a stream."""
    if body is None or "text/event-stream" not in headers.get("accept", ""):
        return False
    if b"progressToken" not in body and LOG_LEVEL_META_KEY.encode() not in body \
            and LEVELS_SET.get(session_key(headers)) is None:
        return False
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    if not isinstance(message, dict) or "id" not in message or message.get("method") not in NOTIFYING_METHODS:
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and (meta.get("progressToken") is not None or meta.get(LOG_LEVEL_META_KEY) in LEVELS):
        return True
    return LEVELS_SET.get(session_key(headers)) is not None


async def notify(level: str, message: str, **data: Any) -> None:
    """A ``notifications/message`` to the client of the current request, if it asked for this level."""
    ctx = current_request.get()
    if ctx is None or level not in LEVELS:
        return
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        if level not in allowed_log_levels(ctx.protocol_version, ctx.meta):  # type: ignore[arg-type]
            return
    else:
        threshold = LEVELS_SET.get(session_key(_headers(ctx)))
        if threshold is None or not at_or_above(level, threshold):
            return
    notification = types.LoggingMessageNotification(params=types.LoggingMessageNotificationParams(
        level=level, logger=LOGGER, data={"message": message, **data}))  # type: ignore[arg-type]
    try:
        await ctx.session.send_notification(notification, related_request_id=ctx.request_id)
    except Exception:  # the client went away: the tool's answer matters, not the note
        log.debug("log notification not delivered", exc_info=True)


#: warn when the credential's bucket holds less than this share of its burst
RATE_LOW_SHARE = 0.1


def rate_warning(left: float, burst: int, per_minute: float) -> str | None:
    """The warning for a credential whose rate-limit bucket runs low (None while it does not)."""
    if left >= burst * RATE_LOW_SHARE:
        return None
    return (f"rate limit: {max(0, int(left))} of {burst} requests left at once for this credential "
            f"(refilled at {per_minute:g} per minute); calls beyond it are refused (-32000) until it refills")


async def warn_if_rate_low() -> None:
    """A warning when this request left the credential's rate-limit bucket low."""
    ctx = current_request.get()
    left = getattr(ctx.request, "scope", {}).get(RATE_LEFT) if ctx is not None else None
    warning = rate_warning(*left) if left is not None else None
    if warning is not None:
        await notify("warning", warning)


async def progress(done: float, total: float | None = None, message: str | None = None) -> None:
    """A ``notifications/progress`` for the current request, when its client sent a progress token."""
    ctx = current_request.get()
    if ctx is None:
        return
    try:
        await ctx.session.report_progress(done, total, message)
    except Exception:
        log.debug("progress notification not delivered", exc_info=True)


def add_logging(mcp: MCPServer) -> None:
    """``logging/setLevel``: the session's level (and the ``logging`` capability it announces)."""

    async def set_level(ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        key = session_key(_headers(ctx))
        if key is not None:
            LEVELS_SET.set(key, params.level)
        return types.EmptyResult()

    mcp._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)


def complete_from(names: list[str], typed: str) -> types.Completion:
    """The names starting with what was typed (case-insensitive), then those containing it; at most
    100, with the total."""
    typed_lower = typed.lower()
    starting = sorted(n for n in names if n.lower().startswith(typed_lower))
    containing = sorted(n for n in names if typed_lower in n.lower() and not n.lower().startswith(typed_lower))
    matches = starting + containing
    return types.Completion(values=matches[:MAX_COMPLETIONS], total=len(matches),
                            has_more=len(matches) > MAX_COMPLETIONS)


def reachable_projects(c: Caller, listed: list[str]) -> list[str]:
    """The projects a caller may name: its one project when the key is restricted or the connection
    pinned (both at once: only when they agree), else every project of its list."""
    try:
        only = c.search_project(None)
    except AccessDenied:  # a restricted key pinned to another project reaches nothing
        return []
    return [only] if only is not None else listed


def template_project(c: Caller, project: str) -> str:
    """The project a template's ``{project}`` names, if this caller may read it: the key's
    restriction and the pin hold (a pinned connection reads its project only)."""
    if c.pin is not None and project != c.pin:
        raise AccessDenied(f"this connection is pinned to project '{c.pin}' (X-Engram-Project); "
                           "it reaches no other project")
    resolved = c.search_project(project)
    assert resolved is not None
    return resolved


def add_project_templates(mcp: MCPServer, ops: Operations, caller: Callable[[], Caller]) -> None:
    """The resource templates ``engram://projects/{project}/profile`` and ``…/memories``, and the
    ``completion/complete`` handler offering the caller's own projects for their ``{project}``."""

    @mcp.resource(PROFILE_TEMPLATE, name="project-profile", title="A project's profile", mime_type="text/markdown")
    async def project_profile(project: str) -> str:
        """The user's profile in one project: its stable facts and recent context."""
        try:
            c = caller()
            return format_profile(await ops.run(c, operation(GetProfile), GetProfile(),
                                                project=template_project(c, project)))
        except (AccessDenied, ServiceFailure, ValidationError) as exc:
            raise ResourceError(str(exc)) from exc

    @mcp.resource(MEMORIES_TEMPLATE, name="project-memories", title="A project's memories",
                  mime_type="application/json")
    async def project_memories(project: str) -> str:
        """The project's memories, most important first (at most 100): what recall_memory lists."""
        try:
            c = caller()
            query = RecallMemory(project=template_project(c, project), limit=MAX_RECALL_LIMIT)
            listed: BaseModel = await ops.run(c, operation(RecallMemory), query, project=query.project)
            return listed.model_dump_json()
        except (AccessDenied, ServiceFailure, ValidationError) as exc:
            raise ResourceError(str(exc)) from exc

    @mcp.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> types.Completion | None:
        """The caller's projects for a template's ``{project}``; nothing for what Engram does not complete."""
        if not (isinstance(ref, types.ResourceTemplateReference) and ref.uri in (PROFILE_TEMPLATE, MEMORIES_TEMPLATE)
                and argument.name == "project"):
            return None
        c = caller()
        try:
            listed = [p.project for p in (await ops.list_projects(c, refresh=False)).projects]
        except (AccessDenied, ServiceFailure):
            listed = []
        return complete_from(reachable_projects(c, listed), argument.value)
