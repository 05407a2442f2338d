"""The graph's bus entrypoints: one durable consumer of the whole event log (the graph projects
three aggregates, and one consumer keeps them in stream order: a memory's provenance log before
the memory, the node order close to the event order), and the query handlers."""

from __future__ import annotations

import asyncio
from typing import Any

from contracts.subjects import GRAPH, ConsumerSpec, Names
from kit.bus import Bus
from kit.service import ServiceRuntime
from services.graph.application.projection import PROJECTOR, GraphProjection

#: events fetched at once. A lone event is handed over as soon as it arrives (nats-py's fetch of n
#: returns what the server had; measured: a message published while a fetch of 64 waits arrives
#: in ~1 ms, as with a fetch of 1); a backlog (a restart, a replay handed over) comes in batches of
#: up to this many, each projected in one transaction (``GraphProjection.apply_batch``).
FETCH_BATCH = 256


def consumer_spec(names: Names) -> ConsumerSpec:
    return ConsumerSpec(
        stream=names.events_stream, durable=PROJECTOR, filter_subject=f"{names.namespace}.evt.>",
        description="graph service: projects memory, daily-log and extraction-result events into the graph",
    )


def start(bus: Bus, projection: GraphProjection, stop: asyncio.Event) -> asyncio.Task[None]:
    """Consume the event log until ``stop`` is set, in stream order: a lone event in its own
    transaction, a fetched batch of several in one (:meth:`GraphProjection.apply_batch`)."""
    return projection.projector.start(bus, consumer_spec(bus.names), PROJECTOR, stop, fetch=FETCH_BATCH,
                                      apply_batch=projection.apply_batch)


async def serve_queries(bus: Bus, runtime: ServiceRuntime, concurrency: int = 32) -> list[Any]:
    return await runtime.serve_queries(bus, concurrency=concurrency)


__all__ = ["GRAPH", "consumer_spec", "serve_queries", "start"]
