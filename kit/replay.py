"""The replay runner: rebuild a service's read models from the event log.

Run with the service stopped (``engram replay <service>``): its read models are dropped, every
event is read again from sequence 1, in order, and applied by the service's own
:class:`kit.projector.CheckpointedProjector` (idempotent by sequence, so an interrupted replay can
simply be run again); then the live consumer's checkpoint moves to where the replay got.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.js import api

from contracts.events import Event
from contracts.subjects import ConsumerSpec
from kit.bus import Bus
from kit.projector import CheckpointedProjector

Progress = Callable[[int, int], None]


class ServiceRunning(Exception):
    """The service is consuming: replaying under it would race its projections."""


@dataclass
class ReplayReport:
    events: int
    applied: int
    seconds: float
    #: what a service adds about its read models (e.g. the memory service's points kept / written)
    details: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


class ReadModels(Protocol):
    """What a replay drops before and completes after (tables, indexes)."""

    async def drop(self) -> None:
        """Empty every read model (ready to be written again)."""

    async def finish(self) -> None:
        """After the last event: e.g. build search indexes while nothing waits on them."""


async def ensure_stopped(bus: Bus, service: str, consumers: Sequence[ConsumerSpec]) -> None:
    """Refuse (:class:`ServiceRunning`) while any of ``consumers`` has active pullers."""
    for spec in consumers:
        try:
            info = await bus.js.consumer_info(spec.stream, spec.durable)
        except Exception:  # not created yet: nothing consumes
            continue
        if (info.num_waiting or 0) > 0:
            raise ServiceRunning(
                f"the {service} service is running (consumer {spec.durable} has active pullers). "
                f"Stop it first (Ctrl-C `engram up`, or scale the {service} deployment to 0), then replay."
            )


async def rebuild(
    bus: Bus,
    projector: CheckpointedProjector[Any],
    read_models: ReadModels,
    *,
    replay_checkpoint: str,
    live_checkpoint: str,
    on_progress: Progress = lambda done, total: None,
    batch: int = 256,
    apply_batch: Callable[[Sequence[tuple[Event[Any], int]], str], Awaitable[int]] | None = None,
    flush: Callable[[], Awaitable[None]] | None = None,
) -> ReplayReport:
    """Drop ``read_models``, apply every event from sequence 1 with ``projector`` (checkpoint
    ``replay_checkpoint``), then advance ``live_checkpoint`` to where the replay got.
    ``apply_batch`` (the service's bulk path, optional) applies a whole fetched batch at once,
    returning how many events it wrote, instead of one transaction per event; ``flush`` (with it)
    completes what the last ``apply_batch`` left in flight, before the checkpoints move."""
    started = time.perf_counter()
    await read_models.drop()
    names = bus.names
    sub = await bus.js.pull_subscribe(
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
    # the next batch is fetched while this one is applied (a pipeline one batch deep)
    fetching = asyncio.ensure_future(sub.fetch(min(batch, total), timeout=10.0)) if total else None
    try:
        while fetching is not None:
            msgs = await fetching
            fetched = done + len(msgs)
            fetching = (asyncio.ensure_future(sub.fetch(min(batch, total - fetched), timeout=10.0))
                        if fetched < total else None)
            events = projector.routed((m.data, m.metadata.sequence.stream) for m in msgs)
            if apply_batch is not None:
                applied += await apply_batch(events, replay_checkpoint)
            else:
                await projector.prepare(events)
                for event, seq in events:
                    if await projector.project(event, seq, replay_checkpoint):
                        applied += 1
            done += len(msgs)
            on_progress(done, total)
        if flush is not None:
            await flush()
    finally:
        if fetching is not None:
            fetching.cancel()
        await sub.unsubscribe()
    await projector.move_checkpoint(replay_checkpoint, live_checkpoint)
    await read_models.finish()
    return ReplayReport(events=done, applied=applied, seconds=time.perf_counter() - started)
