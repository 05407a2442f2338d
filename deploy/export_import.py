"""`engram export`, `engram import` and `engram purge`: a user's memories out, in, and gone.

They talk to the running install over NATS as its operator (like `engram keys`), so they need no
API key: whoever can reach the install's NATS is its operator. Progress bars are rich's (already
the CLI's library for tables): one line per record kind on export, a bar over the items on import.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from contracts.daily_logs import SaveDailyLogResult
from contracts.memory import PROJECT_PATTERN, SaveMemoryResult
from contracts.portability import (
    MAX_NAMED_KEYS,
    MAX_RESTORE_RECORDS,
    RESTORE_BATCH_BYTES,
    NamedKey,
    Record,
    RestoreAuthUser,
    RestoreRecords,
    RestoreResult,
)
from deploy.import_formats import (
    FORMATS,
    ImportFormatError,
    ImportItem,
    chat_items,
    detect,
    engram_lines,
    key_for,
    mem0_items,
    supermemory_items,
)
from kit.bus import Bus
from kit.client import Client, ServiceFailure
from kit.export import export_lines
from kit.purge import ADMIN_TENANT, purge_user

err = Console(stderr=True)
USER_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
#: Commands of an import in flight at once: saves (the memory service embeds a fetched batch in
#: one call, so several dozen keep it busy) and restore batches (each up to 64 records).
SAVE_CONCURRENCY = 48
RESTORE_CONCURRENCY = 6


@dataclass
class ImportReport:
    format: str
    user: str
    counts: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)


#: one export record, validated line by line before it joins a restore command
_RECORD: TypeAdapter[Any] = TypeAdapter(Record)


def _progress(enabled: bool) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err, disable=not enabled, transient=False)


# export ---------------------------------------------------------------------------------------
async def export_user(bus: Bus, user: str, out: TextIO, *, project: str | None = None, fmt: str = "jsonl",
                      on_record: Callable[[str], None] | None = None) -> int:
    """Write the user's export to ``out``; how many records."""
    client = Client(bus, query_timeout_s=60.0)
    n = 0
    async for line in export_lines(client, user, project=project, fmt=fmt, on_record=on_record):  # type: ignore[arg-type]
        out.write(line)
        n += 1
    return n - 1


# import ---------------------------------------------------------------------------------------
async def import_file(bus: Bus, path: Path, *, user: str | None, fmt: str | None = None, project: str | None = None,
                      as_memories: bool = False, advance: Callable[[int], None] | None = None,
                      set_total: Callable[[int], None] | None = None) -> ImportReport:
    """Import ``path`` into ``user`` (an Engram export: its own user unless given)."""
    with path.open(encoding="utf-8") as f:
        head = f.read(16_384)
    chosen = fmt or detect(head)
    client = Client(bus, command_timeout_s=120.0)
    advance = advance or (lambda _n: None)
    if chosen == "engram":
        return await _import_engram(client, path, user, advance, set_total)
    if user is None:
        raise ImportFormatError("--user is required for a mem0, Supermemory or chat import")
    data = json.loads(path.read_text(encoding="utf-8"))
    target = project or "default"
    items: Iterator[ImportItem]
    if chosen == "mem0":
        items = mem0_items(data, target)
    elif chosen == "supermemory":
        items = supermemory_items(data, project)
    elif chosen == "chat":
        items = chat_items(data, target, datetime.now(UTC).date(), as_memories=as_memories)
    else:
        raise ImportFormatError(f"unknown format {chosen!r}: use one of {', '.join(FORMATS)}")
    listed = list(items)
    if set_total:
        set_total(len(listed))
    report = ImportReport(chosen, user)
    await client.send(ADMIN_TENANT, RestoreAuthUser(user_id=user), key=key_for("restore-user", uuid.uuid4().hex, user))
    gate = asyncio.Semaphore(SAVE_CONCURRENCY)

    async def one(item: ImportItem) -> None:
        async with gate:
            try:
                result = await client.send(user, item.command, key=item.key)
            except ServiceFailure as exc:
                report.counts["error"] += 1
                report.errors.append(f"{item.source_id}: {exc.error}")
                return
            finally:
                advance(1)
        if isinstance(result, SaveMemoryResult | SaveDailyLogResult) and (result.created or result.updated):
            report.counts["saved"] += 1
        else:
            report.counts["duplicate"] += 1

    await asyncio.gather(*(one(item) for item in listed))
    return report


