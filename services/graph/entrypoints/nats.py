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


def consumer_spec(names: Names) -> ConsumerSpec:
    return ConsumerSpec(
        stream=names.events_stream, durable=PROJECTOR, filter_subject=f"{names.namespace}.evt.>",
        description="graph service: projects memory, daily-log and extraction-result events into the graph",
    )


def start(bus: Bus, projection: GraphProjection, stop: asyncio.Event) -> asyncio.Task[None]:
    """Consume the event log until ``stop`` is set, one event at a time in stream order (each
    fetched batch first learns, with one query, which of its events are projected already)."""
    return projection.projector.start(bus, consumer_spec(bus.names), PROJECTOR, stop)


async def serve_queries(bus: Bus, runtime: ServiceRuntime, concurrency: int = 32) -> list[Any]:
    return await runtime.serve_queries(bus, concurrency=concurrency)


__all__ = ["GRAPH", "consumer_spec", "serve_queries", "start"]
