"""Daily logs, their lifecycle, extraction tasks and extraction results (memory service contracts).

A **daily log** is one day's conversation of one user in one project: the structured fields of the
design (events, user_state, mood_changes, topics, relationship_state, mood) and, optionally, the
raw ``turns``. One log per (tenant, project, log_date): its id is derived from them
(:func:`daily_log_id`), and the log is an aggregate on the event log (``DAILY_LOG_AGGREGATE``)
whose every event carries the log's full state (:class:`DailyLogState`).

Lifecycle (every transition is an event)::

    pending --claim (retry_count+1)--> processing --mark_processed--> processed (retry_count=0, processed_at)
    processing --mark_failed, retry_count<3--> pending   processing --mark_failed, retry_count>=3--> failed
    processing stuck longer than timeout --recover--> pending (<3) / failed (>=3)
    processed without an extraction result --reconcile--> pending
    failed --claim--> processing (one more try: a failed log stays claimable, it is kept for retry)

Consumers of the event log (the extractor) see a log that wants extraction as any ``dailylog``
event whose ``data.processing_status`` is ``pending`` (saved, requeued, recovered, retried).

An **extraction task** is the metadata of one extraction run (never the extracted text); an
**extraction result** links one log to the memories one task produced, unique per
``(log_id, task_id)``: recording it again replaces it (a new version), never duplicates, and never
deletes a memory.
"""

from __future__ import annotations

import hashlib
import re
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any
from uuid import UUID, uuid5

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from contracts.events import aggregate
from contracts.memory import CURSOR_PATTERN, MAX_RECALL_LIMIT, PROJECT_PATTERN, Project, more_description
from contracts.messages import command, query
from contracts.subjects import MEMORY

#: Tries a log gets: a failure below this sends it back to pending, at it to failed.
MAX_TRIES = 3
DEFAULT_STUCK_TIMEOUT_MINUTES = 30
DEFAULT_LOG_RETENTION_DAYS = 14  # ENGRAM_LOG_RETENTION_DAYS overrides it in the memory service
MAX_LOG_FIELD_CHARS = 20_000
MAX_TOPICS = 50
MAX_TOPIC_CHARS = 200
# A day of 1,000 turns of 3,000 characters (one more than allowed, even) stays under the
# gateway's 4 MiB body limit, so a body the schema refuses is refused as such (422), never as 413.
MAX_TURNS = 1_000
MAX_TURN_CHARS = 3_000
MAX_TURNS_TOTAL_CHARS = 200_000
#: ``turns`` given as plain text (MCP): the turns' characters plus, per turn, a speaker and its colon.
#: Checked before the text is parsed (parsing is linear; this bounds the work one request can ask for).
MAX_TURNS_TEXT_CHARS = MAX_TURNS_TOTAL_CHARS + MAX_TURNS * 80
#: ``topics`` given as one comma-separated string: as many topics as a list may hold, with separators.
MAX_TOPICS_TEXT_CHARS = MAX_TOPICS * (MAX_TOPIC_CHARS + 2)
MAX_SPEAKER_CHARS = 128
#: A list of logs (``list_daily_logs``, ``get_unprocessed_logs``) carries at most about this many
#: bytes of logs, and at least one: a log may hold ~1 MB, and the bus carries 1 MB a message. The
#: rest comes on the next page (``next_cursor``), or, for the logs waiting for extraction, on the
#: next ask. A list of extraction tasks or results (each up to 1,000 ids) carries the newest that fit.
LOG_PAGE_BYTES = 600_000
MAX_ERROR_REASON_CHARS = 2_000
MAX_IDS = 1_000
TASK_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
TEXT_NO_NUL = r"^[^\x00]*$"  # Postgres text cannot hold NUL

_NS = UUID("5d0b8f4a-7c2e-4b61-9e3f-2a8d6c1b4e70")


def daily_log_id(tenant: str, project: str, log_date: date) -> UUID:
    """The identity of the log of one (tenant, project, date): every save of that day lands on it."""
    return uuid5(_NS, f"dailylog:{tenant}:{project}:{log_date.isoformat()}")


