"""The gateway's operations, ``(caller, contract model) → contract result``: :meth:`Operations.run`
for every catalogue row (``catalogue.py``); besides it the project list's cache (``ListProjects``'s
row, cached for the tools' descriptions) and who-am-i (answered from the credential, no service asked).

Each checks the caller's scope, resolves the project (the credential's restriction, the
connection's pin, the request's choice, the default) and sends the typed command or query with the
caller's project scope, which the owning service enforces for every way a thing is addressed. MCP
tools (``entrypoints/mcp_tools.py``) and REST routes (``entrypoints/rest.py``) are thin
declarations over these functions: the same rules hold on both.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from contracts.auth import Scope
from contracts.errors import ErrorCode
from contracts.graph import RelatedMemories, RelatedMemoryList, SimilarMemories, SimilarMemoryList
from contracts.memory import MAX_CLIENT_CHARS, ListProjects, MemoryHistory, MemoryHistoryQuery, ProjectList
from contracts.messages import spec_of
from kit.client import Client, ServiceFailure
from services.gateway import relations
from services.gateway.catalogue import Operation, ProjectRule, operation
from services.gateway.principal import AccessDenied, ClientInfo, Principal
from services.gateway.project_cache import ProjectCache

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger("engram.gateway")

#: how long a recall waits for its hits' histories and neighbours (what is late is left out): 100 ms,
#: or as long as the search itself took when the memory service is slower than that (a busy
#: machine), never more than 0.5 s — relations at most double a recall's time
RELATIONS_BUDGET_S = 0.1
RELATIONS_MAX_BUDGET_S = 0.5
#: after SimilarMemories (or the graph's RelatedMemories) went unanswered, how long recall does
#: without it (no similar memories, or each asked of the memory service's vector index)
SIMILAR_RETRY_S = 300.0
_NOT_ANSWERED = (ErrorCode.INVALID_ARGUMENT, ErrorCode.UNAVAILABLE)


@dataclass(frozen=True)
class Caller:
    """Who calls (the credential) and the connection's project pin, if any."""

    who: Principal
    pin: str | None = None
    client: ClientInfo | None = None  # the MCP client, as it named itself at initialize (None over REST)

    @property
    def tenant(self) -> str:
        return self.who.tenant

    @property
    def project_scope(self) -> str | None:
        """The only project this call may reach (the key's restriction, else the pin)."""
        return self.who.project or self.pin

    def require(self, scope: Scope) -> None:
        self.who.require(scope)

    def project(self, requested: str | None) -> str:
        """The project a write or a lookup works in."""
        return self.who.project_for(requested, self.pin)

    def search_project(self, requested: str | None) -> str | None:
        """The project a search works in (None: every project)."""
        return self.who.search_project(requested, self.pin)


class WhoAmI(BaseModel):
    user_id: str
    user_name: str | None = None
    client_id: str
    key_id: str | None
    scopes: list[str]
    project: str | None
    client_name: str | None = None
    client_version: str | None = None


def _with(model: M, **changes: Any) -> M:
    """The model with resolved fields (already validated by the caller's rules)."""
    return model.model_copy(update=changes) if any(getattr(model, k) != v for k, v in changes.items()) else model


