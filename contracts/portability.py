"""Portability contracts: bulk saves, the export/import record format, and the purge of a user.

* **Bulk saves** (``save_memories`` over MCP, ``POST /v1/memories/bulk``): up to
  :data:`MAX_BULK_MEMORIES` memories in one request, each an ordinary ``SaveMemory`` sent through
  the command stream with its own idempotency key, answered item by item.
* **Export records** (one JSON object per line of an ``engram export`` file): a header, then every
  memory with all its versions, shared memories, daily logs, extraction tasks and results. States
  are written without their tenant, so a file can be imported into any user.
* **Restore** (``RestoreRecords``, the memory service's): put exported records back with their
  ids, versions and timestamps, so export → purge → import → export gives the same records.
* **Purge** (``Purge*User``, one command per service that keeps data of a user): each service
  deletes its own rows of the user; the event and command streams are purged by subject by the
  caller (``kit/purge.py``). No service reads another's schema.
"""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator

from contracts.daily_logs import DailyLogState, ExtractionResultState, ExtractionTaskState
from contracts.errors import ErrorBody
from contracts.memory import PROJECT_PATTERN, TEXT_PATTERN, MemoryState, SharedMemoryState
from contracts.messages import command, query
from contracts.subjects import AUTH, GRAPH, MEMORY

#: The extractor's service name on the bus (its commands: ``<ns>.cmd.extractor.<name>``).
EXTRACTOR = "extractor"

# bulk saves ------------------------------------------------------------------------------------
#: Memories in one bulk request (MCP ``save_memories`` or ``POST /v1/memories/bulk``).
MAX_BULK_MEMORIES = 500
#: Items of one bulk request in flight on the command stream at once (the memory service embeds a
#: fetched batch in one call, so a few dozen at a time keep it busy without queueing the rest).
BULK_CONCURRENCY = 32
#: Records of one RestoreRecords command (an import sends several at once).
MAX_RESTORE_RECORDS = 64
#: An export page is cut at this many serialised bytes (NATS' default payload limit is 1 MiB).
EXPORT_PAGE_BYTES = 600_000
#: ... and an import's restore command at this many bytes of records (it also carries ids and times).
RESTORE_BATCH_BYTES = 600_000
MAX_EXPORT_PAGE = 200


class BulkItemStatus(StrEnum):
    SAVED = "saved"  # a new memory, or a new version of a keyed one
    DUPLICATE = "duplicate"  # already held exactly this (same content, or the same key's same state)
    ERROR = "error"


class BulkItemResult(BaseModel):
    """The outcome of one item of a bulk save, in request order."""

    index: int = Field(ge=0)
    status: BulkItemStatus
    memory_id: UUID | None = None
    version: int | None = None
    project: str | None = None
    error: ErrorBody | None = Field(None, description="for status error: the code, message and field "
                                    "(``memories[i].<field>``)")


class SaveMemoriesResult(BaseModel):
    saved: int
    duplicates: int
    errors: int
    results: list[BulkItemResult]


#: Memories one bulk forget names (``POST /v1/memories/forget/bulk``).
MAX_BULK_FORGET = 100


class ForgetMemoriesRequest(BaseModel):
    """Forget many memories by id, with one reason. Each id is forgotten as ``POST /v1/memories/forget``
    would (a memory outside the caller's project is not found), answered item by item."""

    model_config = ConfigDict(extra="forbid")

    memory_ids: list[UUID] = Field(min_length=1, max_length=MAX_BULK_FORGET, json_schema_extra={"uniqueItems": True},
                                   description=f"the memories to forget: 1-{MAX_BULK_FORGET} ids, each once")
    reason: str | None = Field(None, pattern=TEXT_PATTERN, max_length=1_000, description="why (kept with each)")

    @field_validator("memory_ids")
    @classmethod
    def _once(cls, ids: list[UUID]) -> list[UUID]:
        if len(set(ids)) != len(ids):
            raise ValueError("each memory id may be named once")
        return ids


class ForgetItemStatus(StrEnum):
    FORGOTTEN = "forgotten"
    ALREADY_FORGOTTEN = "already_forgotten"
    ERROR = "error"


class ForgetItemResult(BaseModel):
    """The outcome of one id of a bulk forget, in request order."""

    index: int = Field(ge=0)
    memory_id: UUID
    status: ForgetItemStatus
    error: ErrorBody | None = Field(None, description="for status error: the code, message and field "
                                    "(``memory_ids[i]``)")
    reinstated: list[UUID] = Field(default_factory=list, exclude_if=lambda v: not v,
                                   description="the memories this one had superseded, current again")