def extraction_task_uuid(tenant: str, task_id: str) -> UUID:
    """The identity (``id``) of the extraction task ``task_id`` of a tenant."""
    return uuid5(_NS, f"extractiontask:{tenant}:{task_id}")


def extraction_result_id(tenant: str, log_id: UUID, task_id: str) -> UUID:
    """The identity of the result of one task on one log: unique per (log_id, task_id)."""
    return uuid5(_NS, f"extractionresult:{tenant}:{log_id}:{task_id}")


_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")


def _iso_only(value: Any) -> Any:
    """Dates and times are ISO 8601 strings on the wire: pydantic would read a number (or a
    numeric string) as a Unix time, which no caller of a date means."""
    if isinstance(value, bool | int | float) or (isinstance(value, str) and _NUMBER.match(value)):
        raise ValueError("give an ISO 8601 date or time (e.g. 2025-03-01 or 2025-03-01T12:00:00Z), not a number")
    return value


#: The years a date or time a user gives may fall in (a day's log, a turn's ``at``, a cut-off, a
#: graph filter). Wide enough for any conversation and any "since"; narrow enough that date arithmetic
#: (a day before, a week after, a time zone moved to UTC) stays inside what Python and Postgres
#: represent: 0001-01-01T00:00+14:00 is 0000-12-31 in UTC, 9999-12-31 has no tomorrow.
MIN_YEAR = 1900
MAX_YEAR = 2999


def _in_years(value: date) -> date:
    """A date or time of year MIN_YEAR..MAX_YEAR (its UTC moment too, for an aware time)."""
    years = [value.year]
    if isinstance(value, datetime) and value.utcoffset() is not None:
        years.append((value.replace(tzinfo=None) - value.utcoffset()).year  # type: ignore[operator]
                     if MIN_YEAR < value.year < MAX_YEAR else value.year)
    if not all(MIN_YEAR <= y <= MAX_YEAR for y in years):
        raise ValueError(f"give a date in the years {MIN_YEAR} to {MAX_YEAR} (not {value.isoformat()})")
    return value


IsoDate = Annotated[date, BeforeValidator(_iso_only), AfterValidator(_in_years)]
IsoDateTime = Annotated[datetime, BeforeValidator(_iso_only), AfterValidator(_in_years)]
#: a user's date-time where a number may still be given (the graph's filters): only the years are bounded
BoundedDateTime = Annotated[datetime, AfterValidator(_in_years)]


class ProcessingStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    PROCESSED = "processed"
    FAILED = "failed"


class TaskStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


def turn_digest(speaker: str, text: str) -> str:
    """A turn's identity whatever its place in the log: 16 hex digits of its speaker (case-folded) and
    words (spaces collapsed). A memory's provenance keeps the digests of the turns it was learnt
    from, so a later save of the log that removes those turns is recognised."""
    said = f"{speaker.strip().casefold()}\x00{' '.join(text.split())}"
    return hashlib.sha256(said.encode()).hexdigest()[:16]


class Turn(BaseModel):
    """One utterance of the day's conversation."""

    model_config = ConfigDict(extra="forbid")

    speaker: str = Field(min_length=1, max_length=MAX_SPEAKER_CHARS, pattern=TEXT_NO_NUL,
                         description="who spoke, e.g. 'user', 'assistant' or a name")
    text: str = Field(min_length=1, max_length=MAX_TURN_CHARS, pattern=TEXT_NO_NUL)
    # Not bounded here: a stored log's turns are read with this model too (events written before the
    # bound). A save bounds them (SaveDailyLog, ``turns[i].at``).
    at: Annotated[datetime, BeforeValidator(_iso_only)] | None = Field(None, description="when it was said (optional)")


#: a turn's first line, already stripped: a speaker (1-64 characters, no colon), a colon (ASCII or
#: full-width), the words. No part can match the characters of another, so a line is matched in
#: linear time whatever it holds (no backtracking over runs of spaces).
_SPEAKER_LINE = re.compile(r"([^:：]{1,64})[:：]\s*(\S.*)", re.DOTALL)


def _text_limit(field: str, value: str, limit: int) -> None:
    """Refuse a text longer than ``limit`` before any of it is parsed."""
    if len(value) > limit:
        raise ValueError(f"{field} as text is limited to {limit} characters (this one has {len(value)}); "
                         "save the day in parts or give a list")


