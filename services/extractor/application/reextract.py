"""Re-extraction: past daily logs run again through an engine under a new task id.

    the log catalog (every log on the event log, filtered by date and user) → per log, exactly once
    per ``(log_id, task_id)``: ledger row (running) → the log as it stands now → engine → merge with
    what is known (same key → a new version; near-duplicate → nothing) → extraction result for the
    new task → ledger row done.

A processed log stays processed (its lifecycle belongs to the pipeline and to external agents);
only the new task's result is recorded. A log still pending (never learned from, or waiting for an
agent) is claimed first and marked processed after, so every log a run extracts ends processed; a
log another worker holds, or a failed one, is read as it stands and its lifecycle left alone.
Every write carries the same idempotency keys as the pipeline's, derived from ``(log_id, task_id,
fact)``, and a task the ledger says is done is skipped, so running it twice with the same task id
writes nothing the second time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol
from uuid import UUID, uuid4

from services.extractor.application.extraction import ExtractionFailed, Extractor, Outcome, TaskReport
from services.extractor.application.ports import ClaimedLog, LogNotice
from services.extractor.domain.merge import step_key

log = logging.getLogger("engram.extractor")

#: ``on_progress(done, total)`` after each log
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class LogRef:
    """A daily log as the catalog lists it (where it stands on the event log)."""

    tenant: str
    log_id: str
    log_date: date
    project: str = "default"
    status: str = "processed"  # where its lifecycle stands (the last event's processing_status)
    version: int = 0  # the log's version at that event


class LogCatalog(Protocol):
    async def logs(self, *, since: date | None = None, tenant: str | None = None) -> list[LogRef]:
        """Every daily log that exists (not deleted), oldest day first, from ``since`` on, of one
        tenant or all."""
        ...

    async def read(self, ref: LogRef) -> ClaimedLog | None:
        """The log as it stands now (None when it no longer exists)."""
        ...


@dataclass
class ReextractReport:
    task_id: str
    engine: str
    logs: int = 0
    done: int = 0
    already_done: int = 0
    failed: int = 0
    gone: int = 0
    facts: int = 0
    saved: int = 0
    updated: int = 0
    kept: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, report: TaskReport) -> None:
        if report.outcome is Outcome.DONE:
            self.done += 1
        elif report.outcome is Outcome.ALREADY_DONE:
            self.already_done += 1
        elif report.outcome is Outcome.FAILED:
            self.failed += 1
            if report.error:
                self.errors.append(report.error)
        else:
            self.gone += 1
        self.facts += report.facts
        self.saved += report.saved
        self.updated += report.updated
        self.kept += report.kept


async def reextract_log(extractor: Extractor, catalog: LogCatalog, ref: LogRef) -> TaskReport:
    """One log under ``extractor.task_id``, exactly once (the log's lifecycle is left alone)."""
    task_id = extractor.task_id
    existing = await extractor.ledger.get(ref.log_id, task_id)
    if existing is not None and existing.status == "done":
        return TaskReport(Outcome.ALREADY_DONE, memory_ids=tuple(UUID(m) for m in existing.memory_ids))
    current: ClaimedLog | None = None
    if ref.status == "pending":  # claimed like the pipeline's, so that it ends processed
        current = await extractor.logs.claim(LogNotice(ref.tenant, ref.log_id, "pending", ref.version, ref.project),
                                             task_id, key=step_key("claim", ref.log_id, task_id, ref.version))
    claimed = current is not None
    current = current or await catalog.read(ref)
    if current is None:
        return TaskReport(Outcome.IGNORED)
    record = await extractor.ledger.start(ref.tenant, ref.log_id, task_id)
    if record.status == "done":  # another run finished it meanwhile
        return TaskReport(Outcome.ALREADY_DONE)
    try:
        extraction = await extractor.extract(current)
    except ExtractionFailed as exc:
        log.warning("re-extraction of log %s (task %s) failed: %s", ref.log_id, task_id, exc)
        if claimed:
            await extractor.logs.mark_failed(ref.tenant, ref.log_id, str(exc),
                                             key=step_key("failed", ref.log_id, task_id, ref.version))
        await extractor.ledger.fail(ref.log_id, task_id, str(exc))
        return TaskReport(Outcome.FAILED, error=str(exc))
    report = await extractor.complete(current, extraction, record, finish=not claimed)
    if claimed:
        await extractor.logs.mark_processed(ref.tenant, ref.log_id,
                                            key=step_key("processed", ref.log_id, task_id, ref.version))
        await extractor.ledger.finish(record)
    return report


def task_metrics(report: ReextractReport) -> dict[str, float]:
    """A run's counts as the task's metrics (RecordExtractionTask)."""
    return {name: float(getattr(report, name)) for name in
            ("logs", "done", "already_done", "failed", "gone", "facts", "saved", "updated", "kept")}


async def reextract(
    extractor: Extractor, catalog: LogCatalog, *, since: date | None = None, tenant: str | None = None,
    on_progress: Progress | None = None, concurrency: int = 2, run_id: str | None = None,
) -> ReextractReport:
    """Every past log (from ``since``, of ``tenant`` or all) under ``extractor.task_id``.

    The run is recorded as an extraction task of each user it touches (``RecordExtractionTask``:
    running with its logs and engine, then success, or failed with the first error, and the run's
    counts as metrics), as the external-agent workflow records its tasks. ``run_id`` names this run
    in those records' idempotency keys (a retried command acts once; a new run records again)."""
    refs: Sequence[LogRef] = await catalog.logs(since=since, tenant=tenant)
    task_id, engine = extractor.task_id, extractor.engine.name
    total = ReextractReport(task_id=task_id, engine=engine, logs=len(refs))
    per_user: dict[str, ReextractReport] = {}
    for ref in refs:
        per_user.setdefault(ref.tenant, ReextractReport(task_id=task_id, engine=engine)).logs += 1
    run = run_id or uuid4().hex
    for user in per_user:
        await extractor.logs.record_task(
            user, task_id, status="running", engine=engine, log_ids=[r.log_id for r in refs if r.tenant == user],
            key=step_key("task-running", user, task_id, run))
    if on_progress is not None:
        on_progress(0, len(refs))
    gate = asyncio.Semaphore(max(1, concurrency))
    done = 0

    async def one(ref: LogRef) -> None:
        nonlocal done
        async with gate:
            try:
                report = await reextract_log(extractor, catalog, ref)
            except Exception as exc:  # transient: the run is recorded failed, the log is retried by a new run
                report = TaskReport(Outcome.FAILED, error=f"log {ref.log_id}: {type(exc).__name__}: {exc}"[:1000])
        total.add(report)
        per_user[ref.tenant].add(report)
        done += 1
        if on_progress is not None:
            on_progress(done, len(refs))

    await asyncio.gather(*(one(ref) for ref in refs))
    for user, mine in per_user.items():
        status = "failed" if mine.failed else "success"
        await extractor.logs.record_task(
            user, task_id, status=status, engine=engine, metrics=task_metrics(mine),
            error=mine.errors[0] if mine.errors else None, key=step_key(f"task-{status}", user, task_id, run))
    return total


__all__ = ["LogCatalog", "LogRef", "ReextractReport", "reextract", "reextract_log", "task_metrics"]
