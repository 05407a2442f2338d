"""`engram dlq`: the dead-letter stream — list, show and re-drive what a service gave up on.

A consumer dead-letters a message it can never handle (unparsable, a deterministic Postgres
error such as invalid data) at once, and any other after ``max_deliver`` failed attempts
(kit/bus.py). Each dead letter keeps the message's bytes and, in headers, where it came from
(``Engram-Original-Subject``, ``Engram-Original-Sequence``) and why it failed (``Engram-Error``).
Its id here is its sequence in the ``<NS>_DLQ`` stream.

``redrive ID`` publishes the message again to its original subject and then removes the dead
letter. The publish carries the message id ``redrive-<stream>-<ID>``, so running it twice (a
crash between the publish and the removal) publishes once (JetStream's duplicate window); the
command itself is idempotent by its key in the owning service. Commands only: a dead-lettered
*event* is re-applied by ``engram replay <service>``, since publishing it again would append it
to the event log a second time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, TypeVar

import typer
from nats.js.errors import NotFoundError
from rich.console import Console
from rich.table import Table

from contracts.subjects import HEADER_ERROR, HEADER_MSG_ID, HEADER_ORIGINAL_SEQ, HEADER_ORIGINAL_SUBJECT
from kit.bus import Bus

__all__ = ["DeadLetter", "app", "dead_letters", "get", "redrive"]

app = typer.Typer(help="The dead-letter stream: list, show and re-drive messages a service gave up on.",
                  no_args_is_help=True)
console = Console()
T = TypeVar("T")


class DlqError(Exception):
    """A dead letter that does not exist, or cannot be re-driven."""


@dataclass
class DeadLetter:
    """One message in the dead-letter stream."""

    id: int
    subject: str  # <ns>.dlq.<stream>.<consumer>
    time: datetime | None
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def consumer(self) -> str:
        return self.subject.rsplit(".", 1)[-1]

    @property
    def original_subject(self) -> str:
        return self.headers.get(HEADER_ORIGINAL_SUBJECT, "")

    @property
    def error(self) -> str:
        return self.headers.get(HEADER_ERROR, "")

    def envelope(self) -> dict[str, Any] | None:
        """The message as JSON (a command or event envelope), or None if it is not JSON."""
        try:
            doc = json.loads(self.data)
        except (ValueError, UnicodeDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def summary(self) -> dict[str, Any]:
        env = self.envelope() or {}
        return {"id": self.id, "time": self.time.isoformat() if self.time else None, "consumer": self.consumer,
                "original_subject": self.original_subject, "original_seq": self.headers.get(HEADER_ORIGINAL_SEQ),
                "type": env.get("type"), "tenant": env.get("tenant"), "command_id": env.get("command_id"),
                "error": self.error}


async def get(bus: Bus, dead_id: int) -> DeadLetter:
    """The dead letter ``dead_id`` (:class:`DlqError` if there is none)."""
    try:
        raw = await bus.js.get_msg(bus.names.dead_letter_stream, seq=dead_id)
    except NotFoundError as exc:
        raise DlqError(f"no dead letter {dead_id} in {bus.names.dead_letter_stream}") from exc
    return DeadLetter(id=int(raw.seq or dead_id), subject=raw.subject or "", time=raw.time, data=raw.data or b"",
                      headers={str(k): str(v) for k, v in (raw.headers or {}).items()})


async def dead_letters(bus: Bus, limit: int = 1000) -> list[DeadLetter]:
    """The dead letters kept (oldest first, at most ``limit``)."""
    stream = bus.names.dead_letter_stream
    try:
        info = await bus.js.stream_info(stream)
    except NotFoundError:
        return []
    out: list[DeadLetter] = []
    if not info.state.messages:
        return out
    seq = info.state.first_seq
    while seq <= info.state.last_seq and len(out) < limit:
        try:
            out.append(await get(bus, seq))
        except DlqError:  # removed (re-driven)
            pass
        seq += 1
    return out


async def redrive(bus: Bus, dead_id: int) -> DeadLetter:
    """Publish dead letter ``dead_id`` to its original subject again, then remove it."""
    dead = await get(bus, dead_id)
    subject = dead.original_subject
    commands = f"{bus.names.namespace}.cmd."
    if not subject.startswith(commands):
        raise DlqError(f"dead letter {dead_id} came from {subject or 'an unknown subject'}: only commands "
                       f"({commands}*) are re-driven; events are re-applied with `engram replay <service>`")
    stream = bus.names.dead_letter_stream
    await bus.js.publish(subject, dead.data, headers={HEADER_MSG_ID: f"redrive-{stream}-{dead_id}"})
    await bus.js.delete_msg(stream, dead_id)
    return dead


# the CLI ----------------------------------------------------------------------------------------
def _run(work: Callable[[Bus], Awaitable[T]]) -> T:
    async def go() -> T:
        from deploy.client import connect

        bus = await connect()
        try:
            return await work(bus)
        finally:
            await bus.close()

    try:
        return asyncio.run(go())
    except DlqError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc


@app.command(name="list")
def list_command(
    limit: Annotated[int, typer.Option(min=1, help="at most this many, oldest first")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per dead letter")] = False,
) -> None:
    """List dead letters: id, when, the consumer that gave up, the command, and why."""
    found = _run(lambda bus: dead_letters(bus, limit))
    if as_json:
        for dead in found:
            typer.echo(json.dumps(dead.summary()))
        return
    if not found:
        console.print("No dead letters.")
        return
    table = Table("id", "time", "consumer", "message", "error", title=f"Dead letters ({len(found)})")
    for dead in found:
        s = dead.summary()
        what = f"{s['type'] or '?'} ({s['tenant'] or '-'})" if s["type"] else dead.original_subject
        table.add_row(str(dead.id), s["time"] or "", dead.consumer, what, dead.error[:120])
    console.print(table)


@app.command(name="show")
def show_command(dead_id: Annotated[int, typer.Argument(help="the id shown by `engram dlq list`")]) -> None:
    """Show one dead letter: its headers (where it came from, the error) and the message."""
    dead = _run(lambda bus: get(bus, dead_id))
    typer.echo(json.dumps({**dead.summary(), "headers": dead.headers,
                           "message": dead.envelope() if dead.envelope() is not None
                           else dead.data.decode("utf-8", "replace")}, indent=2, ensure_ascii=False))


@app.command(name="redrive")
def redrive_command(
    dead_id: Annotated[int | None, typer.Argument(help="the id shown by `engram dlq list`")] = None,
    all_: Annotated[bool, typer.Option("--all", help="re-drive every dead command")] = False,
) -> None:
    """Publish a dead command to its original subject again (after fixing what made it fail)."""
    if (dead_id is None) == (not all_):
        console.print("[red]give one dead letter id, or --all[/red]")
        raise typer.Exit(2)

    async def work(bus: Bus) -> list[DeadLetter]:
        if dead_id is not None:
            return [await redrive(bus, dead_id)]
        done = []
        for dead in await dead_letters(bus, limit=1_000_000):
            if dead.original_subject.startswith(f"{bus.names.namespace}.cmd."):
                done.append(await redrive(bus, dead.id))
        return done

    done = _run(work)
    for dead in done:
        console.print(f"re-driven {dead.id} → {dead.original_subject}")
    if not done:
        console.print("Nothing to re-drive.")