def turn_parts(text: str, max_turns: int | None = None) -> list[tuple[str, str]]:
    """(speaker, text) of each turn of plain chat text, unvalidated: a line ``Speaker: words`` starts
    a turn of that speaker; any other non-empty line continues the turn before it (or starts one of
    speaker ``user``). Linear in the text's length: each line is matched once and a turn's lines are
    joined once. More than ``max_turns`` turns is refused as soon as the one too many starts."""
    turns: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        found = _SPEAKER_LINE.match(line)
        if found and not found.group(1).startswith("http"):
            if max_turns is not None and len(turns) >= max_turns:
                raise ValueError(f"turns: at most {max_turns} turns in one log; save the day in parts")
            turns.append((found.group(1).strip(), [found.group(2)]))
        elif turns:
            turns[-1][1].append(line)
        else:
            turns.append(("user", [line]))
    return [(speaker, "\n".join(lines)) for speaker, lines in turns]


def turns_from_text(text: str) -> list[Turn]:
    """Plain chat text as turns (:func:`turn_parts`). Refused before any parsing when longer than
    MAX_TURNS_TEXT_CHARS, and as soon as it holds more than MAX_TURNS turns."""
    _text_limit("turns", text, MAX_TURNS_TEXT_CHARS)
    return [Turn.model_validate({"speaker": speaker, "text": words})
            for speaker, words in turn_parts(text, MAX_TURNS)]


def _turns(value: Any) -> Any:
    return turns_from_text(value) if isinstance(value, str) else value


def _topics(value: Any) -> Any:
    if isinstance(value, str):
        _text_limit("topics", value, MAX_TOPICS_TEXT_CHARS)
        return [t.strip() for t in re.split(r"[,，、\n]", value) if t.strip()]
    return value


LogText = Annotated[str | None, Field(None, min_length=1, max_length=MAX_LOG_FIELD_CHARS, pattern=TEXT_NO_NUL)]
Topics = Annotated[
    Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_TOPIC_CHARS, pattern=TEXT_NO_NUL)]],
              Field(max_length=MAX_TOPICS)] | None,
    BeforeValidator(_topics),
    Field(None, description="the day's topics: a list, or one comma-separated string"),
]
Turns = Annotated[
    Annotated[list[Turn], Field(max_length=MAX_TURNS)] | None,
    BeforeValidator(_turns),
    Field(None, description="the day's conversation: [{speaker, text, at?}], or plain text whose 'Speaker: words' "
          "lines start turns"),
]
Mood = Annotated[int | None, Field(None, ge=-2, le=2, description="the day's mood, an integer from -2 to 2")]


def _turn_times(turns: list[Turn] | None) -> None:
    for i, turn in enumerate(turns or []):
        if turn.at is not None:
            try:
                _in_years(turn.at)
            except ValueError as exc:
                raise ValueError(f"turns[{i}].at: {exc}") from None


def _turns_total(turns: list[Turn] | None) -> None:
    if turns and sum(len(t.text) for t in turns) > MAX_TURNS_TOTAL_CHARS:
        raise ValueError(f"turns hold more than {MAX_TURNS_TOTAL_CHARS} characters in all; save the day in parts "
                         "(one log per project and day) or leave out what need not be remembered")


# state --------------------------------------------------------------------------------------------
class DailyLogState(BaseModel):
    """A daily log as it stands after an event: the ``data`` of every daily-log event."""

    model_config = ConfigDict(extra="forbid")

    id: UUID
    tenant: str
    project: str
    log_date: date
    events: str | None = None
    user_state: str | None = None
    mood_changes: str | None = None
    topics: list[str] | None = None
    relationship_state: str | None = None
    mood: int | None = Field(None, ge=-2, le=2)
    turns: list[Turn] | None = None
    processing_status: ProcessingStatus = ProcessingStatus.PENDING
    retry_count: int = Field(0, ge=0)
    error_reason: str | None = None
    claimed_at: datetime | None = Field(None, description="when the current processing attempt began")
    processed_at: datetime | None = None
    deleted: bool = Field(False, description="true on the event that deleted the log (retention)")
    resaved: bool = Field(False, description="content changed while processing: pending again once processed")
    version: int = Field(1, ge=1)
    created_at: datetime
    updated_at: datetime


