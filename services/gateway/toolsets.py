"""Toolsets: which tools a connection is offered, from a table.

``assistant`` (the everyday memory tools) is always on. ``maintenance`` (the workflow tools of
the extraction pipeline: daily logs, claims, extraction tasks) is added when the client asks for
it — header ``X-Engram-Toolsets: maintenance`` (a comma-separated list) or the query parameter
``?toolsets=maintenance`` — and only for a credential holding ``memory:maintenance``, so that a
chat client is not flooded with workflow tools. Pure rules, no I/O.
"""

from __future__ import annotations

from contracts.auth import Scope
from services.gateway.principal import Principal

HEADER = "x-engram-toolsets"
QUERY_PARAMETER = "toolsets"
ASSISTANT = "assistant"
MAINTENANCE = "maintenance"

#: toolset -> the scope a credential needs to be offered it (None: every credential)
TOOLSETS: dict[str, Scope | None] = {ASSISTANT: None, MAINTENANCE: Scope.MEMORY_MAINTENANCE}
DEFAULT: frozenset[str] = frozenset({ASSISTANT})
#: every combination a connection can ask for (one MCP server is built for each)
COMBINATIONS: tuple[frozenset[str], ...] = (DEFAULT, frozenset({ASSISTANT, MAINTENANCE}))


class UnknownToolset(ValueError):
    """The client asked for a toolset that does not exist."""


def requested(header: str | None, query: str | None) -> frozenset[str]:
    """The toolsets a request asks for (the header wins over the query parameter)."""
    raw = header if header is not None else query
    if raw is None:
        return DEFAULT
    names = {name.strip().lower() for name in raw.split(",") if name.strip()}
    unknown = sorted(names - TOOLSETS.keys())
    if unknown:
        raise UnknownToolset(
            f"unknown toolset {', '.join(repr(n) for n in unknown)} in X-Engram-Toolsets / ?toolsets=: "
            f"use a comma-separated list of {', '.join(sorted(TOOLSETS))}"
        )
    return frozenset(names | DEFAULT)


def require(who: Principal, toolsets: frozenset[str]) -> None:
    """Refuse (AccessDenied) a toolset the credential's scopes do not open."""
    for name in sorted(toolsets):
        scope = TOOLSETS[name]
        if scope is not None:
            who.require(scope)
