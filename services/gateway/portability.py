"""The gateway's portability operations: bulk saves, the export stream, the purge of a user.

A bulk save is many ordinary saves: each item is validated on its own (a bad one is an error in its
result, naming ``memories[i].<field>``), resolved to its project by the caller's rules, and sent
through the command stream as ``SaveMemory`` with its own idempotency key, ``BULK_CONCURRENCY`` at a
time, so the memory service receives them in batches it embeds in one call.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import UUID, uuid4

from pydantic import ValidationError

from contracts.auth import Scope
from contracts.envelope import IDEMPOTENCY_KEY_PATTERN
from contracts.errors import ErrorBody, ErrorCode
from contracts.memory import ForgetMemory, ForgetMemoryResult, SaveMemory, SaveMemoryResult
from contracts.portability import (
    BULK_CONCURRENCY,
    BulkItemResult,
    BulkItemStatus,
    ForgetItemResult,
    ForgetItemStatus,
    ForgetMemoriesRequest,
    ForgetMemoriesResult,
    PurgeReport,
    SaveMemoriesRequest,
    SaveMemoriesResult,
)
from kit.bus import validation_reply
from kit.client import Client, ServiceFailure
from kit.export import Format, export_lines
from kit.purge import purge_user
from services.gateway.operations import Caller, correlation, write_client
from services.gateway.principal import AccessDenied

_ITEM_ONLY = ("project", "idempotency_key")


def item_key(request_key: str | None, index: int, own: Any) -> str:
    """An item's idempotency key: its own, else ``<request key>:<index>``, else a fresh one."""
    if isinstance(own, str) and own:
        return own
    if not request_key:
        return uuid4().hex
    derived = f"{request_key}:{index}"
    return derived if len(derived) <= 128 else f"{hashlib.sha256(request_key.encode()).hexdigest()[:40]}:{index}"