class DailyLogView(BaseModel):
    id: UUID
    project: str
    log_date: date
    events: str | None = None
    user_state: str | None = None
    mood_changes: str | None = None
    topics: list[str] | None = None
    relationship_state: str | None = None
    mood: int | None = None
    turns: list[Turn] | None = None
    processing_status: ProcessingStatus
    retry_count: int
    error_reason: str | None = None
    claimed_at: datetime | None = None
    processed_at: datetime | None = None
    version: int
    created_at: datetime
    updated_at: datetime


class DailyLogEventType(StrEnum):
    SAVED = "DailyLogSaved"  # the first save of a day
    UPDATED = "DailyLogUpdated"  # a later save of the same day (status untouched)
    CLAIMED = "DailyLogClaimed"  # -> processing, retry_count + 1
    PROCESSED = "DailyLogProcessed"  # -> processed
    ATTEMPT_FAILED = "DailyLogAttemptFailed"  # -> pending (< MAX_TRIES) or failed
    RECOVERED = "DailyLogRecovered"  # stuck in processing -> pending or failed
    REQUEUED = "DailyLogRequeued"  # processed without a result -> pending (reconcile)
    STATUS_CHANGED = "DailyLogStatusChanged"  # update_log_status
    DELETED = "DailyLogDeleted"  # retention: the read model drops it


# commands -----------------------------------------------------------------------------------------
class SaveDailyLog(BaseModel):
    """Save the day's log (one per user, project and date; the date defaults to today, UTC).

    Saving the same date again updates the fields given (omitted ones are kept; ``turns``, when
    given, replace the stored turns). New content is learned from: a processed or failed log whose
    content changes goes back to pending, and a log being processed is queued again once that
    attempt ends. A save that changes nothing writes nothing. A date more than a day in the future
    is refused."""

    model_config = ConfigDict(extra="forbid")

    project: str = Project
    log_date: IsoDate | None = Field(None, description="YYYY-MM-DD; default today (UTC)")
    events: LogText = None
    user_state: LogText = None
    mood_changes: LogText = None
    topics: Topics = None
    relationship_state: LogText = None
    mood: Mood = None
    turns: Turns = None

    @field_validator("turns")
    @classmethod
    def _turns_limit(cls, value: list[Turn] | None) -> list[Turn] | None:
        _turns_total(value)
        _turn_times(value)
        return value


class SaveDailyLogResult(BaseModel):
    id: UUID
    project: str
    log_date: date
    processing_status: ProcessingStatus
    version: int
    created: bool = Field(description="true when this save started the day's log")
    updated: bool = Field(description="true when an existing log's fields changed")
    forgotten: list[UUID] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="memories learnt only from turns this save removed from the log: forgotten (their history "
        "keeps them; get_memory_history shows why)")


class ClaimDailyLog(BaseModel):
    """Claim a pending (or failed) log for processing: atomic, exactly one of many claimers wins."""

    model_config = ConfigDict(extra="forbid")

    id: UUID


class ClaimResult(BaseModel):
    claimed: bool = Field(description="false when another worker holds the log (it is processing)")
    log: DailyLogView | None = Field(None, description="the log as it stands (the claimed log when claimed)")
    message: str = ""


class MarkLogProcessed(BaseModel):
    """Mark a processing log processed (retry_count back to 0, processed_at set)."""

    model_config = ConfigDict(extra="forbid")

    id: UUID


class MarkLogFailed(BaseModel):
    """Record a failed attempt: back to pending below 3 tries, failed at 3, with the reason."""

    model_config = ConfigDict(extra="forbid")

    id: UUID
    error_reason: str = Field(min_length=1, max_length=MAX_ERROR_REASON_CHARS, pattern=TEXT_NO_NUL)