class ForgetMemoriesResult(BaseModel):
    forgotten: int
    already_forgotten: int
    errors: int
    results: list[ForgetItemResult]


class SaveMemoriesRequest(BaseModel):
    """Many memories at once. Each item is what ``POST /v1/memories`` takes (content, optional
    category, memory_key, context, importance, confidence, source, project) plus an optional
    ``idempotency_key`` of its own; an item without one gets ``<request key>:<index>`` (or a fresh
    key when the request has none). Items are validated one by one: a bad item is an error in its
    result, naming its field, and the others are saved."""

    model_config = ConfigDict(extra="forbid")

    memories: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_BULK_MEMORIES,
                                           description=f"1-{MAX_BULK_MEMORIES} memories")
    project: str | None = Field(None, pattern=PROJECT_PATTERN, description="default project of the items")


# export records --------------------------------------------------------------------------------
FORMAT_NAME = "engram-export"
FORMAT_VERSION = 1


def _portable(model: type[BaseModel], name: str) -> type[BaseModel]:
    """The state model without its tenant (a file can be imported into any user)."""
    fields = {k: (v.annotation, v) for k, v in model.model_fields.items() if k != "tenant"}
    made: type[BaseModel] = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)  # type: ignore[call-overload]
    return made


PortableMemory = _portable(MemoryState, "PortableMemory")
PortableShared = _portable(SharedMemoryState, "PortableShared")
PortableLog = _portable(DailyLogState, "PortableLog")
PortableTask = _portable(ExtractionTaskState, "PortableTask")
PortableResult = _portable(ExtractionResultState, "PortableResult")


class ExportHeader(BaseModel):
    """The first line of an export. ``exported_at`` and ``user`` are the export's own metadata."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["header"] = "header"
    format: Literal["engram-export"] = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    user: str
    project: str | None = None
    exported_at: datetime


class ExportedVersion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event: str
    occurred_at: datetime
    state: PortableMemory  # type: ignore[valid-type]


class MemoryRecord(BaseModel):
    """A memory with every version the event log holds, oldest first."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["memory"] = "memory"
    id: UUID
    versions: list[ExportedVersion] = Field(min_length=1)

    @field_validator("versions")
    @classmethod
    def _one_memory_oldest_first(cls, versions: list[ExportedVersion], info: ValidationInfo) -> list[ExportedVersion]:
        """Every version is the record's memory, each newer than the one before (an import appends
        them in this order: an edited file must not put an older version after a newer one)."""
        numbers = [v.state.version for v in versions]
        if any(b <= a for a, b in zip(numbers, numbers[1:], strict=False)):
            raise ValueError(f"the versions must be oldest first, each state.version greater than the one before: {numbers}")
        record_id = info.data.get("id")
        if record_id is not None and any(v.state.id != record_id for v in versions):
            raise ValueError("every version's state.id must be the record's id")
        return versions


class SharedMemoryRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["shared_memory"] = "shared_memory"
    event: str
    occurred_at: datetime
    state: PortableShared  # type: ignore[valid-type]


class DailyLogRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["daily_log"] = "daily_log"
    event: str
    occurred_at: datetime
    state: PortableLog  # type: ignore[valid-type]


class ExtractionTaskRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["extraction_task"] = "extraction_task"
    event: str
    occurred_at: datetime
    state: PortableTask  # type: ignore[valid-type]
    log_dates: dict[UUID, date] = Field(default_factory=dict,
                                        description="(project, date) of referenced logs, to re-derive their ids")
    log_projects: dict[UUID, str] = Field(default_factory=dict)


class ExtractionResultRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["extraction_result"] = "extraction_result"
    event: str
    occurred_at: datetime
    state: PortableResult  # type: ignore[valid-type]
    log_date: date | None = None


Record = Annotated[
    MemoryRecord | SharedMemoryRecord | DailyLogRecord | ExtractionTaskRecord | ExtractionResultRecord,
    Field(discriminator="type"),
]
RecordKind = Literal["memory", "shared_memory", "daily_log", "extraction_task", "extraction_result"]
#: The order an export writes its records in (an import restores logs before what refers to them).
RECORD_KINDS: tuple[RecordKind, ...] = ("daily_log", "memory", "shared_memory", "extraction_task",
                                        "extraction_result")


