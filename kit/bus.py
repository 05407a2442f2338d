"""The Engram bus on NATS JetStream: streams, events with optimistic concurrency, commands with
idempotency keys and replies, core-NATS queries, and durable pull consumers with explicit ack,
backoff, bounded redelivery and a dead-letter stream.

This module is plumbing shared by every service; it knows message shapes from ``contracts`` and
nothing of any service's domain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from contracts.envelope import CommandEnvelope, EventEnvelope, OutcomeQuery, QueryEnvelope, Reply
from contracts.errors import ErrorCode
from contracts.messages import REGISTRY, fingerprint, load_all, scoped_command_id
from contracts.subjects import (
    HEADER_ERROR,
    HEADER_EXPECTED_LAST_SUBJECT_SEQ,
    HEADER_MSG_ID,
    HEADER_ORIGINAL_SEQ,
    HEADER_ORIGINAL_SUBJECT,
    HEADER_REPLY_TO,
    ConsumerSpec,
    Names,
    StreamSpec,
)
from kit import metrics, tracing
from kit.pg import deterministic_error, redact

log = logging.getLogger("engram.bus")

OUTCOME_QUERY = "command_outcome"
#: a command with no outcome after this long is checked: when its service is down, the caller is
#: told at once that it is queued (it waits in the stream and is applied when the service is back)
QUEUED_AFTER_S = 2.0
WRONG_LAST_SEQUENCE = 10071
PIPELINE_MIN_BATCH = 8
STREAM_NAME_IN_USE = 10058
#: a query's deadline (Unix time, seconds) in its NATS headers: past it the caller has given up, so a
#: service still holding the query in its queue drops it instead of answering no one (load shedding)
HEADER_DEADLINE = "Engram-Deadline"
#: clocks of the hosts may differ a little: a query is dropped only this long after its deadline
DEADLINE_SLACK_S = 0.25


class ConcurrencyConflict(Exception):
    """Another writer appended to the aggregate first (optimistic concurrency lost)."""


class PoisonMessage(Exception):
    """A message that can never be handled: it goes straight to the dead-letter stream."""


class BusUnavailable(Exception):
    """No service answered: the reason says what to start or check."""


Handler = Callable[[Msg], Awaitable[None]]
DeadHook = Callable[[Msg, str], Awaitable[None]]


@dataclass
class ConsumerState:
    """Progress of one durable consumer, for `engram status`."""

    stream: str
    durable: str
    delivered: int
    ack_floor: int
    pending: int
    ack_pending: int
    redelivered: int


def _stream_config(spec: StreamSpec, replicas: int) -> api.StreamConfig:
    return api.StreamConfig(
        name=spec.name,
        subjects=list(spec.subjects),
        retention=api.RetentionPolicy.WORK_QUEUE if spec.retention == "workqueue" else api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        duplicate_window=spec.duplicate_window_s,
        max_age=spec.max_age_s or None,
        max_msgs=spec.max_msgs or None,
        max_bytes=spec.max_bytes or None,
        num_replicas=replicas,
        description=spec.description,
        allow_direct=True,
    )


def _consumer_config(spec: ConsumerSpec) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=spec.durable,
        description=spec.description,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=spec.ack_wait_s,  # for every delivery: retry delays go with each NAK (spec.backoff_s)
        max_deliver=spec.max_deliver,
        backoff=None,
        filter_subject=spec.filter_subject,
        max_ack_pending=spec.max_ack_pending,
        inactive_threshold=spec.inactive_threshold_s,
    )


def dumps(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()


class Bus:
    """One NATS connection with JetStream, bound to a namespace of names."""

    def __init__(self, nc: NATS, names: Names) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.names = names
        #: the durable consumers this process runs (for the lag sampler, kit.metrics.sample_bus)
        self.consuming: dict[str, ConsumerSpec] = {}

    @classmethod
    async def connect(cls, url: str, names: Names, *, name: str = "engram") -> Bus:
        """Connect, retrying for a while so services can start before NATS is up."""
        try:
            nc = await nats.connect(
                [u.strip() for u in url.split(",") if u.strip()],
                name=name,
                connect_timeout=3,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
            )
        except Exception as exc:  # nats raises several unrelated types here
            raise BusUnavailable(
                f"cannot connect to NATS at {redact(url)}: {exc}. Start NATS (`engram up` does) "
                "or set ENGRAM_NATS_URL to a running server with JetStream enabled."
            ) from exc
        return cls(nc, names)

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()

    # streams and consumers ----------------------------------------------------------------
    async def ensure_streams(self, replicas: int = 1) -> None:
        """Create (or update to the declared config) every stream of the namespace."""
        for spec in self.names.streams():
            config = _stream_config(spec, replicas)
            try:
                await self.js.add_stream(config)
            except APIError as exc:
                if exc.err_code != STREAM_NAME_IN_USE:
                    raise
                await self.js.update_stream(config)

    async def delete_streams(self) -> int:
        """Delete every stream of the namespace — the event log included (tests and benchmarks
        clean up with it; nothing in Engram calls it). Returns how many existed."""
        deleted = 0
        for spec in self.names.streams():
            try:
                await self.js.delete_stream(spec.name)
                deleted += 1
            except NotFoundError:
                pass
        return deleted

    async def ensure_consumer(self, spec: ConsumerSpec) -> None:
        """Create the durable consumer, or update its settings when it exists."""
        await self.js.add_consumer(spec.stream, _consumer_config(spec))

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState | None:
        try:
            info = await self.js.consumer_info(stream, durable)
        except NotFoundError:
            return None
        return ConsumerState(
            stream=stream,
            durable=durable,
            delivered=info.delivered.stream_seq if info.delivered else 0,
            ack_floor=info.ack_floor.stream_seq if info.ack_floor else 0,
            pending=info.num_pending or 0,
            ack_pending=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
        )

    async def dead_letter_counts(self) -> dict[str, int]:
        """Dead letters kept in the dead-letter stream, by the durable consumer that gave up on them."""
        info = await self.js.stream_info(self.names.dead_letter_stream, subjects_filter=f"{self.names.namespace}.dlq.>")
        counts: dict[str, int] = {}
        for subject, n in (info.state.subjects or {}).items():
            durable = subject.rsplit(".", 1)[-1]
            counts[durable] = counts.get(durable, 0) + int(n)
        return counts

    # events -------------------------------------------------------------------------------
    async def append_event(self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None) -> int:
        """Append ``event`` to the event stream; return its stream sequence.

        ``expected_last_seq`` is the aggregate subject's last sequence the writer saw (0 for a new
        aggregate); a different actual value raises ConcurrencyConflict. A retry of the same
        event (same ``event_id``) is recognised and returns the original sequence.
        """
        seq, _ = await self._append(subject, event, expected_last_seq)
        return seq

    async def append_event_once(
        self, subject: str, event: EventEnvelope, *, expected_last_seq: int | None,
    ) -> tuple[int, EventEnvelope]:
        """:meth:`append_event`, and the event as the log holds it: for a retry of an event already
        appended (same ``event_id``), the first attempt's — its timestamps, not the retry's — so
        that what a retried command projects and answers is what a replay of the log gives."""
        seq, stored = await self._append(subject, event, expected_last_seq)
        return seq, stored if stored is not None else event

    async def _append(
        self, subject: str, event: EventEnvelope, expected_last_seq: int | None,
    ) -> tuple[int, EventEnvelope | None]:
        """(sequence, the stored event if this was a retry of it, else None)."""
        headers = tracing.inject({HEADER_MSG_ID: str(event.event_id)})  # its consumers continue the trace
        if expected_last_seq is not None:
            headers[HEADER_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_seq)
        try:
            ack = await self._publish(subject, dumps(event), headers, self.names.events_stream)
        except APIError as exc:
            if exc.err_code != WRONG_LAST_SEQUENCE:
                raise
            last = await self.last_event(subject)
            if last is not None and last[0].event_id == event.event_id:
                return last[1], last[0]
            raise ConcurrencyConflict(f"{subject}: expected last sequence {expected_last_seq}") from exc
        if ack.duplicate:  # the same event id within the stream's duplicate window: the first one's
            raw = await self.js.get_msg(self.names.events_stream, seq=int(ack.seq))
            assert raw.data is not None
            return int(ack.seq), EventEnvelope.model_validate_json(raw.data)
        return int(ack.seq), None

    async def last_event(self, subject: str) -> tuple[EventEnvelope, int] | None:
        """The newest event on one aggregate subject (its current state), with its sequence."""
        try:
            raw = await self.js.get_last_msg(self.names.events_stream, subject)
        except NotFoundError:
            return None
        assert raw.data is not None and raw.seq is not None
        return EventEnvelope.model_validate_json(raw.data), int(raw.seq)

    async def history(self, subject: str) -> list[tuple[EventEnvelope, int]]:
        """Every event of one aggregate subject, oldest first (one direct read per event)."""
        out: list[tuple[EventEnvelope, int]] = []
        seq = 1
        while (found := await self._event_from(subject, seq)) is not None:
            out.append(found)
            seq = found[1] + 1
        return out

    async def first_event(self, subject: str) -> tuple[EventEnvelope, int] | None:
        """The oldest event on one aggregate subject (what created it), with its sequence."""
        return await self._event_from(subject, 1)

    async def _event_from(self, subject: str, seq: int) -> tuple[EventEnvelope, int] | None:
        """The first event of ``subject`` at or after stream sequence ``seq``."""
        try:
            raw = await self.js.get_msg(self.names.events_stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return None
        assert raw.data is not None and raw.seq is not None
        return EventEnvelope.model_validate_json(raw.data), int(raw.seq)

    async def _publish(self, subject: str, data: bytes, headers: dict[str, str], stream: str) -> api.PubAck:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type((asyncio.TimeoutError, nats.errors.TimeoutError)),
            stop=stop_after_attempt(4),
            wait=wait_exponential(multiplier=0.1, max=2.0),
            reraise=True,
        ):
            with attempt:
                return await self.js.publish(subject, data, headers=dict(headers), stream=stream, timeout=5.0)
        raise AssertionError("unreachable")

    # commands -----------------------------------------------------------------------------
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
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox, max_msgs=1)
        try:
            ack = await self._publish(
                self.names.command(service, name),
                dumps(command),
                tracing.inject({HEADER_MSG_ID: scoped_command_id(command.tenant, name, command.command_id),
                                HEADER_REPLY_TO: inbox}),
                self.names.commands_stream,
            )
            if not ack.duplicate:
                quick = min(timeout, QUEUED_AFTER_S)
                try:
                    msg = await sub.next_msg(timeout=quick)
                    return Reply[Any].model_validate_json(msg.data)
                except nats.errors.TimeoutError:
                    pass
                if not await self.service_alive(service):
                    return queued(service, command.command_id)
                try:
                    msg = await sub.next_msg(timeout=max(0.01, timeout - quick))
                    return Reply[Any].model_validate_json(msg.data)
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
                    return Reply[Any].model_validate(result["outcome"])
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

    # queries ------------------------------------------------------------------------------
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
            reply = Reply[Any].model_validate_json(msg.data)
            outcome = "ok" if reply.ok else str(reply.error.code.value if reply.error else "error")
            return reply

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
                            await msg.respond(dumps(reply))

            async def callback(msg: Msg) -> None:
                asyncio.get_running_loop().create_task(answer(msg))

            return callback

        for name, handler in handlers.items():
            subs.append(await self.nc.subscribe(self.names.query(service, name), queue=service, cb=make_cb(name, handler)))
        await self.nc.flush()  # the server knows the subscriptions: a request sent now finds a responder
        return subs

    # consumers ----------------------------------------------------------------------------
    async def consume(
        self,
        spec: ConsumerSpec,
        handler: Handler,
        stop: asyncio.Event,
        *,
        batch: int = 64,
        on_dead: DeadHook | None = None,
        prepare: Callable[[list[Msg]], Awaitable[None]] | None = None,
        concurrency: int = 1,
        after_batch: Callable[[], Awaitable[None]] | None = None,
        handle_batch: Callable[[list[Msg]], Awaitable[None]] | None = None,
    ) -> None:
        """Run a durable pull consumer until ``stop`` is set.

        Messages are handled one at a time in stream order. Success → ack. PoisonMessage or an
        unparsable message → dead-letter stream, then term. Any other error → nak with the
        spec's backoff; after ``max_deliver`` attempts → dead-letter stream, then term.
        ``prepare`` sees each fetched batch first (e.g. to embed all texts in one call); a failure
        there is only logged, since every message is still handled on its own. ``concurrency`` > 1
        handles up to that many messages of a batch at once — only for handlers whose writes are
        safe to interleave (e.g. guarded by optimistic concurrency), never for order-sensitive ones.
        ``after_batch`` runs once each fetched batch is handled (e.g. to record progress once per
        batch rather than per message); a failure there is only logged. ``handle_batch`` handles a
        fetched batch of several messages at once, in order (e.g. one transaction for a backlog);
        all are then acked — if it fails they are handled one by one as above (retries, dead letters).
        """
        await self.ensure_consumer(spec)
        sub = await self.js.pull_subscribe_bind(spec.durable, stream=spec.stream)
        self.consuming[spec.durable] = spec
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(m: Msg) -> None:
            async with gate:
                await self._handle(spec, m, handler, on_dead)

        async def handle_all(msgs: list[Msg]) -> None:
            if handle_batch is not None and len(msgs) > 1 and await whole(msgs):
                pass
            elif concurrency <= 1:
                for msg in msgs:
                    await self._handle(spec, msg, handler, on_dead)
            else:
                await asyncio.gather(*(one(m) for m in msgs))
            if after_batch is not None:
                try:
                    await after_batch()
                except Exception:
                    log.exception("%s: after-batch step failed", spec.durable)

        async def whole(msgs: list[Msg]) -> bool:
            assert handle_batch is not None
            try:
                await handle_batch(msgs)
            except Exception:
                log.exception("%s: a batch of %s failed as a whole; handling one by one", spec.durable, len(msgs))
                return False
            for msg in msgs:
                await msg.ack()
            metrics.CONSUMER_MESSAGES.labels(spec.durable, "ack").inc(len(msgs))
            return True

        async def prepared(msgs: list[Msg]) -> None:
            if prepare is None or not msgs:
                return
            try:
                await prepare(msgs)
            except Exception:
                log.exception("%s: batch preparation failed; handling one by one", spec.durable)

        # Under load, batch N+1 is prepared (e.g. embedded, off the event loop) while batch N is
        # handled, and batch N+2 is fetched and starts preparing before N+1's preparation is
        # awaited, so the preparing side (the embedder) never waits for a fetch or for a lookup
        # at the start of the next batch. A short fetch (no backlog) drains what is queued at
        # once, so a lone message never waits.
        queue: deque[tuple[list[Msg], asyncio.Future[None]]] = deque()

        async def handle_oldest() -> None:
            head, preparing = queue.popleft()
            await preparing
            await handle_all(head)

        try:
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(batch, timeout=0.05 if queue else 1.0)
                except (TimeoutError, nats.errors.TimeoutError):
                    msgs = []
                except nats.errors.ConnectionClosedError:
                    return
                except Exception as exc:  # noqa: BLE001 - the consumer must outlive any failed fetch
                    # e.g. a clustered NATS electing the consumer's new leader after a node was lost
                    # (503 / no responders): the loop fetches again; before this, the consumer task
                    # ended and the service stopped handling its messages while looking healthy
                    log.warning("%s: fetch failed (%s: %s); fetching again", spec.durable, type(exc).__name__, exc)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=0.5)
                    msgs = []
                if msgs:
                    queue.append((msgs, asyncio.ensure_future(prepared(msgs))))
                backlog = len(msgs) >= PIPELINE_MIN_BATCH
                while queue and (len(queue) > 1 or not backlog):
                    await handle_oldest()
            while queue:
                await handle_oldest()
        finally:
            self.consuming.pop(spec.durable, None)
            try:
                await sub.unsubscribe()
            except Exception:  # the connection may already be draining
                pass

    async def _handle(self, spec: ConsumerSpec, msg: Msg, handler: Handler, on_dead: DeadHook | None) -> None:
        attempt = msg.metadata.num_delivered
        with tracing.span(f"{spec.durable} handle", kind=tracing.SpanKind.CONSUMER, headers=msg.headers,
                          attributes={"messaging.system": "nats", "messaging.destination.name": msg.subject,
                                      "engram.attempt": attempt}) as current:
            try:
                await handler(msg)
            except (PoisonMessage, ValidationError, json.JSONDecodeError, UnicodeDecodeError) as exc:
                tracing.mark_error(current, type(exc).__name__)
                await self._dead_letter(spec, msg, f"{type(exc).__name__}: {exc}", on_dead)
                return
            except Exception as exc:
                tracing.mark_error(current, type(exc).__name__)
                if deterministic_error(exc):  # the same data fails the same way: retries would only hold it up
                    await self._dead_letter(spec, msg, f"{type(exc).__name__}: {exc} (poison: not retried)", on_dead)
                    return
                if attempt >= spec.max_deliver:
                    log.exception("%s: giving up on seq %s after %s attempts", spec.durable,
                                  msg.metadata.sequence.stream, attempt)
                    await self._dead_letter(spec, msg, f"{type(exc).__name__}: {exc} (after {attempt} attempts)", on_dead)
                    return
                delay = spec.backoff_s[min(attempt - 1, len(spec.backoff_s) - 1)] if spec.backoff_s else None
                log.warning("%s: attempt %s failed (%s); retrying in %ss", spec.durable, attempt, exc, delay)
                metrics.CONSUMER_MESSAGES.labels(spec.durable, "retry").inc()
                await msg.nak(delay=delay)
                return
            await msg.ack()
            metrics.CONSUMER_MESSAGES.labels(spec.durable, "ack").inc()

    async def _dead_letter(self, spec: ConsumerSpec, msg: Msg, reason: str, on_dead: DeadHook | None) -> None:
        seq = msg.metadata.sequence.stream
        headers = {
            HEADER_MSG_ID: f"dlq-{spec.stream}-{seq}",
            HEADER_ORIGINAL_SUBJECT: msg.subject,
            HEADER_ORIGINAL_SEQ: str(seq),
            HEADER_ERROR: reason[:2000].replace("\r", " ").replace("\n", " "),
        }
        await self._publish(self.names.dead_letter(spec.stream, spec.durable), msg.data, headers, self.names.dead_letter_stream)
        log.error("%s: seq %s dead-lettered: %s", spec.durable, seq, reason)
        metrics.CONSUMER_MESSAGES.labels(spec.durable, "dead").inc()
        metrics.DEAD_LETTERS.labels(spec.durable).inc()
        if on_dead is not None:
            try:
                await on_dead(msg, reason)
            except Exception:
                log.exception("%s: dead-letter hook failed", spec.durable)
        await msg.term()


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


async def reply_to(bus: Bus, msg: Msg, reply: Reply[Any]) -> None:
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