class PortabilityOperations:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def save_memories(self, c: Caller, req: SaveMemoriesRequest, *, key: str | None = None,
                            source: str = "api",
                            progress: Callable[[int, int], Awaitable[None]] | None = None) -> SaveMemoriesResult:
        """Save every item (``memory:write``), BULK_CONCURRENCY in flight at once; one result per item.
        ``progress(done, total)`` is awaited as each item is answered, in order of ``done``."""
        c.require(Scope.MEMORY_WRITE)
        gate = asyncio.Semaphore(BULK_CONCURRENCY)
        answered = 0
        reporting = asyncio.Lock()

        async def one_reported(i: int, item: dict[str, Any]) -> BulkItemResult:
            nonlocal answered
            result = await one(i, item)
            if progress is not None:
                async with reporting:
                    answered += 1
                    await progress(answered, len(req.memories))
            return result

        async def one(i: int, item: dict[str, Any]) -> BulkItemResult:
            where = f"memories[{i}]"
            try:
                own_key = item.get("idempotency_key")
                if own_key is not None and (not isinstance(own_key, str) or not _valid_key(own_key)):
                    return _error(i, ErrorCode.INVALID_ARGUMENT, "idempotency_key must be 8-128 of [A-Za-z0-9_.:-]",
                                  f"{where}.idempotency_key")
                # the write's client label is the connection's (its clientInfo), never an item's
                fields = {k: v for k, v in item.items() if k not in _ITEM_ONLY and k != "client"}
                fields.setdefault("source", source)
                cmd = SaveMemory.model_validate({**fields, **write_client(c)})
                project = item.get("project", req.project)
                if project is not None and not isinstance(project, str):
                    return _error(i, ErrorCode.INVALID_ARGUMENT, "project must be a string", f"{where}.project")
                cmd = cmd.model_copy(update={"project": c.project(project)})
                async with gate:
                    result: SaveMemoryResult = await self.client.send(
                        c.tenant, cmd, key=item_key(key, i, own_key), project_scope=c.project_scope,
                        correlation_id=correlation(c))
            except ValidationError as exc:
                body = validation_reply(exc).error
                assert body is not None
                return _error(i, body.code, body.message, f"{where}.{body.field}" if body.field else where)
            except AccessDenied as exc:
                return _error(i, ErrorCode.PERMISSION_DENIED, str(exc), f"{where}.project")
            except ServiceFailure as exc:
                e = exc.error
                return _error(i, e.code, e.message, f"{where}.{e.field}" if e.field else where)
            status = BulkItemStatus.SAVED if result.created or result.updated else BulkItemStatus.DUPLICATE
            return BulkItemResult(index=i, status=status, memory_id=result.memory_id, version=result.version,
                                  project=result.project)

        results = list(await asyncio.gather(*(one_reported(i, item) for i, item in enumerate(req.memories))))
        count = {s: sum(1 for r in results if r.status is s) for s in BulkItemStatus}
        return SaveMemoriesResult(saved=count[BulkItemStatus.SAVED], duplicates=count[BulkItemStatus.DUPLICATE],
                                  errors=count[BulkItemStatus.ERROR], results=results)

    async def forget_memories(self, c: Caller, req: ForgetMemoriesRequest, *,
                              key: str | None = None) -> ForgetMemoriesResult:
        """Forget every id (``memory:write``), BULK_CONCURRENCY in flight at once, each an ordinary
        ForgetMemory with its own idempotency key (``<request key>:<index>``: a retried request
        answers the same); one result per id. A memory the caller may not see is not found."""
        c.require(Scope.MEMORY_WRITE)
        gate = asyncio.Semaphore(BULK_CONCURRENCY)
        project = c.project(None)

        async def one(i: int, memory_id: UUID) -> ForgetItemResult:
            where = f"memory_ids[{i}]"
            cmd = ForgetMemory.model_validate({"memory_id": memory_id, "reason": req.reason, "project": project,
                                               **write_client(c)})
            try:
                async with gate:
                    result: ForgetMemoryResult = await self.client.send(
                        c.tenant, cmd, key=item_key(key, i, None), project_scope=c.project_scope,
                        correlation_id=correlation(c))
            except ServiceFailure as exc:
                e = exc.error
                return ForgetItemResult(index=i, memory_id=memory_id, status=ForgetItemStatus.ERROR,
                                        error=ErrorBody(code=e.code, message=e.message, field=where))
            status = ForgetItemStatus.FORGOTTEN if result.forgotten else ForgetItemStatus.ALREADY_FORGOTTEN
            return ForgetItemResult(index=i, memory_id=memory_id, status=status, reinstated=result.reinstated)

        results = list(await asyncio.gather(*(one(i, m) for i, m in enumerate(req.memory_ids))))
        count = {s: sum(1 for r in results if r.status is s) for s in ForgetItemStatus}
        return ForgetMemoriesResult(forgotten=count[ForgetItemStatus.FORGOTTEN],
                                    already_forgotten=count[ForgetItemStatus.ALREADY_FORGOTTEN],
                                    errors=count[ForgetItemStatus.ERROR], results=results)

    def export(self, c: Caller, *, project: str | None, fmt: Format) -> AsyncIterator[str]:
        """The caller's export (``memory:read``; a restricted or pinned caller: its project only)."""
        c.require(Scope.MEMORY_READ)
        resolved = c.search_project(project)
        return export_lines(self.client, c.tenant, project=resolved, project_scope=c.project_scope, fmt=fmt)

    async def purge_user(self, c: Caller, user_id: str) -> PurgeReport:
        """Remove everything of a user (the install operator's: ``admin``, unrestricted)."""
        c.require(Scope.ADMIN)
        if c.who.project is not None:
            raise AccessDenied(f"this credential is restricted to project '{c.who.project}'; purging a user needs an "
                               "unrestricted admin key (the install operator's)", Scope.ADMIN.value)
        return await purge_user(self.client.bus, user_id)


def _valid_key(key: str) -> bool:
    return re.fullmatch(IDEMPOTENCY_KEY_PATTERN, key) is not None


def _error(index: int, code: ErrorCode, message: str, field: str) -> BulkItemResult:
    return BulkItemResult(index=index, status=BulkItemStatus.ERROR, error=ErrorBody(code=code, message=message, field=field))
