"""Daily-log rules: the lifecycle state machine, saves, retention, extraction tasks and results.

Pure functions over the contract states (``contracts.daily_logs``); no I/O. Each transition
returns the log's next state, or None when the log already stands so (nothing to write), or
raises a domain error naming the field when the transition is not allowed::

    pending --claim (retry_count+1)--> processing --mark_processed--> processed (retry_count=0)
    processing --mark_failed / recover: retry_count < 3 --> pending, >= 3 --> failed
    processed (no extraction result) --requeue--> pending
    processed / failed --a save that changes the content--> pending (new content is learned from)
    processing --a save that changes the content--> processing, then pending at mark_processed
    failed --update_log_status(pending)--> pending (a fresh start; claims take pending logs only)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from uuid import UUID

from contracts.daily_logs import (
    DAILY_LOG_AGGREGATE,
    EXTRACTION_RESULT_AGGREGATE,
    EXTRACTION_TASK_AGGREGATE,
    LOG_PAGE_BYTES,
    MAX_TRIES,
    DailyLogEventType,
    DailyLogState,
    DailyLogView,
    ExtractionResultEventType,
    ExtractionResultState,
    ExtractionResultView,
    ExtractionTaskEventType,
    ExtractionTaskState,
    ExtractionTaskView,
    ProcessingStatus,
    RecordExtractionResult,
    RecordExtractionTask,
    SaveDailyLog,
    TaskStatus,
    daily_log_id,
    extraction_result_id,
    extraction_task_uuid,
)
from contracts.envelope import EventEnvelope
from services.memory.domain import paging
from services.memory.domain.errors import Conflict, InvalidArgument, NotFound
from services.memory.domain.model import event_id_for

P = ProcessingStatus
#: The fields a save writes (omitted ones are kept).
LOG_FIELDS = ("events", "user_state", "mood_changes", "topics", "relationship_state", "mood", "turns")
#: A log may be dated at most this far ahead of today (UTC): time zones, not the future.
MAX_DAYS_AHEAD = 1

#: update_log_status: the transitions it allows (from -> to). Same status is a no-op.
STATUS_TRANSITIONS: dict[ProcessingStatus, frozenset[ProcessingStatus]] = {
    P.PENDING: frozenset({P.PROCESSING}),
    P.PROCESSING: frozenset({P.PENDING, P.PROCESSED, P.FAILED}),
    P.PROCESSED: frozenset({P.PENDING}),
    P.FAILED: frozenset({P.PENDING}),
}


# saves --------------------------------------------------------------------------------------------
def log_date_of(cmd: SaveDailyLog, now: datetime) -> date:
    """The day a save addresses: its ``log_date``, else today (UTC); refused beyond tomorrow."""
    today = now.date()
    day = cmd.log_date or today
    if day > today + timedelta(days=MAX_DAYS_AHEAD):
        raise InvalidArgument(
            f"log_date {day.isoformat()} is more than {MAX_DAYS_AHEAD} day in the future (today is "
            f"{today.isoformat()} UTC); a daily log records a day that has happened", "log_date",
        )
    return day


def save(current: DailyLogState | None, tenant: str, cmd: SaveDailyLog, day: date, now: datetime) -> DailyLogState | None:
    """The log after a save: a new log (pending), or the given fields written over the current ones;
    None when nothing would change.

    New content is learned from: a processed or failed log whose content a save changes goes back
    to pending (a fresh start, retry_count 0); a log being processed keeps its attempt, marked
    ``resaved``, and goes back to pending when that attempt is marked processed (the attempt read
    the old content). A pending log stays pending."""
    given = {name: getattr(cmd, name) for name in LOG_FIELDS if getattr(cmd, name) is not None}
    if current is None or current.deleted:
        return DailyLogState(
            id=daily_log_id(tenant, cmd.project, day), tenant=tenant, project=cmd.project, log_date=day, **given,
            processing_status=P.PENDING, version=current.version + 1 if current else 1,
            created_at=now, updated_at=now,
        )
    if all(getattr(current, k) == v for k, v in given.items()):
        return None
    learn_again: dict[str, object] = {}
    if current.processing_status in (P.PROCESSED, P.FAILED):
        learn_again = {"processing_status": P.PENDING, "retry_count": 0, "error_reason": None, "processed_at": None}
    elif current.processing_status is P.PROCESSING:
        learn_again = {"resaved": True}
    return current.model_copy(update={**given, **learn_again, "version": current.version + 1, "updated_at": now})


# the lifecycle ------------------------------------------------------------------------------------
def _next(current: DailyLogState, now: datetime, **changes: object) -> DailyLogState:
    return current.model_copy(update={**changes, "version": current.version + 1, "updated_at": now})


def claim(current: DailyLogState, now: datetime) -> DailyLogState | None:
    """Claim for processing: pending -> processing, one more try. None: another worker holds it
    (processing). A processed or failed log is refused: a failed log has used its tries, and comes
    back only when someone sends it to pending (update_log_status) or saves new content into it."""
    if current.processing_status is P.PROCESSING:
        return None
    if current.processing_status is P.PROCESSED:
        raise Conflict(f"daily log {current.id} is already processed; nothing to claim (reconcile_log_statuses or "
                       "update_log_status(pending) queues it again)", "id")
    if current.processing_status is P.FAILED:
        raise Conflict(f"daily log {current.id} failed after {current.retry_count} tries ({current.error_reason}); "
                       "claims take pending logs only: update_log_status(pending) gives it a fresh start", "id")
    return _next(current, now, processing_status=P.PROCESSING, retry_count=current.retry_count + 1,
                 claimed_at=now, error_reason=None)


def mark_processed(current: DailyLogState, now: datetime) -> DailyLogState | None:
    """processing -> processed (retry_count 0, processed_at); None when already processed."""
    if current.processing_status is P.PROCESSED:
        return None
    if current.processing_status is not P.PROCESSING:
        raise Conflict(f"daily log {current.id} is {current.processing_status.value}, not processing: claim it "
                       "first (claim_daily_log)", "id")
    if current.error_reason is not None:
        raise InvalidArgument(f"daily log {current.id} carries an error_reason ({current.error_reason!r}); a failed "
                              "attempt cannot be marked processed", "error_reason")
    if current.resaved:  # the attempt read content that has changed since: learn from the new content
        return _next(current, now, processing_status=P.PENDING, retry_count=0, claimed_at=None, resaved=False)
    return _next(current, now, processing_status=P.PROCESSED, retry_count=0, processed_at=now, claimed_at=None)


def after_failure(current: DailyLogState, reason: str, now: datetime) -> DailyLogState:
    """A failed attempt: back to pending below MAX_TRIES tries, failed at MAX_TRIES."""
    status = P.PENDING if current.retry_count < MAX_TRIES else P.FAILED
    if current.resaved:  # new content arrived during the attempt: a fresh start on it
        return _next(current, now, processing_status=P.PENDING, retry_count=0, error_reason=reason, claimed_at=None,
                     resaved=False)
    return _next(current, now, processing_status=status, error_reason=reason, claimed_at=None)


def mark_failed(current: DailyLogState, reason: str, now: datetime) -> DailyLogState:
    """processing -> pending (< 3 tries) or failed (>= 3), with the reason."""
    if current.processing_status is not P.PROCESSING:
        raise Conflict(f"daily log {current.id} is {current.processing_status.value}, not processing: only a "
                       "claimed log can fail", "id")
    return after_failure(current, reason, now)


def is_stuck(current: DailyLogState, now: datetime, timeout: timedelta) -> bool:
    """Whether a processing log's attempt began longer ago than ``timeout``."""
    started = current.claimed_at or current.updated_at
    return current.processing_status is P.PROCESSING and started <= now - timeout


