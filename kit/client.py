"""The typed client of the bus: send a contract command, ask a contract query, get its result model.

    result = await client.send(tenant, SaveMemory(content="…"))   # -> SaveMemoryResult
    found = await client.ask(tenant, GetMemoryByKey(memory_key="…"))  # -> MemoryLookup

The message's contract says which service owns it and what comes back; a refusal raises
:class:`ServiceFailure` carrying the contract error body.
"""

from __future__ import annotations

from typing import Any, TypeVar
from uuid import uuid4

from pydantic import BaseModel, ValidationError

from contracts.envelope import CommandEnvelope, QueryEnvelope, Reply
from contracts.errors import ErrorBody, ErrorCode
from contracts.messages import fingerprint, spec_of
from kit.bus import Bus, BusUnavailable

R = TypeVar("R", bound=BaseModel)


class ServiceFailure(Exception):
    """A command or query refused or failed; ``error`` says why, which field, and what to do."""

    def __init__(self, error: ErrorBody) -> None:
        super().__init__(str(error))
        self.error = error


class Client:
    """Commands over JetStream, queries over request-reply, results as contract models."""

    def __init__(self, bus: Bus, *, command_timeout_s: float = 15.0, query_timeout_s: float = 10.0) -> None:
        self.bus = bus
        self.command_timeout_s = command_timeout_s
        self.query_timeout_s = query_timeout_s

    async def send(
        self, tenant: str, command: BaseModel, *, key: str | None = None, project_scope: str | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        """Run a command once per ``key`` (a fresh key when None) and return its result model;
        ``correlation_id`` (default: a fresh one) is carried by every event the command writes."""
        spec = spec_of(command)
        env = CommandEnvelope(
            command_id=key or uuid4().hex, type=spec.name, tenant=tenant, project_scope=project_scope,
            payload=command.model_dump(mode="json"), correlation_id=correlation_id or uuid4().hex,
        )
        try:
            reply = await self.bus.send_command(spec.service, spec.name, env, timeout=self.command_timeout_s,
                                                fingerprint=fingerprint(command))
        except BusUnavailable as exc:
            reply = Reply.failure(ErrorCode.UNAVAILABLE, str(exc))
        return _result(reply, spec.result)

    async def ask(self, tenant: str | None, query: BaseModel, *, project_scope: str | None = None) -> Any:
        """Answer a query with its result model."""
        spec = spec_of(query)
        env = QueryEnvelope(type=spec.name, tenant=tenant, project_scope=project_scope,
                            payload=query.model_dump(mode="json"))
        try:
            reply = await self.bus.query(spec.service, spec.name, env, timeout=self.query_timeout_s)
        except BusUnavailable as exc:
            reply = Reply.failure(ErrorCode.UNAVAILABLE, str(exc))
        return _result(reply, spec.result)


def _result(reply: Reply[Any], model: type[R]) -> R:
    if not reply.ok:
        raise ServiceFailure(reply.error or ErrorBody(code=ErrorCode.INTERNAL, message="unknown failure"))
    try:
        return model.model_validate(reply.result)
    except ValidationError as exc:  # never hand one operation's outcome to another's caller
        raise ServiceFailure(ErrorBody(
            code=ErrorCode.INTERNAL, message=f"the service answered with something that is not a {model.__name__}: {exc}"
        )) from exc