#: a memory line of an export that carries a key
_KEYED = re.compile(r'"memory_key":\s*"')


def _survey(path: Path, user: str | None) -> tuple[int, dict[str, NamedKey]]:
    """One pass over an Engram export before it is imported: how many records it holds, and, into
    another user than the one it was exported from, its keyed memories by id (a memory's record
    may name one that comes in a later batch: the new user's id is derived from the key)."""
    records, keyed = -1, {}  # (the header is no record)
    source: str | None = None
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            records += 1
            if records == 0:  # the header (engram_lines checks it when the file is read for real)
                with contextlib.suppress(ValueError, AttributeError):
                    source = json.loads(line).get("user")
                continue
            if user is not None and user != source and _KEYED.search(line):
                with contextlib.suppress(ValueError, AttributeError, KeyError, IndexError, ValidationError):
                    value = json.loads(line)
                    if value.get("type") == "memory":
                        state = value["versions"][-1]["state"]
                        keyed[str(value["id"])] = NamedKey(project=state["project"], memory_key=state["memory_key"])
    return max(records, 0), keyed


def _named_keys(batch: list[tuple[int, dict[str, Any]]], keyed: dict[str, NamedKey]) -> list[NamedKey]:
    """The keyed memories of the file that the batch's memories name (what they superseded, what
    superseded them, what they are flagged against) but do not carry."""
    carried = {str(r.get("id")) for _, r in batch if r.get("type") == "memory"}
    named: dict[str, NamedKey] = {}
    for _, record in batch:
        for version in record.get("versions", ()) if record.get("type") == "memory" else ():
            state = version.get("state") or {}
            for link in [*(state.get("supersedes") or ()), *(state.get("conflicts") or ()), state.get("superseded_by")]:
                memory_id = str(link.get("memory_id")) if isinstance(link, dict) else None
                if memory_id in keyed and memory_id not in carried:
                    named[memory_id] = keyed[memory_id]
    return list(named.values())[:MAX_NAMED_KEYS]


