"""`engram status`: streams, consumers, lag and dead letters, read from JetStream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from nats.js.errors import NotFoundError
from rich.console import Console
from rich.table import Table

from contracts.subjects import AUTH, MEMORY
from deploy.client import StackInfo
from kit.bus import Bus
from kit.config import default_home


@dataclass
class Status:
    streams: list[dict[str, Any]]
    consumers: list[dict[str, Any]]
    gateway: str


async def collect(bus: Bus) -> Status:
    names = bus.names
    streams = []
    last_seq: dict[str, int] = {}
    for spec in names.streams():
        try:
            info = await bus.js.stream_info(spec.name)
        except NotFoundError:
            streams.append({"name": spec.name, "messages": "-", "bytes": "-", "last_seq": "-"})
            continue
        last_seq[spec.name] = info.state.last_seq
        streams.append({"name": spec.name, "messages": info.state.messages, "bytes": info.state.bytes,
                        "last_seq": info.state.last_seq})
    consumers = []
    specs = (
        names.command_consumer(AUTH), names.command_consumer(MEMORY), names.projector(MEMORY, "memory"),
        names.projector(MEMORY, "shared", name="shared-projector"),
    )
    for spec in specs:
        state = await bus.consumer_state(spec.stream, spec.durable)
        if state is None:
            consumers.append({"durable": spec.durable, "stream": spec.stream, "state": "not created"})
            continue
        info = await bus.js.consumer_info(spec.stream, spec.durable)
        consumers.append({
            "durable": spec.durable, "stream": spec.stream,
            "state": "running" if (info.num_waiting or 0) > 0 else "idle (no worker pulling)",
            "pending": state.pending, "ack_pending": state.ack_pending,
            "redelivered": state.redelivered, "ack_floor": state.ack_floor,
        })
    stack = StackInfo.load(default_home())
    gateway = "unknown (not started by `engram up`)"
    if stack:
        try:
            ok = httpx.get(stack.gateway_url + "/readyz", timeout=2).status_code == 200
            gateway = f"{stack.gateway_url} {'ready' if ok else 'not ready'}"
        except httpx.HTTPError:
            gateway = f"{stack.gateway_url} unreachable"
    return Status(streams, consumers, gateway)


def render(console: Console, status: Status) -> None:
    console.print(f"Gateway: {status.gateway}")
    streams = Table("stream", "messages", "bytes", "last seq", title="Streams")
    for s in status.streams:
        streams.add_row(s["name"], str(s["messages"]), str(s["bytes"]), str(s["last_seq"]))
    console.print(streams)
    consumers = Table("consumer", "stream", "state", "lag (pending)", "unacked", "redelivered", title="Consumers")
    for c in status.consumers:
        consumers.add_row(c["durable"], c["stream"], c["state"], str(c.get("pending", "-")),
                          str(c.get("ack_pending", "-")), str(c.get("redelivered", "-")))
    console.print(consumers)