class ExportPage(BaseModel):
    """One page of a user's records of one kind, in a stable order (keyset ``after``)."""

    model_config = ConfigDict(extra="forbid")

    kind: RecordKind
    project: str | None = Field(None, pattern=PROJECT_PATTERN)
    after: str | None = Field(None, max_length=200, description="the previous page's `next`")
    limit: int = Field(100, ge=1, le=MAX_EXPORT_PAGE)


class ExportPageResult(BaseModel):
    records: list[Record]
    next: str | None = Field(None, description="give as `after` for the next page; None: the last page")


class RestoreStatus(StrEnum):
    RESTORED = "restored"
    DUPLICATE = "duplicate"  # already there (an import run twice changes nothing)
    ERROR = "error"


class RestoreItem(BaseModel):
    index: int
    status: RestoreStatus
    id: UUID | None = None
    error: ErrorBody | None = None


class NamedKey(BaseModel):
    """A keyed memory of the file being imported, by its project and key."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(pattern=PROJECT_PATTERN)
    memory_key: str = Field(min_length=1, max_length=256, pattern=TEXT_PATTERN)


MAX_NAMED_KEYS = 4096


class RestoreRecords(BaseModel):
    """Put exported records back: ids, versions and timestamps as exported (re-derived from the
    user's own when ``source_user`` is another user). A record already there is a duplicate."""

    model_config = ConfigDict(extra="forbid")

    records: list[Record] = Field(min_length=1, max_length=MAX_RESTORE_RECORDS)
    source_user: str | None = Field(None, max_length=256,
                                    description="the user the records were exported from (the header's)")
    named_keys: list[NamedKey] = Field(
        default_factory=list, max_length=MAX_NAMED_KEYS,
        description="into another user: the keyed memories of the file that these records name (what a memory "
        "superseded, what superseded it, what it is flagged against) but that come in a later batch, so that "
        "their ids in the new user are derived from their keys as their own records' will be")


class RestoreResult(BaseModel):
    items: list[RestoreItem]


# purge -----------------------------------------------------------------------------------------
class PurgeUser(BaseModel):
    """Remove everything a service keeps of one user. Sent by the operator (tenant ``admin``), so
    that the command's own outcome row names neither the user nor their content; idempotent (a
    second purge finds nothing to delete)."""

    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_-]{1,128}$")


class PurgeResult(BaseModel):
    service: str
    removed: dict[str, int] = Field(default_factory=dict, description="rows (or points) removed, by store")
    queued: bool = Field(False, description="the service is not running: its purge waits in the command stream "
                         "and runs exactly once when it is back")


class PurgeMemoryUser(PurgeUser):
    """The memory service's part: every row of the user in its schema, their vectors, caches."""


class PurgeAuthUser(PurgeUser):
    """Auth's part: the user, their API keys, OAuth grants, codes, tokens and sessions."""


class PurgeExtractorUser(PurgeUser):
    """The extractor's part: its task ledger rows and the user's entry in its tenant list."""


class PurgeGraphUser(PurgeUser):
    """The graph service's part: the user's nodes, edges, similar-edge queue and projection marks."""


class RestoreAuthUser(PurgeUser):
    """Auth's part of an import: make sure the user exists (brought back after a purge), so that
    ``engram keys create --user`` can give them a key again. Nothing else is restored: keys and
    OAuth grants are credentials, never exported."""


class RestoredUser(BaseModel):
    user_id: str
    created: bool


class PurgeReport(BaseModel):
    """What a purge removed, per service and per stream."""

    user_id: str
    services: list[PurgeResult]
    events: int = Field(description="events purged from the event stream")
    commands: int = Field(0, description="pending commands of the user removed from the command stream")
    dead_letters: int = Field(0, description="dead letters of the user removed")


#: Every service's purge command: the purge sends each (a service added later adds its own here).
PURGE_COMMANDS: tuple[type[PurgeUser], ...] = (PurgeMemoryUser, PurgeAuthUser, PurgeExtractorUser, PurgeGraphUser)

command(MEMORY, "restore_records", result=RestoreResult, restores=True)(RestoreRecords)
command(MEMORY, "purge_user", result=PurgeResult)(PurgeMemoryUser)
command(AUTH, "purge_user", result=PurgeResult)(PurgeAuthUser)
command(EXTRACTOR, "purge_user", result=PurgeResult)(PurgeExtractorUser)
command(AUTH, "restore_user", result=RestoredUser)(RestoreAuthUser)
command(GRAPH, "purge_user", result=PurgeResult)(PurgeGraphUser)
query(MEMORY, "export_page", result=ExportPageResult)(ExportPage)