class UpdateLogStatus(BaseModel):
    """Move a log to another status, along the lifecycle's legal transitions only; ``processed``
    with an ``error_reason`` is refused (a failure cannot be marked a success)."""

    model_config = ConfigDict(extra="forbid")

    id: UUID
    processing_status: ProcessingStatus
    error_reason: str | None = Field(None, min_length=1, max_length=MAX_ERROR_REASON_CHARS, pattern=TEXT_NO_NUL)

    @model_validator(mode="after")
    def _no_reason_with_success(self) -> UpdateLogStatus:
        if self.processing_status is ProcessingStatus.PROCESSED and self.error_reason is not None:
            raise ValueError("error_reason: a log with an error_reason cannot be marked processed; "
                             "mark it failed (or pending) instead")
        return self


class DailyLogResult(BaseModel):
    changed: bool = Field(description="false when the log already stood so (nothing was written)")
    log: DailyLogView


class RecoverStuckLogs(BaseModel):
    """Send logs stuck in processing longer than ``timeout_minutes`` back to pending (below 3 tries)
    or to failed (at 3)."""

    model_config = ConfigDict(extra="forbid")

    timeout_minutes: int = Field(DEFAULT_STUCK_TIMEOUT_MINUTES, ge=1, le=7 * 24 * 60)
    project: str | None = Field(None, pattern=PROJECT_PATTERN, description="only this project (default: all)")


class ReconcileLogStatuses(BaseModel):
    """Send processed logs that have no extraction result back to pending."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, pattern=PROJECT_PATTERN, description="only this project (default: all)")


class DeleteLogs(BaseModel):
    """Delete processed logs last updated before the cut-off: ``older_than`` when given, else now
    minus ``retention_days`` (default ENGRAM_LOG_RETENTION_DAYS, 14). Failed logs are kept."""

    model_config = ConfigDict(extra="forbid")

    retention_days: int | None = Field(None, ge=0, le=36_500)
    older_than: IsoDateTime | None = Field(None, description="cut-off (ISO 8601); overrides retention_days")
    project: str | None = Field(None, pattern=PROJECT_PATTERN, description="only this project (default: all)")


class LogBatchResult(BaseModel):
    """What a batch operation (recover, reconcile, delete) changed."""

    count: int
    ids: list[UUID]
    requeued: int = Field(0, description="recover: logs sent back to pending")
    failed: int = Field(0, description="recover: logs that ran out of tries")
    cutoff: datetime | None = Field(None, description="delete: logs last updated before this were deleted")


# extraction tasks and results ---------------------------------------------------------------------
class ExtractionTaskState(BaseModel):
    """An extraction task as it stands: the ``data`` of every extraction-task event."""

    model_config = ConfigDict(extra="forbid")

    id: UUID
    tenant: str
    task_id: str
    project: str | None = None
    log_ids: list[UUID] = Field(default_factory=list)
    status: TaskStatus = TaskStatus.PENDING
    engine: str | None = None
    error: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    version: int = Field(1, ge=1)
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @model_validator(mode="after")
    def _success_has_no_error(self) -> ExtractionTaskState:
        """A successful task carries no ``error``: the memory service clears it when a task
        succeeds and refuses an error recorded on a success (RecordExtractionTask). Events written
        before that rule hold a success that kept an earlier attempt's error; they read (replay,
        the read model, an import) without it, as the rule would have written them. The event
        itself is unchanged, so the failure's reason stays in the task's history (its earlier
        ``failed`` event)."""
        if self.status is TaskStatus.SUCCESS and self.error is not None:
            self.error = None
        return self


class ExtractionTaskView(BaseModel):
    id: UUID
    task_id: str
    project: str | None = None
    log_ids: list[UUID]
    status: TaskStatus
    engine: str | None = None
    error: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    version: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


METRIC_KEY_PATTERN = r"^[a-z0-9_.]{1,64}$"


def _number_only(value: Any) -> Any:
    """A metric is a JSON number: ``"12"`` and ``true`` are refused, never read as 12 and 1."""
    if isinstance(value, bool | str):
        raise ValueError(f"a metric is a number, not {'a boolean' if isinstance(value, bool) else 'a string'}")
    return value


Metrics = Annotated[
    dict[Annotated[str, Field(pattern=METRIC_KEY_PATTERN)], Annotated[float, BeforeValidator(_number_only)]],
    Field(max_length=32),
    WithJsonSchema({"type": "object", "maxProperties": 32, "propertyNames": {"pattern": METRIC_KEY_PATTERN},
                    "additionalProperties": {"type": "number"}}),
]


class RecordExtractionTask(BaseModel):
    """Record (or update) the metadata of an extraction run: its id, the logs it covers, its status.

    Address an existing task by ``id`` or ``task_id``; with neither, a new task is recorded (its
    task_id derived from the request's idempotency key). Fields omitted are kept. A task recorded
    ``success`` carries no ``error`` (stated in the schema too, so clients and fuzzers see it)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [  # not success, or no error
        {"properties": {"status": {"not": {"const": "success"}}}},
        {"properties": {"error": {"type": "null"}}},
    ]})

    id: UUID | None = None
    task_id: str | None = Field(None, pattern=TASK_ID_PATTERN)
    log_ids: list[UUID] | None = Field(None, max_length=MAX_IDS)
    status: TaskStatus | None = None
    project: str | None = Field(None, pattern=PROJECT_PATTERN,
                                description="the project whose logs it covers (default: none, tenant-wide)")
    engine: str | None = Field(None, min_length=1, max_length=64, pattern=TEXT_NO_NUL,
                               description="which extraction engine ran it (builtin, llm, agent, …)")
    error: str | None = Field(None, min_length=1, max_length=MAX_ERROR_REASON_CHARS, pattern=TEXT_NO_NUL)
    metrics: Metrics | None = Field(
        None, description="numbers of the run, e.g. prompt_tokens, completion_tokens, cost_usd"
    )

    @field_validator("error")
    @classmethod
    def _success_has_no_error(cls, error: str | None, info: ValidationInfo) -> str | None:
        if error is not None and info.data.get("status") is TaskStatus.SUCCESS:
            raise ValueError("a successful extraction task carries no error: record it failed with its error, "
                             "or success without one")
        return error


