"""A user's export as lines: JSONL (what ``engram import`` reads back) or Markdown (for people).

Pages of each record kind are asked of the memory service one after another (``ExportPage``,
bounded in count and bytes) and written out as they come, so an export of any size runs in
constant memory here, in the gateway's streaming response and in the memory service. Used by
``engram export`` and ``GET /v1/export``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, Literal

from contracts.portability import (
    RECORD_KINDS,
    DailyLogRecord,
    ExportHeader,
    ExportPage,
    ExportPageResult,
    ExtractionResultRecord,
    ExtractionTaskRecord,
    MemoryRecord,
    SharedMemoryRecord,
)
from kit.client import Client

Format = Literal["jsonl", "markdown"]


def jsonl(record: Any) -> str:
    """One line of the JSONL export: the record's JSON, keys in declaration order."""
    return json.dumps(record.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":")) + "\n"


def markdown(record: Any) -> str:
    """A record for people to read."""
    if isinstance(record, ExportHeader):
        scope = f", project `{record.project}`" if record.project else ""
        return f"# Engram export of `{record.user}`{scope}\n\nExported {record.exported_at.isoformat(timespec='seconds')}.\n"
    if isinstance(record, MemoryRecord) and record.versions[0].state.version > 1:
        # a later part of a long memory's record (the export cuts a record that outgrows a page)
        return f"\nMore versions of `{record.id}`:\n" + "".join(_version_lines(record))
    if isinstance(record, MemoryRecord):
        last = record.versions[-1].state
        tags = ", ".join(t for t in (last.project, last.category and last.category.value, last.memory_key) if t)
        out = [f"\n## {last.content.splitlines()[0][:80] if last.content else record.id}\n",
               f"- id `{record.id}` ({tags}); importance {last.importance}, confidence {last.confidence:g}; "
               f"{last.status.value}\n"]
        if last.context:
            out.append(f"- context: {last.context}\n")
        if last.provenance is not None:
            out.append(f"- from daily log `{last.provenance.log_id}` ({last.provenance.log_date}), task "
                       f"`{last.provenance.task_id}`\n")
        out.append("\n" + last.content + "\n")
        if len(record.versions) > 1:
            out.append("\nVersions:\n")
            out.extend(_version_lines(record))
        return "".join(out)
    if isinstance(record, SharedMemoryRecord):
        return f"\n## Shared: {record.state.title}\n\n{record.state.event}\n"
    if isinstance(record, DailyLogRecord):
        s = record.state
        turns = "".join(f"- **{t.speaker}**: {t.text}\n" for t in (s.turns or []))
        return f"\n## Daily log {s.log_date} ({s.project}, {s.processing_status.value})\n\n{s.events or ''}\n{turns}"
    if isinstance(record, ExtractionTaskRecord):
        return f"\n## Extraction task `{record.state.task_id}`: {record.state.status.value}\n"
    if isinstance(record, ExtractionResultRecord):
        return (f"\n- extraction result: task `{record.state.task_id}` on log `{record.state.log_id}`: "
                f"{len(record.state.memory_ids)} memories\n")
    raise TypeError(f"not an export record: {type(record).__name__}")


def _version_lines(record: MemoryRecord) -> list[str]:
    return [f"{v.state.version}. {v.occurred_at.isoformat(timespec='seconds')} {v.event}: {v.state.content}\n"
            for v in record.versions]


async def export_lines(
    client: Client, tenant: str, *, project: str | None = None, project_scope: str | None = None,
    fmt: Format = "jsonl", page_size: int = 100, on_record: Callable[[str], None] | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> AsyncIterator[str]:
    """The user's export, line by line (a header first, then every record kind in turn)."""
    render = jsonl if fmt == "jsonl" else markdown
    yield render(ExportHeader(user=tenant, project=project or project_scope, exported_at=now()))
    for kind in RECORD_KINDS:
        after: str | None = None
        while True:
            page: ExportPageResult = await client.ask(
                tenant, ExportPage(kind=kind, project=project, after=after, limit=page_size), project_scope=project_scope)
            for record in page.records:
                if on_record is not None:
                    on_record(kind)
                yield render(record)
            if page.next is None:
                break
            after = page.next
