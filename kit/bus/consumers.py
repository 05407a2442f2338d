"""The bus's durable pull consumers: explicit ack, a retry delay with each NAK, bounded
redelivery, the dead-letter stream, and the batch pipeline (batch N handled while N+1 is
prepared and N+2 fetched)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable

import nats
from nats.aio.msg import Msg
from pydantic import ValidationError

from contracts.subjects import (
    HEADER_ERROR,
    HEADER_MSG_ID,
    HEADER_ORIGINAL_SEQ,
    HEADER_ORIGINAL_SUBJECT,
    ConsumerSpec,
)
from kit import metrics, tracing
from kit.bus.connection import Handler
from kit.bus.streams import Streams
from kit.pg import deterministic_error

__all__ = ["DeadHook", "Consumers", "PoisonMessage"]

log = logging.getLogger("engram.bus")

PIPELINE_MIN_BATCH = 8

DeadHook = Callable[[Msg, str], Awaitable[None]]


class PoisonMessage(Exception):
    """A message that can never be handled: it goes straight to the dead-letter stream."""


class Consumers(Streams):
    """Running a durable consumer."""

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