class RecordExtractionTaskResult(BaseModel):
    task: ExtractionTaskView
    created: bool
    updated: bool


class ExtractionResultState(BaseModel):
    """The result of one task on one log: the ``data`` of every extraction-result event."""

    model_config = ConfigDict(extra="forbid")

    id: UUID
    tenant: str
    project: str
    log_id: UUID
    task_id: str
    memory_ids: list[UUID] = Field(default_factory=list)
    shared_memory_ids: list[UUID] = Field(default_factory=list)
    version: int = Field(1, ge=1)
    created_at: datetime
    updated_at: datetime


class ExtractionResultView(BaseModel):
    id: UUID
    project: str
    log_id: UUID
    task_id: str
    memory_ids: list[UUID]
    shared_memory_ids: list[UUID]
    version: int
    created_at: datetime
    updated_at: datetime


class RecordExtractionResult(BaseModel):
    """Link a log to the memories (and shared memories) one task produced. Unique per
    (log_id, task_id): recording it again replaces the lists (never a duplicate), and no memory is
    ever deleted by it."""

    model_config = ConfigDict(extra="forbid")

    log_id: UUID
    task_id: str = Field(pattern=TASK_ID_PATTERN)
    memory_ids: list[UUID] = Field(default_factory=list, max_length=MAX_IDS)
    shared_memory_ids: list[UUID] = Field(default_factory=list, max_length=MAX_IDS)


class RecordExtractionResultResult(BaseModel):
    result: ExtractionResultView
    created: bool
    replaced: bool = Field(description="true when an earlier result of the same (log_id, task_id) was replaced")


class ExtractionTaskEventType(StrEnum):
    RECORDED = "ExtractionTaskRecorded"


class ExtractionResultEventType(StrEnum):
    RECORDED = "ExtractionResultRecorded"


#: Aggregates of the event log (subject ``<ns>.evt.<tenant>.<aggregate>.<id>``), each event's
#: ``data`` the record's whole state.
DAILY_LOG_AGGREGATE = aggregate("dailylog", MEMORY, DailyLogState, DailyLogEventType)
EXTRACTION_TASK_AGGREGATE = aggregate("extractiontask", MEMORY, ExtractionTaskState, ExtractionTaskEventType)
EXTRACTION_RESULT_AGGREGATE = aggregate("extractionresult", MEMORY, ExtractionResultState, ExtractionResultEventType)


