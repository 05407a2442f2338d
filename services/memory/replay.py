"""Rebuild the memory service's read models (Postgres tables, vector index) from the event log.

Run with the memory service stopped (`engram replay memory`): the read models are dropped, then
every event is applied again from sequence 1, in order, with the same projection code the
service uses — idempotent by sequence, so an interrupted replay can simply be run again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.js import api

from contracts.envelope import EventEnvelope
from contracts.subjects import MEMORY
from services.memory.application.service import PROJECTOR
from services.memory.config import MemorySettings
from services.memory.main import MemoryApp, memory_app

REPLAY_CHECKPOINT = "memory-replay"


class ServiceRunning(Exception):
    """The memory service is consuming: replaying under it would race its projections."""


@dataclass
class ReplayReport:
    events: int
    applied: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


async def ensure_service_stopped(app: MemoryApp) -> None:
    names = app.bus.names
    for spec in (names.command_consumer(MEMORY), names.projector(MEMORY, "memory")):
        try:
            info = await app.bus.js.consumer_info(spec.stream, spec.durable)
        except Exception:  # not created yet: nothing consumes
            continue
        if (info.num_waiting or 0) > 0:
            raise ServiceRunning(
                f"the memory service is running (consumer {spec.durable} has active pullers). "
                "Stop it first (Ctrl-C `engram up`, or scale the memory deployment to 0), then replay."
            )


async def rebuild(
    app: MemoryApp,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    batch: int = 256,
) -> ReplayReport:
    """Drop and rebuild every read model of the memory service from the event log."""
    started = time.perf_counter()
    await app.store.drop_read_model()
    await app.index.drop()
    await app.index.ensure()
    names = app.bus.names
    sub = await app.bus.js.pull_subscribe(
        f"{names.namespace}.evt.>",
        stream=names.events_stream,
        config=api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.ALL, ack_policy=api.AckPolicy.NONE, inactive_threshold=120.0,
        ),
    )
    info = await sub.consumer_info()
    total = info.num_pending or 0
    done = applied = 0
    on_progress(0, total)
    try:
        while done < total:
            msgs = await sub.fetch(min(batch, total - done), timeout=10.0)
            events = [(EventEnvelope.model_validate_json(m.data), m.metadata.sequence.stream) for m in msgs]
            await app.service.prime_events(events)
            for event, seq in events:
                if await app.service.project_event(event, seq, REPLAY_CHECKPOINT):
                    applied += 1
            done += len(msgs)
            on_progress(done, total)
    finally:
        await sub.unsubscribe()
    async with app.store.transaction() as tx:
        last = await app.store.checkpoint(REPLAY_CHECKPOINT)
        await tx.advance_checkpoint(PROJECTOR, last)
    optimize = getattr(app.index, "optimize", None)
    if optimize is not None:
        await optimize()  # build the vector index now, while nothing is waiting on it
    return ReplayReport(events=done, applied=applied, seconds=time.perf_counter() - started)


async def replay(settings: MemorySettings, on_progress: Callable[[int, int], None]) -> ReplayReport:
    async with memory_app(settings) as app:
        await ensure_service_stopped(app)
        return await rebuild(app, on_progress)
