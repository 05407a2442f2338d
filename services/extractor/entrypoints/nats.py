"""The extractor's consumer of daily-log events: a named durable pull consumer on the event stream,
filtered to the daily-log aggregate; each event → a notice → the application (ack on success, nak
with backoff on a transient failure, dead-letter after max_deliver)."""

from __future__ import annotations

import asyncio
import logging

from nats.aio.msg import Msg

from contracts.daily_logs import DailyLogState
from contracts.events import Event
from contracts.subjects import ConsumerSpec, Names
from kit import events
from kit.bus import Bus
from services.extractor.application.extraction import Extractor
from services.extractor.application.ports import LogNotice

log = logging.getLogger("engram.extractor")

EXTRACTOR = "extractor"


def consumer_spec(names: Names, aggregate: str, *, ack_wait_s: float = 120.0, max_deliver: int = 5) -> ConsumerSpec:
    """The durable consumer every extractor replica shares (JetStream hands each event to one)."""
    return ConsumerSpec(
        stream=names.events_stream, durable=f"{EXTRACTOR}-logs", filter_subject=names.events_of(aggregate),
        ack_wait_s=ack_wait_s, max_deliver=max_deliver,
        description="extractor: extracts memories from daily logs (exactly once per log and task)",
    )


def notice_from_event(event: Event[DailyLogState], seq: int) -> LogNotice:
    """Where the log stands after the event: its ``data`` is the log's whole new state
    (``processing_status``, ``version``, ``project``); a deleted log's tombstone is never pending.
    (``seq``, the event's stream sequence, stands in for a version only an event without a
    ``DailyLogState`` could lack.)"""
    log_state = event.data
    return LogNotice(
        tenant=event.tenant, log_id=event.aggregate_id,
        status="deleted" if log_state.deleted else log_state.processing_status.value,
        version=log_state.version or seq, project=log_state.project, since=event.occurred_at,
    )


async def tenants_in_event_log(bus: Bus, aggregate: str) -> set[str]:
    """Every tenant with an event of ``aggregate`` on the event log (a replay of its subjects)."""
    return {event.tenant for event, _ in await events.history(bus, bus.names.events_of(aggregate))}


def start(bus: Bus, extractor: Extractor, spec: ConsumerSpec, stop: asyncio.Event, *,
          concurrency: int = 2) -> asyncio.Task[None]:
    """Consume daily-log events until ``stop`` is set."""

    async def on_event(msg: Msg) -> None:
        event = events.parse_known(msg.data)  # (data that is no DailyLogState: dead-lettered)
        if event is None or not isinstance(event.data, DailyLogState):
            return
        report = await extractor.handle(notice_from_event(event, msg.metadata.sequence.stream))
        if report.outcome.value not in ("ignored", "waiting"):
            log.info("log %s: %s (%s facts, %s saved, %s updated, %s kept)", event.aggregate_id,
                     report.outcome.value, report.facts, report.saved, report.updated, report.kept)

    return asyncio.create_task(bus.consume(spec, on_event, stop, batch=16, concurrency=concurrency))