# queries ------------------------------------------------------------------------------------------
class GetUnprocessedLogs(BaseModel):
    """Logs waiting for extraction, oldest day first: pending, and failed (retryable) unless
    ``include_failed`` is false."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(20, ge=1, le=MAX_RECALL_LIMIT)
    include_failed: bool = True
    project: str | None = Field(None, pattern=PROJECT_PATTERN, description="only this project (default: all)")


class ListDailyLogs(BaseModel):
    """Daily logs of any status (none deleted), by day range and status, newest day first."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, pattern=PROJECT_PATTERN, description="only this project (default: all)")
    status: ProcessingStatus | None = Field(None, description="only logs in this status: pending, processing, "
                                            "processed or failed")
    date_from: Annotated[date, BeforeValidator(_iso_only)] | None = Field(
        None, description="only logs of this day or later (log_date, YYYY-MM-DD)")
    date_to: Annotated[date, BeforeValidator(_iso_only)] | None = Field(
        None, description="only logs of this day or earlier (log_date, YYYY-MM-DD)")
    limit: int = Field(20, ge=1, le=MAX_RECALL_LIMIT)
    cursor: str | None = Field(None, pattern=CURSOR_PATTERN, description="the next page: next_cursor of the page "
                               "before, with the same filters")


class GetDailyLog(BaseModel):
    """One log by id."""

    model_config = ConfigDict(extra="forbid")

    id: UUID


class DailyLogList(BaseModel):
    logs: list[DailyLogView]
    next_cursor: str | None = Field(None, exclude_if=lambda v: v is None,
                                    description="more match (list_daily_logs): pass it as cursor for the next page")


class DailyLogLookup(BaseModel):
    found: bool
    log: DailyLogView | None = None


class GetExtractionTasks(BaseModel):
    """Extraction tasks, newest first, by status, task_id and/or a log they cover."""

    model_config = ConfigDict(extra="forbid")

    status: TaskStatus | None = None
    task_id: str | None = Field(None, pattern=TASK_ID_PATTERN)
    log_id: UUID | None = Field(None, description="only the tasks that cover this daily log")
    limit: int = Field(20, ge=1, le=MAX_RECALL_LIMIT)


class ExtractionTaskList(BaseModel):
    tasks: list[ExtractionTaskView]
    more: bool | None = Field(None, exclude_if=lambda v: v is None,
                              description=more_description("task_id, log_id or status"))


class GetExtractionResults(BaseModel):
    """Extraction results by log and/or task, newest first."""

    model_config = ConfigDict(extra="forbid")

    log_id: UUID | None = None
    task_id: str | None = Field(None, pattern=TASK_ID_PATTERN)
    limit: int = Field(100, ge=1, le=MAX_IDS)


class ExtractionResultList(BaseModel):
    results: list[ExtractionResultView]
    more: bool | None = Field(None, exclude_if=lambda v: v is None, description=more_description("log_id or task_id"))


for _name, _model, _result in (
    ("save_daily_log", SaveDailyLog, SaveDailyLogResult),
    ("claim_daily_log", ClaimDailyLog, ClaimResult),
    ("mark_log_processed", MarkLogProcessed, DailyLogResult),
    ("mark_log_failed", MarkLogFailed, DailyLogResult),
    ("update_log_status", UpdateLogStatus, DailyLogResult),
    ("recover_stuck_logs", RecoverStuckLogs, LogBatchResult),
    ("reconcile_log_statuses", ReconcileLogStatuses, LogBatchResult),
    ("delete_logs", DeleteLogs, LogBatchResult),
    ("record_extraction_task", RecordExtractionTask, RecordExtractionTaskResult),
    ("record_extraction_result", RecordExtractionResult, RecordExtractionResultResult),
):
    command(MEMORY, _name, result=_result)(_model)
for _name, _model, _result in (
    ("get_unprocessed_logs", GetUnprocessedLogs, DailyLogList),
    ("get_daily_log", GetDailyLog, DailyLogLookup),
    ("list_daily_logs", ListDailyLogs, DailyLogList),
    ("get_extraction_tasks", GetExtractionTasks, ExtractionTaskList),
    ("get_extraction_results", GetExtractionResults, ExtractionResultList),
):
    query(MEMORY, _name, result=_result)(_model)

del _name, _model, _result