def recover(current: DailyLogState, now: datetime, timeout: timedelta) -> DailyLogState | None:
    """A log stuck in processing -> pending (< 3 tries) or failed; None when it is not stuck."""
    if not is_stuck(current, now, timeout):
        return None
    minutes = int(timeout.total_seconds() // 60)
    return after_failure(current, f"stuck in processing for more than {minutes} minutes", now)


def requeue(current: DailyLogState, now: datetime) -> DailyLogState | None:
    """A processed log with no extraction result -> pending (reconcile); None when not processed."""
    if current.processing_status is not P.PROCESSED:
        return None
    return _next(current, now, processing_status=P.PENDING, processed_at=None, error_reason=None)


def change_status(
    current: DailyLogState, target: ProcessingStatus, error_reason: str | None, now: datetime,
) -> DailyLogState | None:
    """update_log_status: a legal transition (STATUS_TRANSITIONS), else refused naming the field."""
    if target is P.PROCESSED and error_reason is not None:
        raise InvalidArgument("a log with an error_reason cannot be marked processed", "error_reason")
    if error_reason is not None and target not in (P.PENDING, P.FAILED):
        raise InvalidArgument(f"error_reason goes with pending or failed, not {target.value}", "error_reason")
    source = current.processing_status
    if target is source:
        if error_reason is None or error_reason == current.error_reason:
            return None
        return _next(current, now, error_reason=error_reason)
    if target not in STATUS_TRANSITIONS[source]:
        legal = ", ".join(sorted(s.value for s in STATUS_TRANSITIONS[source]))
        raise Conflict(f"daily log {current.id} cannot go from {source.value} to {target.value} (from {source.value}: "
                       f"{legal})", "processing_status")
    if target is P.PROCESSING:
        return claim(current, now)
    if target is P.PROCESSED:
        return mark_processed(current, now)
    if target is P.FAILED:
        return _next(current, now, processing_status=P.FAILED, claimed_at=None,
                     error_reason=error_reason or current.error_reason or "marked failed")
    # -> pending: released (processing), requeued (processed) or retried afresh (failed)
    retry_count = 0 if source is P.FAILED else current.retry_count
    return _next(current, now, processing_status=P.PENDING, retry_count=retry_count, claimed_at=None,
                 processed_at=None if source is P.PROCESSED else current.processed_at, error_reason=error_reason,
                 resaved=False)


# retention ----------------------------------------------------------------------------------------
def retention_cutoff(now: datetime, retention_days: int | None, older_than: datetime | None, default_days: int) -> datetime:
    """The cut-off of delete_logs: ``older_than`` when given, else now minus the retention days."""
    if older_than is not None:
        if older_than.tzinfo is None:
            raise InvalidArgument("older_than needs a time zone (e.g. 2025-01-31T00:00:00Z)", "older_than")
        return older_than
    return now - timedelta(days=default_days if retention_days is None else retention_days)


def deletable(current: DailyLogState, cutoff: datetime) -> bool:
    """Only processed logs last updated before the cut-off are deleted (failed ones are kept)."""
    return not current.deleted and current.processing_status is P.PROCESSED and current.updated_at < cutoff


def delete(current: DailyLogState, now: datetime) -> DailyLogState:
    """The tombstone of a deleted log: its content dropped, its identity and status kept."""
    return _next(current, now, deleted=True, **dict.fromkeys(LOG_FIELDS))


# events and views ---------------------------------------------------------------------------------
def _event(
    state: DailyLogState | ExtractionTaskState | ExtractionResultState, aggregate: str, event_type: str, *,
    command_id: str, correlation_id: str,
) -> EventEnvelope:
    """The event carrying a record's new state (its id derived from the command: a retry is the same)."""
    return EventEnvelope(
        event_id=event_id_for(state.tenant, command_id, state.id, state.version), type=event_type,
        occurred_at=state.updated_at, tenant=state.tenant, aggregate=aggregate, aggregate_id=str(state.id),
        correlation_id=correlation_id, causation_id=command_id, data=state.model_dump(mode="json"),
    )


def log_event(
    state: DailyLogState, event_type: DailyLogEventType, *, command_id: str, correlation_id: str,
) -> EventEnvelope:
    return _event(state, DAILY_LOG_AGGREGATE, event_type.value, command_id=command_id, correlation_id=correlation_id)


def log_view(state: DailyLogState) -> DailyLogView:
    return DailyLogView.model_validate(state.model_dump(exclude={"tenant", "deleted"}))


def log_page(states: Sequence[DailyLogState]) -> tuple[list[DailyLogView], bool]:
    """A list of logs as one answer carries it (:func:`paging.fitting`)."""
    return paging.fitting(states, log_view, LOG_PAGE_BYTES)


# extraction tasks ---------------------------------------------------------------------------------
def task_identity(tenant: str, cmd: RecordExtractionTask, command_id: str) -> tuple[UUID, str | None]:
    """The task a record addresses: (id, task_id) — task_id None when only ``id`` is given (an
    existing task's), generated from the request's key when neither is."""
    if cmd.task_id is not None:
        tid = extraction_task_uuid(tenant, cmd.task_id)
        if cmd.id is not None and cmd.id != tid:
            raise Conflict(f"id {cmd.id} is not the id of task_id {cmd.task_id!r} ({tid}); give one of them", "id")
        return tid, cmd.task_id
    if cmd.id is not None:
        return cmd.id, None
    task_id = f"task-{command_id[-24:]}"
    return extraction_task_uuid(tenant, task_id), task_id


def record_task(
    current: ExtractionTaskState | None, tenant: str, task_id: str | None, task_uuid: UUID,
    cmd: RecordExtractionTask, now: datetime,
) -> ExtractionTaskState | None:
    """A task recorded or updated (fields omitted are kept); None when nothing would change.

    ``error`` says why the task failed, so a task that succeeds drops it: a retry that succeeds
    after a failed attempt reads ``success`` with no error (with "omitted is kept" alone it kept the
    failure's). An error given with a success, or to a task that stays successful, is refused. Any
    other status keeps the error it has (a ``running`` retry still shows why the last attempt
    failed), a ``failed`` record replaces it, and a successful task recorded ``failed`` again (a
    later run under the same task id) is failed with the new error: a redelivered command is
    answered by its idempotency key, never folded twice. The failure's reason stays in the task's
    history (its ``failed`` event); ``metrics`` (the pipeline's ``retry_count``) are untouched."""
    given: dict[str, object] = {
        name: getattr(cmd, name) for name in ("log_ids", "status", "project", "engine", "error", "metrics")
        if getattr(cmd, name) is not None
    }
    if current is None and task_id is None:
        raise NotFound(f"no extraction task with id {task_uuid}; give a task_id to record a new one", "id")
    status = given.get("status", current.status if current is not None else TaskStatus.PENDING)
    if status is TaskStatus.SUCCESS:
        if "error" in given:
            # the request itself is valid (a success with an error is refused by the contract): it
            # conflicts with the task's state, a success — 409, not 422
            raise Conflict(f"extraction task {current.task_id if current else task_id!r} succeeded, and a successful "
                           "task carries no error: record it failed with its error (status: failed)", "error")
        given["error"] = None
    if current is None:
        assert task_id is not None
        return ExtractionTaskState(
            id=task_uuid, tenant=tenant, task_id=task_id, **given, created_at=now, updated_at=now,
            started_at=now if status is not TaskStatus.PENDING else None,
            finished_at=now if status in (TaskStatus.SUCCESS, TaskStatus.FAILED) else None,
        )
    if "project" in given and given["project"] != current.project:
        raise Conflict(f"extraction task {current.task_id!r} belongs to project {current.project!r}", "project")
    if all(getattr(current, k) == v for k, v in given.items()):
        return None
    times: dict[str, object] = {}
    if status is TaskStatus.RUNNING and current.status is not TaskStatus.RUNNING:
        times = {"started_at": now, "finished_at": None}
    elif status in (TaskStatus.SUCCESS, TaskStatus.FAILED) and current.status is not status:
        times = {"finished_at": now, "started_at": current.started_at or now}
    return current.model_copy(update={**given, **times, "version": current.version + 1, "updated_at": now})


def task_event(state: ExtractionTaskState, *, command_id: str, correlation_id: str) -> EventEnvelope:
    return _event(state, EXTRACTION_TASK_AGGREGATE, ExtractionTaskEventType.RECORDED.value,
                  command_id=command_id, correlation_id=correlation_id)


def task_view(state: ExtractionTaskState) -> ExtractionTaskView:
    return ExtractionTaskView.model_validate(state.model_dump(exclude={"tenant"}))


# extraction results -------------------------------------------------------------------------------
def record_result(
    current: ExtractionResultState | None, tenant: str, project: str, cmd: RecordExtractionResult, now: datetime,
) -> ExtractionResultState | None:
    """The result of (log_id, task_id): created, or replaced by the new lists (a new version);
    None when it already holds exactly these. Ids keep their first order, without repeats."""
    memory_ids = list(dict.fromkeys(cmd.memory_ids))
    shared_ids = list(dict.fromkeys(cmd.shared_memory_ids))
    if current is None:
        return ExtractionResultState(
            id=extraction_result_id(tenant, cmd.log_id, cmd.task_id), tenant=tenant, project=project,
            log_id=cmd.log_id, task_id=cmd.task_id, memory_ids=memory_ids, shared_memory_ids=shared_ids,
            created_at=now, updated_at=now,
        )
    if current.memory_ids == memory_ids and current.shared_memory_ids == shared_ids:
        return None
    return current.model_copy(update={"memory_ids": memory_ids, "shared_memory_ids": shared_ids,
                                      "version": current.version + 1, "updated_at": now})


def result_event(state: ExtractionResultState, *, command_id: str, correlation_id: str) -> EventEnvelope:
    return _event(state, EXTRACTION_RESULT_AGGREGATE, ExtractionResultEventType.RECORDED.value,
                  command_id=command_id, correlation_id=correlation_id)


def result_view(state: ExtractionResultState) -> ExtractionResultView:
    return ExtractionResultView.model_validate(state.model_dump(exclude={"tenant"}))
