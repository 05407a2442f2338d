"""The bus's queries: core-NATS request-reply to a service's queue group, with a deadline a
service past it drops (load shedding), and the replies of a request that does not validate."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.msg import Msg
from pydantic import ValidationError

from contracts.envelope import AnyReply, QueryEnvelope, Reply
from contracts.errors import ErrorCode
from kit import metrics, tracing
from kit.bus.connection import BusUnavailable, Connection, Handler, dumps

__all__ = ["HEADER_DEADLINE", "Queries", "validation_reply"]

log = logging.getLogger("engram.bus")

#: a query's deadline (Unix time, seconds) in its NATS headers: past it the caller has given up, so a
#: service still holding the query in its queue drops it instead of answering no one (load shedding)
HEADER_DEADLINE = "Engram-Deadline"
#: clocks of the hosts may differ a little: a query is dropped only this long after its deadline
DEADLINE_SLACK_S = 0.25


class Queries(Connection):
    """Asking a service, and answering for one."""

    async def query(self, service: str, name: str, query: QueryEnvelope, *, timeout: float = 10.0) -> Reply[Any]:
        """Core-NATS request-reply to the service's queue group."""
        subject = self.names.query(service, name)
        outcome = "unavailable"
        with metrics.timed(metrics.BUS_REQUEST_SECONDS, lambda: {
            "service": service, "operation": name, "kind": "query", "outcome": outcome,
        }), tracing.span(f"query {service}.{name}", kind=tracing.SpanKind.CLIENT,
                         attributes={"messaging.system": "nats", "engram.operation": name}) as current:
            try:
                headers = tracing.inject({HEADER_DEADLINE: f"{time.time() + timeout:.3f}"})
                msg = await self.nc.request(subject, dumps(query), timeout=timeout, headers=headers)
            except nats.errors.NoRespondersError as exc:
                raise BusUnavailable(f"no {service} service answers {subject}: is it running?") from exc
            except nats.errors.TimeoutError:
                outcome = ErrorCode.TIMEOUT.value
                tracing.mark_error(current, outcome)
                return Reply.failure(ErrorCode.TIMEOUT, f"the {service} service did not answer within {timeout:.0f}s")
            reply = AnyReply.model_validate_json(msg.data)
            outcome = "ok" if reply.ok else str(reply.error.code.value if reply.error else "error")
            return reply

    def _fitting(self, service: str, name: str, data: bytes) -> bytes:
        """``data``, or, when it is larger than the server lets a message be (``max_payload``), a
        failure saying so: an answer the bus cannot carry would leave the caller waiting for a
        timeout that names nothing."""
        why = self.too_large(f"{service}'s answer", len(data))
        if why is None:
            return data
        log.warning("query %s: %s", name, why)
        return dumps(Reply.failure(
            ErrorCode.INVALID_ARGUMENT, f"{why}; ask for less (a smaller limit, a page at a time, or one item by id)"))

    async def serve_queries(
        self,
        service: str,
        handlers: dict[str, Callable[[QueryEnvelope], Awaitable[Reply[Any]]]],
        *,
        concurrency: int = 16,
    ) -> list[Any]:
        """Answer ``<ns>.qry.<service>.<name>`` for every handler, in the service's queue group."""
        gate = asyncio.Semaphore(concurrency)
        subs = []

        def make_cb(name: str, handler: Callable[[QueryEnvelope], Awaitable[Reply[Any]]]) -> Handler:
            async def answer(msg: Msg) -> None:
                async with gate:
                    if _expired(msg):  # waited in this queue past the caller's timeout: nobody would read it
                        metrics.QUERIES_SHED.labels(service, name).inc()
                        return
                    with tracing.span(f"{service} answer {name}", kind=tracing.SpanKind.SERVER,
                                      headers=msg.headers, attributes={"engram.operation": name}):
                        try:
                            query = QueryEnvelope.model_validate_json(msg.data)
                            reply = await handler(query)
                        except ValidationError as exc:
                            reply = Reply.failure(ErrorCode.INVALID_ARGUMENT, _validation_message(exc),
                                                  _first_field(exc))
                        except Exception:
                            log.exception("query %s failed", name)
                            reply = Reply.failure(ErrorCode.INTERNAL, f"{service} could not answer {name}; see its log")
                        if msg.reply:
                            await msg.respond(self._fitting(service, name, dumps(reply)))

            async def callback(msg: Msg) -> None:
                asyncio.get_running_loop().create_task(answer(msg))

            return callback

        for name, handler in handlers.items():
            subs.append(await self.nc.subscribe(self.names.query(service, name), queue=service, cb=make_cb(name, handler)))
        await self.settle()  # the server knows the subscriptions: a request sent now finds a responder
        return subs


def _expired(msg: Msg) -> bool:
    """Whether a query's caller has given up on it (its deadline header is past)."""
    raw = (msg.headers or {}).get(HEADER_DEADLINE)
    if not raw:
        return False
    try:
        return time.time() > float(raw) + DEADLINE_SLACK_S
    except ValueError:
        return False

def _first_field(exc: ValidationError) -> str | None:
    errors = exc.errors()
    if not errors:
        return None
    return ".".join(str(part) for part in errors[0]["loc"]) or None


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def validation_reply(exc: ValidationError, prefix: str = "") -> Reply[Any]:
    """A Reply naming the first invalid field and every rule broken."""
    field = _first_field(exc)
    if prefix and field:
        field = f"{prefix}.{field}"
    return Reply.failure(ErrorCode.INVALID_ARGUMENT, _validation_message(exc), field)
