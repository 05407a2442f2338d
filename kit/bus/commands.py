"""The bus's commands: published to the work queue under their scoped idempotency key, the outcome
awaited on the caller's inbox or, for a duplicate or a late one, polled from the owning service's
outcome query; a command accepted while its service is down is answered as queued."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
from nats.aio.msg import Msg
from pydantic import ValidationError

from contracts.envelope import AnyReply, CommandEnvelope, OutcomeQuery, QueryEnvelope, Reply
from contracts.errors import ErrorCode
from contracts.messages import REGISTRY, fingerprint, load_all, scoped_command_id
from contracts.subjects import HEADER_MSG_ID, HEADER_REPLY_TO
from kit import metrics, tracing
from kit.bus.connection import BusUnavailable, Connection, dumps
from kit.bus.queries import Queries

__all__ = ["OUTCOME_QUERY", "Commands", "queued", "reply_to", "request_fingerprint"]

OUTCOME_QUERY = "command_outcome"
#: a command with no outcome after this long is checked: when its service is down, the caller is
#: told at once that it is queued (it waits in the stream and is applied when the service is back)
QUEUED_AFTER_S = 2.0


#: What a service adds to a command's payload in the event it appends (ids, versions, times, a
#: status and its reason): a command is refused this far below the server's message limit, so that
#: its event fits too, and so does the restore of that event's state (:data:`RESTORE_HEADROOM`).
EVENT_HEADROOM = 32_768
#: ... and a command that carries its events' states whole (a restore: ``MessageSpec.restores``)
#: this far below it (what its envelope adds): a state accepted under EVENT_HEADROOM is always
#: restorable. Before 2026-12-05 both were 16 KiB, and a daily log saved within ~500 bytes of the
#: limit could be exported but never imported again.
RESTORE_HEADROOM = 8_192


class Commands(Queries):
    """Sending a command and waiting for its outcome."""

    async def send_command(
        self, service: str, name: str, command: CommandEnvelope, *, timeout: float = 15.0,
        fingerprint: str | None = None,
    ) -> Reply[Any]:
        """Publish a command to the work queue and wait for its outcome.

        The bus message id is the command's identity within its tenant and operation
        (``scoped_command_id``): a duplicate within the window has no second effect, and its
        outcome is fetched from the owning service — unless it answered another request
        (``fingerprint``, computed from the contract when not given), which is refused.
        """
        if fingerprint is None:
            fingerprint = request_fingerprint(service, name, command.payload)
        outcome = "unavailable"
        with metrics.timed(metrics.BUS_REQUEST_SECONDS, lambda: {
            "service": service, "operation": name, "kind": "command", "outcome": outcome,
        }), tracing.span(f"send {service}.{name}", kind=tracing.SpanKind.PRODUCER,
                         attributes={"messaging.system": "nats", "engram.operation": name}) as current:
            reply = await self._send_command(service, name, command, timeout, fingerprint)
            outcome = "ok" if reply.ok else str(reply.error.code.value if reply.error else "error")
            if not reply.ok:
                tracing.mark_error(current, outcome)
            return reply

    async def _send_command(
        self, service: str, name: str, command: CommandEnvelope, timeout: float, fingerprint: str | None,
    ) -> Reply[Any]:
        data = dumps(command)
        spec = REGISTRY.get(("command", service, name))
        headroom = RESTORE_HEADROOM if spec is not None and spec.restores else EVENT_HEADROOM
        why = self.too_large(f"this {name} request", len(data), headroom)
        if why is not None:  # refused before it is sent: nothing of it is written
            return Reply.failure(ErrorCode.INVALID_ARGUMENT, f"{why}: send less at a time (shorter texts, fewer items)")
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox, max_msgs=1)
        try:
            ack = await self._publish(
                self.names.command(service, name),
                data,
                tracing.inject({HEADER_MSG_ID: scoped_command_id(command.tenant, name, command.command_id),
                                HEADER_REPLY_TO: inbox}),
                self.names.commands_stream,
            )
            if not ack.duplicate:
                quick = min(timeout, QUEUED_AFTER_S)
                try:
                    msg = await sub.next_msg(timeout=quick)
                    return AnyReply.model_validate_json(msg.data)
                except nats.errors.TimeoutError:
                    pass
                if not await self.service_alive(service):
                    return queued(service, command.command_id)
                try:
                    msg = await sub.next_msg(timeout=max(0.01, timeout - quick))
                    return AnyReply.model_validate_json(msg.data)
                except nats.errors.TimeoutError:
                    pass
            return await self._await_outcome(service, name, command, fingerprint, timeout, duplicate=ack.duplicate)
        finally:
            await sub.unsubscribe()

    async def _await_outcome(
        self, service: str, name: str, command: CommandEnvelope, fingerprint: str | None, timeout: float, *,
        duplicate: bool,
    ) -> Reply[Any]:
        """Poll the owning service for the stored outcome of an already-accepted command."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.02
        query = QueryEnvelope(
            type=OUTCOME_QUERY, tenant=command.tenant,
            payload=OutcomeQuery(operation=name, key=command.command_id, fingerprint=fingerprint).model_dump(),
        )
        unanswered = 0
        while True:
            try:
                reply = await self.query(service, OUTCOME_QUERY, query, timeout=2.0)
            except BusUnavailable:
                reply = None
                unanswered += 1
                if unanswered >= 2:  # the service is down: the accepted command waits in the stream
                    return queued(service, command.command_id)
            busy = reply is not None and reply.error is not None and reply.error.code == ErrorCode.TIMEOUT
            if busy:  # the service is alive but did not answer the outcome query in time: ask again
                reply = None
            if reply is not None and (reply.ok or (reply.error and reply.error.code != ErrorCode.NOT_FOUND)):
                result = reply.result if reply.ok else None
                if reply.ok and isinstance(result, dict) and "outcome" in result:
                    return AnyReply.model_validate(result["outcome"])
                if not reply.ok:
                    return reply
            if loop.time() >= deadline:
                if duplicate:
                    return Reply.failure(
                        ErrorCode.IDEMPOTENCY_KEY_IN_FLIGHT,
                        f"a request with the idempotency key {command.command_id!r} is still being handled; "
                        "retry with the same key to get its outcome",
                        "idempotency_key",
                    )
                return Reply.failure(
                    ErrorCode.TIMEOUT,
                    f"command {command.command_id} was accepted but its outcome did not arrive in {timeout:.0f}s; "
                    f"retry with the same idempotency key to get it",
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def service_alive(self, service: str, timeout: float = 1.0) -> bool:
        """Whether any replica of ``service`` answers on the bus (core NATS says at once when no
        subscriber listens: no waiting out a timeout)."""
        probe = QueryEnvelope(type=OUTCOME_QUERY, payload={})
        try:
            await self.nc.request(self.names.query(service, OUTCOME_QUERY), dumps(probe), timeout=timeout)
        except nats.errors.NoRespondersError:
            return False
        except nats.errors.TimeoutError:
            return True  # subscribed but busy: alive
        return True


async def reply_to(bus: Connection, msg: Msg, reply: Reply[Any]) -> None:
    """Send a command's outcome to the gateway waiting on the command's reply subject."""
    target = (msg.headers or {}).get(HEADER_REPLY_TO)
    if target:
        await bus.nc.publish(target, dumps(reply))

def request_fingerprint(service: str, name: str, payload: dict[str, Any]) -> str | None:
    """The fingerprint of a command given as a payload, parsed by its contract (None when the
    contract does not know it, or it does not parse: the service will refuse it anyway)."""
    load_all()
    spec = REGISTRY.get(("command", service, name))
    if spec is None:
        return None
    try:
        return fingerprint(spec.model.model_validate(payload))
    except ValidationError:
        return None

def queued(service: str, key: str) -> Reply[Any]:
    """The honest answer for a command accepted while its service is down."""
    return Reply.failure(
        ErrorCode.ACCEPTED,
        f"accepted and queued: the {service} service is not running right now, so the write waits in the "
        f"durable command stream and is applied exactly once when it is back. Retry the same request with "
        f"the idempotency key {key!r} to get its outcome",
        "idempotency_key",
    )
