"""`engram status`: the processes `engram up` supervises (from ENGRAM_HOME/supervisor.json), and
streams, consumers, lag and dead letters, read from JetStream."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from nats.js.errors import NotFoundError
from rich.console import Console
from rich.table import Table

from contracts.subjects import AUTH, MEMORY, ConsumerSpec
from deploy.client import StackInfo
from deploy.embedded.ports import pid_is_alive
from deploy.supervisor import STOPPED, uptime_text
from kit.bus import Bus
from kit.config import default_home

SUPERVISOR_FILE = "supervisor.json"


@dataclass
class Processes:
    """What supervisor.json says; ``live`` is False when the `engram up` that wrote it is gone."""

    processes: list[dict[str, Any]] = field(default_factory=list)
    live: bool = False
    updated_at: float | None = None
    path: Path | None = None


def read_processes(home: Path) -> Processes | None:
    path = home / SUPERVISOR_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = int(doc.get("engram_up_pid") or 0)
    live = pid > 0 and pid != os.getpid() and pid_is_alive(pid)
    processes = list(doc.get("processes") or [])
    if not live:  # the `engram up` that wrote it is gone (killed): so are its children
        processes = [{**p, "state": STOPPED, "pid": None} for p in processes]
    return Processes(processes, live, doc.get("updated_at"), path)


def render_processes(console: Console, found: Processes | None, now: float | None = None) -> None:
    if found is None:
        console.print("Processes: unknown (no supervisor.json: not started by `engram up`)")
        return
    now = now if now is not None else time.time()
    title = "Processes (engram up)" if found.live else "Processes (engram up is not running; last known)"
    table = Table("process", "state", "pid", "restarts", "uptime", "last exit", "metrics", title=title)
    for p in found.processes:
        last = p.get("last_exit") or "-"
        if p.get("last_exit_at"):
            last += f" ({time.strftime('%H:%M:%S', time.localtime(float(p['last_exit_at'])))})"
        state = str(p.get("state", "?"))
        if state == "restarting" and p.get("next_start_at"):
            state += f" (in {max(0.0, float(p['next_start_at']) - now):.1f} s)"
        metrics = f":{p['metrics_port']}/metrics" if p.get("metrics_port") else "-"
        table.add_row(str(p.get("name")), state, str(p.get("pid") or "-"), str(p.get("restarts", 0)),
                      uptime_text(p, now), last, metrics)
    console.print(table)
    for p in found.processes:
        if p.get("state") == "crash-looping" and p.get("last_log"):
            console.print(f"[red]{p['name']} is crash-looping[/red]; its last lines:\n" + "\n".join(
                f"    {line}" for line in p["last_log"]), highlight=False)


#: the extractor's durable consumer of daily-log events and its schema (services/extractor)
EXTRACTOR_DURABLE = "extractor-logs"
EXTRACTOR_SCHEMA = "extractor"
#: the graph's durable consumer of the event log (services/graph/entrypoints/nats.py)
GRAPH_DURABLE = "graph-projector"


@dataclass
class Status:
    streams: list[dict[str, Any]]
    consumers: list[dict[str, Any]]
    gateway: str
    extraction_tasks: dict[str, int] | None = None
    extraction_note: str = ""
    extraction_mode: str = "unknown"


async def extraction_tasks(database_url: str | None) -> tuple[dict[str, int] | None, str]:
    """The extractor's tasks by state (running / done / failed), or why they are unknown."""
    if not database_url:
        return None, "unknown (no database URL: set ENGRAM_DATABASE_URL)"
    from services.extractor.main import task_counts

    try:
        counts = await asyncio.wait_for(
            task_counts(database_url, os.environ.get("ENGRAM_EXTRACTOR_SCHEMA", EXTRACTOR_SCHEMA)), 10)
    except Exception as exc:  # noqa: BLE001 - status reports, it does not fail
        return None, f"unknown ({type(exc).__name__}: {exc})"
    if counts is None:
        return None, "none yet (the extractor has not started)"
    return counts, ""


