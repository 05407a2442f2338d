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

#: events fetched at once. One: nats-py's fetch of n waits, after the first message, for the other
#: n-1 until its timeout (1 s in kit.bus.consume), so a lone save reached the graph ~0.5 s late on
#: average with 64 (measured: save → visible p50 467 ms, the save itself 36 ms); with 1 it is
#: handed over at once. A backlog (a restart after a replay) costs one fetch round trip per event.
FETCH_BATCH = 1


def consumer_spec(names: Names) -> ConsumerSpec:
    return ConsumerSpec(
        stream=names.events_stream, durable=PROJECTOR, filter_subject=f"{names.namespace}.evt.>",
        description="graph service: projects memory, daily-log and extraction-result events into the graph",
    )


def start(bus: Bus, projection: GraphProjection, stop: asyncio.Event) -> asyncio.Task[None]:
    """Consume the event log until ``stop`` is set, one event at a time in stream order (each
    fetch first learns, with one query, whether its events are projected already)."""
    return projection.projector.start(bus, consumer_spec(bus.names), PROJECTOR, stop, fetch=FETCH_BATCH)


async def serve_queries(bus: Bus, runtime: ServiceRuntime, concurrency: int = 32) -> list[Any]:
    return await runtime.serve_queries(bus, concurrency=concurrency)


__all__ = ["GRAPH", "consumer_spec", "serve_queries", "start"]
