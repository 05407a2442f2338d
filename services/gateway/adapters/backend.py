"""The gateway's way to the services: commands over JetStream, queries over request-reply."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from contracts.envelope import CommandEnvelope, QueryEnvelope, Reply
from contracts.errors import ErrorBody, ErrorCode
from contracts.subjects import MEMORY
from kit.bus import Bus, BusUnavailable


class BackendError(Exception):
    """A failed command or query, carrying the contract error body."""

    def __init__(self, error: ErrorBody) -> None:
        super().__init__(str(error))
        self.error = error


class Backend:
    def __init__(self, bus: Bus, command_timeout_s: float = 15.0) -> None:
        self.bus = bus
        self.command_timeout_s = command_timeout_s

    async def command(
        self, service: str, name: str, tenant: str, payload: dict[str, Any], idempotency_key: str | None = None
    ) -> Any:
        env = CommandEnvelope(
            command_id=idempotency_key or uuid4().hex, type=name, tenant=tenant, payload=payload
        )
        try:
            reply = await self.bus.send_command(service, name, env, timeout=self.command_timeout_s)
        except BusUnavailable as exc:
            reply = Reply.failure(ErrorCode.UNAVAILABLE, str(exc))
        return _unwrap(reply)

    async def query(self, service: str, name: str, tenant: str, payload: dict[str, Any]) -> Any:
        try:
            reply = await self.bus.query(service, name, QueryEnvelope(type=name, tenant=tenant, payload=payload))
        except BusUnavailable as exc:
            reply = Reply.failure(ErrorCode.UNAVAILABLE, str(exc))
        return _unwrap(reply)

    async def save_memory(self, tenant: str, payload: dict[str, Any], idempotency_key: str | None = None) -> Any:
        return await self.command(MEMORY, "save_memory", tenant, payload, idempotency_key)

    async def forget_memory(self, tenant: str, payload: dict[str, Any], idempotency_key: str | None = None) -> Any:
        return await self.command(MEMORY, "forget_memory", tenant, payload, idempotency_key)

    async def recall(self, tenant: str, payload: dict[str, Any]) -> Any:
        return await self.query(MEMORY, "recall", tenant, payload)

    async def query_memory(self, tenant: str, name: str, payload: dict[str, Any]) -> Any:
        return await self.query(MEMORY, name, tenant, payload)

    async def command_memory(
        self, tenant: str, name: str, payload: dict[str, Any], idempotency_key: str | None = None
    ) -> Any:
        return await self.command(MEMORY, name, tenant, payload, idempotency_key)


def _unwrap(reply: Reply[Any]) -> Any:
    if reply.ok:
        return reply.result
    raise BackendError(reply.error or ErrorBody(code=ErrorCode.INTERNAL, message="unknown failure"))