async def _import_engram(client: Client, path: Path, user: str | None, advance: Callable[[int], None],
                         set_total: Callable[[int], None] | None) -> ImportReport:
    total, keyed = await asyncio.to_thread(_survey, path, user)
    # each run's commands are its own: a restore is idempotent record by record (the versions a
    # memory already holds are left alone), so a file imported again is decided again and reported
    # as what it is now ("duplicate"), not as the recorded answer of the first run ("restored");
    # within the run the key stays one per batch, so a resent command is still run once
    run = uuid.uuid4().hex
    if set_total:
        set_total(total)
    gate = asyncio.Semaphore(RESTORE_CONCURRENCY)
    pending: set[asyncio.Task[None]] = set()
    report: ImportReport | None = None
    source: str | None = None

    async def send(batch: list[tuple[int, dict[str, Any]]]) -> None:
        try:
            await restore(batch)
        finally:
            gate.release()
            advance(len(batch))

    async def restore(batch: list[tuple[int, dict[str, Any]]]) -> None:
        assert report is not None
        try:
            cmd = RestoreRecords.model_validate({"records": [r for _, r in batch], "source_user": source,
                                                 "named_keys": _named_keys(batch, keyed)})
        except ValidationError as exc:
            report.counts["error"] += len(batch)
            report.errors.append(f"lines {batch[0][0]}-{batch[-1][0]}: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}")
            return
        key = key_for("restore", run, report.user, *(json.dumps(r, sort_keys=True) for _, r in batch))
        try:
            result: RestoreResult = await client.send(report.user, cmd, key=key)
        except ServiceFailure as exc:
            report.counts["error"] += len(batch)
            report.errors.append(f"lines {batch[0][0]}-{batch[-1][0]}: {exc.error}")
        else:
            for item in result.items:
                report.counts[item.status.value] += 1
                if item.error is not None:
                    report.errors.append(f"line {batch[item.index][0]}: {item.error}")

    batch: list[tuple[int, dict[str, Any]]] = []
    batch_bytes = 0
    batch_memories: set[Any] = set()  # the memory ids of the batch being filled
    last_memory: Any = None  # the id of the last memory line read
    results_started = False

    async def dispatch() -> None:
        nonlocal batch, batch_bytes
        await gate.acquire()
        task = asyncio.create_task(send(batch))
        pending.add(task)
        task.add_done_callback(pending.discard)
        batch, batch_bytes = [], 0
        batch_memories.clear()

    with path.open(encoding="utf-8") as f:
        for number, value in engram_lines(f):
            if not isinstance(value, dict):  # the header
                source = value.user
                report = ImportReport("engram", user or value.user)
                await client.send(ADMIN_TENANT, RestoreAuthUser(user_id=report.user),
                                  key=key_for("restore-user", run, report.user))
                continue
            if value.get("type") == "extraction_result" and not results_started:
                # a result names memories by id, remapped from their keys and titles in the target
                # user: every batch before it is restored first (this batch carries its own records)
                results_started = True
                if pending:
                    await asyncio.gather(*pending)
            assert report is not None  # (the header came first: engram_lines says so)
            try:
                _RECORD.validate_python(value)
            except ValidationError as exc:  # that line's error alone: the records around it are restored
                problem = exc.errors()[0]
                report.counts["error"] += 1
                report.errors.append(f"line {number}: {'.'.join(map(str, problem['loc']))}: {problem['msg']}")
                advance(1)
                continue
            size = len(json.dumps(value, ensure_ascii=False).encode())
            if batch and batch_bytes + size > RESTORE_BATCH_BYTES:  # one command must fit one bus message
                await dispatch()
            if value.get("type") == "memory":
                if value.get("id") == last_memory and last_memory not in batch_memories and pending:
                    # a later part of a long memory's record: its versions go on from the part in a
                    # batch already sent, which must be restored first
                    await asyncio.gather(*pending)
                last_memory = value.get("id")
                batch_memories.add(last_memory)
            batch.append((number, value))
            batch_bytes += size
            if len(batch) == MAX_RESTORE_RECORDS:
                await dispatch()
    if report is None:
        raise ImportFormatError("the file is empty")
    if batch:
        await gate.acquire()
        await send(batch)
    if pending:
        await asyncio.gather(*pending)
    return report


# CLI -------------------------------------------------------------------------------------------
def _connect_and_run(go: Callable[[Bus], Any]) -> Any:
    from deploy.client import connect
    from kit.bus import BusUnavailable

    async def main() -> Any:
        bus = await connect()
        try:
            return await go(bus)
        finally:
            await bus.close()

    try:
        return asyncio.run(main())
    except BusUnavailable as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    except ServiceFailure as exc:
        err.print(f"[red]error:[/red] {exc.error}")
        raise typer.Exit(1) from exc


@contextmanager
def _output(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    tmp = path.with_name(path.name + ".partial")
    tmp.unlink(missing_ok=True)  # a stale one (another mode, or a link planted there) is never written through
    # an export holds every memory of a user: readable by its owner only, whatever the umask
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yield f
    tmp.replace(path)  # a finished export only: never half a file under the name asked for


def export_command(
    user: Annotated[str, typer.Option(help="the user (tenant) id to export")],
    project: Annotated[str | None, typer.Option(help="only this project")] = None,
    format: Annotated[str, typer.Option("--format", help="jsonl (what `engram import` reads) or markdown")] = "jsonl",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="file to write (default: stdout)")] = None,
) -> None:
    """Export everything of a user: memories with every version, shared memories, daily logs,
    extraction tasks and results (streamed, constant memory)."""
    import re

    if format not in ("jsonl", "markdown"):
        err.print("[red]error:[/red] --format is jsonl or markdown")
        raise typer.Exit(2)
    if project is not None and not re.fullmatch(PROJECT_PATTERN, project):
        err.print("[red]error:[/red] --project must be 1-128 of [A-Za-z0-9_.:-]")
        raise typer.Exit(2)
    with _progress(output is not None) as progress:
        tasks: dict[str, Any] = {}

        def on_record(kind: str) -> None:
            if kind not in tasks:
                tasks[kind] = progress.add_task(f"exporting {kind.replace('_', ' ')}s", total=None)
            progress.advance(tasks[kind])

        async def go(bus: Bus) -> int:
            with _output(output) as out:
                return await export_user(bus, user, out, project=project, fmt=format, on_record=on_record)

        n = _connect_and_run(go)
    if output is not None:
        err.print(f"Exported {n:,} records of {user} to {output}.")