class Operations:
    """Every operation of the public API, over the typed bus client."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.projects = ProjectCache()
        self._similar_off_until = 0.0  # SimilarMemories unanswered: not asked again before this time
        self._graph_off_until = 0.0  # RelatedMemories unanswered: not asked again before this time

    async def _send(self, c: Caller, command: BaseModel, key: str | None = None) -> Any:
        return await self.client.send(c.tenant, command, key=key, project_scope=c.project_scope,
                                      correlation_id=correlation(c))

    async def _ask(self, c: Caller, query: BaseModel) -> Any:
        return await self.client.ask(c.tenant, query, project_scope=c.project_scope)

    async def _related(self, c: Caller, hits: list[Any], budget_s: float = RELATIONS_BUDGET_S) -> list[Any]:
        """The hits with their relations and source documents (``relations.py``), whatever has not
        answered within ``budget_s`` left out, so relations never hold a recall up for long.

        The best hits' similar memories come from the graph's read model in one call
        (:class:`RelatedMemories`: the neighbours found once, when each memory was saved), together
        with the revised hits' histories; only a hit the graph has not caught up with (just saved or
        changed, or a graph that does not answer) is asked of the memory service's vector index
        (:class:`SimilarMemories`, one ask for all of them: a batch of searches)."""
        deadline = time.monotonic() + budget_s
        revised, best = relations.wanted(hits)
        asks: dict[tuple[str, Any], asyncio.Task[Any]] = {
            ("history", i): asyncio.ensure_future(self._ask(c, MemoryHistoryQuery(memory_id=i))) for i in revised
        }
        similar: dict[Any, SimilarMemoryList] = {}
        if best and time.monotonic() >= self._graph_off_until:
            graph = asyncio.ensure_future(self._ask(c, RelatedMemories(
                memory_ids=best, limit=relations.SIMILAR_PER_HIT, min_score=relations.SIMILAR_MIN_SCORE)))
            await asyncio.wait({graph}, timeout=budget_s)
            if not graph.done():
                graph.cancel()
            elif graph.exception() is None and isinstance(graph.result(), RelatedMemoryList):
                similar = relations.similar_from_graph(graph.result(), {h.memory.id: h.memory.version for h in hits})
            elif isinstance(error := graph.exception(), ServiceFailure) and error.error.code in _NOT_ANSWERED:
                self._graph_off_until = time.monotonic() + SIMILAR_RETRY_S
                log.info("graph related memories unavailable (%s); recall asks the memory service for %.0f s",
                         error, SIMILAR_RETRY_S)
        behind = [i for i in best if i not in similar]
        if behind and time.monotonic() >= self._similar_off_until:
            asks[("similar", None)] = asyncio.ensure_future(self._ask(c, SimilarMemories(
                memory_ids=behind, limit=relations.SIMILAR_PER_HIT + 1, min_score=relations.SIMILAR_MIN_SCORE)))
        if asks:
            await asyncio.wait(asks.values(), timeout=max(deadline - time.monotonic(), 0.001))
        histories: dict[Any, MemoryHistory] = {}
        for (kind, i), task in asks.items():
            if not task.done():
                task.cancel()
                continue
            error = task.exception()
            if error is None and kind == "history":
                histories[i] = task.result()
            elif error is None:
                similar.update({m.memory_id: m for m in task.result().memories})
            elif kind == "similar" and isinstance(error, ServiceFailure) and error.error.code in _NOT_ANSWERED:
                # a memory service without SimilarMemories ("unknown query"), or none: not asked again for a while
                self._similar_off_until = time.monotonic() + SIMILAR_RETRY_S
                log.info("similar memories unavailable (%s); recall shows none for %.0f s", error, SIMILAR_RETRY_S)
        return relations.with_relations(hits, histories, similar)

    async def list_projects(self, c: Caller, *, refresh: bool = True) -> ProjectList:
        """The ``ListProjects`` row through a cache (only the reachable project for a restricted
        credential or connection): without ``refresh``, the list this process cached within its TTL
        (``project_cache.py``); a refresh runs it now and updates the cache the tools' descriptions
        are written from."""
        c.require(Scope.MEMORY_READ)

        async def fetch() -> ProjectList:
            result: ProjectList = await self.run(c, operation(ListProjects), ListProjects())
            return result

        return await self.projects.get(_projects_key(c), fetch, refresh=refresh)

    async def who_am_i(self, c: Caller) -> WhoAmI:
        c.require(Scope.MEMORY_READ)
        return WhoAmI(user_id=c.tenant, user_name=c.who.user_name, client_id=c.who.client_id, key_id=c.who.key_id,
                      scopes=sorted(c.who.scopes), project=c.who.project or c.pin,
                      client_name=c.client.name if c.client else None,
                      client_version=c.client.version if c.client else None)

    async def run(self, c: Caller, op: Operation, message: BaseModel, *, project: str | None = None,
                  key: str | None = None) -> Any:
        """A catalogue operation (``catalogue.py``): its scope required, its project resolved by its
        rule (the key's restriction and the pin first; ``project`` is what the request named), a
        write's ``client`` named (:func:`write_client`), then the command sent (once per ``key``) or
        the query asked; the contract's result model back (a recall's hits with their relations)."""
        c.require(op.scope)
        if op.project is ProjectRule.SEARCH:
            message = _with(message, project=c.search_project(project))
        elif op.project is ProjectRule.WRITE:
            message = _with(message, project=c.project(project))
        elif op.project is ProjectRule.OPERATOR:
            _operator(c)
        elif op.project is ProjectRule.OWNER:
            _owner(c, message)
        if spec_of(message).kind == "query":
            started = time.monotonic()
            result = await self._ask(c, message)
            if op.relations and result.hits:
                budget = min(max(RELATIONS_BUDGET_S, time.monotonic() - started), RELATIONS_MAX_BUDGET_S)
                result = result.model_copy(update={"hits": await self._related(c, result.hits, budget)})
            return result
        if "client" in type(message).model_fields:
            message = _with(message, **write_client(c))
        result = await self._send(c, message, key)
        if op.project is ProjectRule.WRITE:  # a project the cached list does not hold makes it stale
            self.projects.saw(_projects_key(c), getattr(message, "project"))  # noqa: B009 (any row's model)
        return result

def write_client(c: Caller) -> dict[str, Any]:
    """The write's ``client`` field: the MCP client that makes it (none over REST), whatever a body
    said; a delegated write names the credential that acted for the user too."""
    label = c.client.label if c.client is not None else None
    if c.who.actor is not None:
        by = f"for {c.tenant} by user {c.who.actor}" + (f" key {c.who.key_id}" if c.who.key_id else "")
        label = f"{label} ({by})" if label else by
    return {"client": label[:MAX_CLIENT_CHARS] if label else None}


def correlation(c: Caller) -> str | None:
    """A delegated command's correlation id names the actor, so every event it writes records who
    acted for the user (``act-as.<actor>.<key>.<nonce>``)."""
    if c.who.actor is None:
        return None
    return f"act-as.{c.who.actor}.{c.who.key_id or c.who.client_id}.{uuid.uuid4().hex[:12]}"[:200]


def _projects_key(c: Caller) -> tuple[str, str | None]:
    return (c.tenant, c.project_scope)


def _owner(c: Caller, message: BaseModel) -> None:
    """A user's own keys: managed by the user's own credential, never by one acting for them; a key
    made gets at most the scopes of the credential that makes it (its project is the memory-free
    auth service's check: the command carries the caller's restriction)."""
    if c.who.actor is not None:
        raise AccessDenied(f"this credential acts for user {c.tenant}: it cannot manage that user's keys",
                           Scope.KEYS_MANAGE.value)
    missing = sorted(set(getattr(message, "scopes", None) or ()) - set(c.who.scopes))
    if missing:
        raise AccessDenied(f"this credential does not hold {', '.join(missing)}: a key it creates gets at most "
                           f"its own scopes ({', '.join(sorted(c.who.scopes))})", field="scopes")


def _operator(c: Caller) -> None:
    """``admin`` is the install operator's role: install-wide, so never with a project restriction."""
    c.require(Scope.ADMIN)
    if c.who.project is not None:
        raise AccessDenied(
            f"this credential is restricted to project '{c.who.project}'; managing keys needs an unrestricted "
            "admin key (the install operator's)", Scope.ADMIN.value,
        )
