"""The memory service's daily-log lifecycle (``contracts/daily_logs.py``), as the extractor uses it:
the same commands an external agent sends through the maintenance tools, through
:class:`kit.client.Client`, each with the idempotency key the application gives it.

- claim: ``ClaimDailyLog``; the claim's result carries the log (its turns and structured fields),
  so nothing else is read. ``claimed: false`` (another worker holds it), a processed log (conflict)
  and a log that no longer exists (not found) are all "not ours": None.
- result: ``RecordExtractionResult`` (unique per (log_id, task_id) on the memory side).
- processed / failed: ``MarkLogProcessed`` / ``MarkLogFailed``; a log that is no longer processing
  (recovered meanwhile, deleted) is reported, not retried forever.
- schedules: ``RecoverStuckLogs`` / ``DeleteLogs``, per tenant (the contracts have no system-wide form).

Anything transient (the memory service down, a timeout, a key in flight) raises: the consumer
leaves the event unacknowledged and it comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from uuid import UUID

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    MAX_ERROR_REASON_CHARS,
    MAX_IDS,
    ClaimDailyLog,
    ClaimResult,
    DailyLogView,
    DeleteLogs,
    LogBatchResult,
    MarkLogFailed,
    MarkLogProcessed,
    RecordExtractionResult,
    RecordExtractionTask,
    RecoverStuckLogs,
    TaskStatus,
)
from contracts.errors import ErrorCode
from kit.client import Client, ServiceFailure
from services.extractor.application.ports import ClaimedLog, LogNotice, LogSource
from services.extractor.domain.engine import turns_from_fields
from services.extractor.domain.model import Turn

log = logging.getLogger("engram.extractor")

__all__ = ["DAILY_LOG_AGGREGATE", "LOG_FIELDS", "ClientLogSource", "build_log_source", "turns_of"]

#: structured fields of a daily log (docs/design.md §3, ``save_daily_log``) read as the user's own words,
#: ref ``field:<name>``
LOG_FIELDS = ("events", "user_state", "mood_changes", "topics", "relationship_state")
#: answers that mean "this log is not (or no longer) ours to act on", not a transient failure
_NOT_OURS = (ErrorCode.CONFLICT, ErrorCode.NOT_FOUND)
MAX_ERROR_REASON = 2_000


def turns_of(view: DailyLogView) -> list[Turn]:
    """What extraction reads of a log: its turns (ref ``turn:<index>``, the index provenance names),
    then its structured fields as the user's own turns (ref ``field:<name>``)."""
    turns = [Turn(speaker=t.speaker, text=t.text, ref=f"turn:{i}", at=t.at) for i, t in enumerate(view.turns or [])]
    fields: list[tuple[str, str | None]] = []
    for name in LOG_FIELDS:
        value = getattr(view, name)
        fields.append((name, ", ".join(value) if isinstance(value, list) else value))
    return turns + turns_from_fields(fields)


class ClientLogSource:
    """:class:`LogSource` over the memory service's daily-log commands."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def claim(self, notice: LogNotice, task_id: str, *, key: str) -> ClaimedLog | None:
        try:
            result: ClaimResult = await self.client.send(notice.tenant, ClaimDailyLog(id=UUID(notice.log_id)), key=key)
        except ServiceFailure as exc:
            if exc.error.code in _NOT_OURS:
                log.info("log %s not claimed: %s", notice.log_id, exc.error.message)
                return None
            raise
        if not result.claimed or result.log is None:
            return None
        view = result.log
        return ClaimedLog(tenant=notice.tenant, log_id=str(view.id), project=view.project,
                          log_date=view.log_date.isoformat(), turns=turns_of(view), retry_count=view.retry_count,
                          episode=notice.version)

    async def record_result(self, tenant: str, log_id: str, task_id: str, memory_ids: Sequence[UUID], *,
                            key: str) -> None:
        await self.client.send(tenant, RecordExtractionResult(log_id=UUID(log_id), task_id=task_id,
                                                              memory_ids=list(memory_ids)), key=key)

    async def mark_processed(self, tenant: str, log_id: str, *, key: str) -> None:
        try:
            await self.client.send(tenant, MarkLogProcessed(id=UUID(log_id)), key=key)
        except ServiceFailure as exc:
            if exc.error.code not in _NOT_OURS:
                raise
            # recovered (stuck too long) or deleted meanwhile: the result is recorded, the log's
            # next pending event is a new version (and the ledger says this task is done)
            log.warning("log %s not marked processed: %s", log_id, exc.error.message)

    async def mark_failed(self, tenant: str, log_id: str, reason: str, *, key: str) -> None:
        try:
            await self.client.send(tenant, MarkLogFailed(id=UUID(log_id), error_reason=reason[:MAX_ERROR_REASON]),
                                   key=key)
        except ServiceFailure as exc:
            if exc.error.code not in _NOT_OURS:
                raise
            log.warning("log %s not marked failed: %s", log_id, exc.error.message)

    async def record_task(self, tenant: str, task_id: str, *, status: str, engine: str,
                          log_ids: Sequence[str] = (), metrics: dict[str, float] | None = None,
                          error: str | None = None, project: str | None = None, key: str) -> None:
        ids = [UUID(i) for i in dict.fromkeys(log_ids)]
        await self.client.send(tenant, RecordExtractionTask(
            task_id=task_id, status=TaskStatus(status), engine=engine, log_ids=ids[:MAX_IDS] or None, project=project,
            metrics=metrics or None, error=error[:MAX_ERROR_REASON_CHARS] if error else None,
        ), key=key)

    async def recover_stuck(self, tenant: str, timeout_minutes: int, *, key: str) -> int:
        result: LogBatchResult = await self.client.send(tenant, RecoverStuckLogs(timeout_minutes=timeout_minutes),
                                                        key=key)
        return result.count

    async def delete_processed(self, tenant: str, retention_days: int, *, key: str) -> int:
        result: LogBatchResult = await self.client.send(tenant, DeleteLogs(retention_days=retention_days), key=key)
        return result.count


def build_log_source(client: Client) -> LogSource:
    """The LogSource over the memory service's daily-log commands."""
    return ClientLogSource(client)