async def collect(bus: Bus, database_url: str | None = None) -> Status:
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
    try:
        dead = await bus.dead_letter_counts()
    except Exception:  # noqa: BLE001 - no dead-letter stream yet: none
        dead = {}
    specs = (
        names.command_consumer(AUTH), names.command_consumer(MEMORY), names.projector(MEMORY, "memory"),
        names.projector(MEMORY, "shared", name="shared-projector"),
        ConsumerSpec(stream=names.events_stream, durable=EXTRACTOR_DURABLE, filter_subject=""),
        ConsumerSpec(stream=names.events_stream, durable=GRAPH_DURABLE, filter_subject=""),
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
            "redelivered": state.redelivered, "ack_floor": state.ack_floor, "dead_letters": dead.get(spec.durable, 0),
        })
    listed = {c["durable"] for c in consumers}
    for stream in (names.events_stream, names.commands_stream):  # every other durable consumer (projectors…)
        try:
            found = await bus.js.consumers_info(stream)
        except NotFoundError:
            continue
        for info in sorted(found, key=lambda i: i.name):
            if info.name in listed or not info.config.durable_name:
                continue
            consumers.append({
                "durable": info.name, "stream": stream,
                "state": "running" if (info.num_waiting or 0) > 0 else "idle (no worker pulling)",
                "pending": info.num_pending or 0, "ack_pending": info.num_ack_pending or 0,
                "redelivered": info.num_redelivered or 0,
                "ack_floor": info.ack_floor.stream_seq if info.ack_floor else 0, "dead_letters": dead.get(info.name, 0),
            })
    stack = StackInfo.load(default_home())
    gateway = "unknown (not started by `engram up`)"
    if stack:
        try:
            ok = httpx.get(stack.gateway_url + "/readyz", timeout=2).status_code == 200
            gateway = f"{stack.gateway_url} {'ready' if ok else 'not ready'}"
        except httpx.HTTPError:
            gateway = f"{stack.gateway_url} unreachable"
    tasks, note = await extraction_tasks(database_url)
    return Status(streams, consumers, gateway, tasks, note, await extraction_mode(bus))


async def extraction_mode(bus: Bus) -> str:
    """The install's default extraction mode, as the running extractor says (``GetExtractionModes``)."""
    from contracts.extraction_modes import ExtractionModes, GetExtractionModes
    from kit.client import Client

    try:
        modes: ExtractionModes = await asyncio.wait_for(Client(bus).ask(None, GetExtractionModes()), 5)
    except Exception as exc:  # noqa: BLE001 - status reports, it does not fail
        return f"unknown (the extractor did not answer: {type(exc).__name__})"
    if modes.default.value == "handoff":
        return f"handoff (agents first, the engine after {modes.handoff_minutes:g} min)"
    return modes.default.value



def render(console: Console, status: Status) -> None:
    console.print(f"Gateway: {status.gateway}")
    streams = Table("stream", "messages", "bytes", "last seq", title="Streams")
    for s in status.streams:
        streams.add_row(s["name"], str(s["messages"]), str(s["bytes"]), str(s["last_seq"]))
    console.print(streams)
    consumers = Table("consumer", "stream", "state", "lag (pending)", "unacked", "redelivered", "dead letters",
                      title="Consumers")
    for c in status.consumers:
        consumers.add_row(c["durable"], c["stream"], c["state"], str(c.get("pending", "-")),
                          str(c.get("ack_pending", "-")), str(c.get("redelivered", "-")), str(c.get("dead_letters", "-")))
    console.print(consumers)
    console.print(f"Extraction mode (install default; projects may set their own): {status.extraction_mode}")
    if status.extraction_tasks is not None:
        order = ("running", "done", "failed")
        counts = status.extraction_tasks
        parts = [f"{counts.get(k, 0)} {k}" for k in order] + [f"{v} {k}" for k, v in counts.items() if k not in order]
        console.print("Extraction tasks: " + ", ".join(parts))
    else:
        console.print(f"Extraction tasks: {status.extraction_note}")