def import_command(
    file: Annotated[Path, typer.Argument(help="the file to import", exists=True, dir_okay=False, readable=True)],
    user: Annotated[str | None, typer.Option(help="import into this user (an Engram export: its own user by default)")] = None,
    format: Annotated[str | None, typer.Option("--format", help="engram | mem0 | supermemory | chat (default: detected)")] = None,
    project: Annotated[str | None, typer.Option(help="project of the imported memories (mem0, supermemory, chat)")] = None,
    as_memories: Annotated[bool, typer.Option("--as-memories", help="chat: one memory per turn instead of daily logs")] = False,
) -> None:
    """Import memories: an Engram export (restored exactly), a mem0 or Supermemory export, or a chat
    history (as daily logs the extractor learns from, or --as-memories). Importing twice changes nothing."""
    if format is not None and format not in FORMATS:
        err.print(f"[red]error:[/red] --format is one of {', '.join(FORMATS)}")
        raise typer.Exit(2)
    with _progress(True) as progress:
        task = progress.add_task(f"importing {file.name}", total=None)

        async def go(bus: Bus) -> ImportReport:
            return await import_file(bus, file, user=user, fmt=format, project=project, as_memories=as_memories,
                                     advance=lambda n: progress.advance(task, n),
                                     set_total=lambda n: progress.update(task, total=n))

        try:
            report: ImportReport = _connect_and_run(go)
        except ImportFormatError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from exc
    summary = ", ".join(f"{n:,} {k}" for k, n in sorted(report.counts.items())) or "nothing"
    err.print(f"Imported {file.name} ({report.format}) into {report.user}: {summary}.")
    for line in report.errors[:10]:
        err.print(f"[yellow]{line}[/yellow]")
    if report.errors:
        raise typer.Exit(1)


def purge_command(
    user: Annotated[str, typer.Option(help="the user (tenant) id to remove")],
    yes: Annotated[bool, typer.Option("--yes", help="confirm: everything of the user is deleted for good")] = False,
) -> None:
    """Remove everything of a user for good: events, every service's rows, vectors, keys, OAuth
    grants, caches. `engram export` first if you may want it back."""
    import re

    if not re.fullmatch(USER_PATTERN, user):
        err.print("[red]error:[/red] --user is 1-128 of [A-Za-z0-9_-]")
        raise typer.Exit(2)
    if not yes:
        err.print(f"This deletes everything of {user} for good. Run again with --yes to confirm.")
        raise typer.Exit(2)
    report = _connect_and_run(lambda bus: purge_user(bus, user))
    table = Table("store", "removed")
    table.add_row("events", f"{report.events:,}")
    table.add_row("pending commands", f"{report.commands:,}")
    table.add_row("dead letters", f"{report.dead_letters:,}")
    for result in report.services:
        if result.queued:
            table.add_row(result.service, "queued: runs when the service is back")
        for store, n in sorted(result.removed.items()):
            table.add_row(f"{result.service}.{store}", f"{n:,}")
    Console().print(table)
    err.print(f"Purged {user}.")


def register(app: typer.Typer) -> None:
    """Add the commands to the `engram` CLI."""
    app.command("export")(export_command)
    app.command("import")(import_command)
    app.command("purge")(purge_command)
