"""The envelopes every message on the bus travels in.

Events carry the aggregate's *new state* (so the last event of an aggregate subject is enough to
load it). Commands carry the client's idempotency key (``command_id``); the bus message id and the
stored outcome are keyed by it *within one tenant and one operation* (``contracts.messages.scoped_command_id``).
Replies (command outcomes and query answers) share one shape.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field

from contracts.errors import ErrorBody, ErrorCode

IDEMPOTENCY_KEY_PATTERN = r"^[A-Za-z0-9_.:-]{8,128}$"
PROJECT_SCOPE = (
    "the only project the caller may read or change (an API key's restriction or a connection's pin); "
    "the owning service enforces it for every way a thing is addressed. None: every project of the tenant"
)


def utcnow() -> datetime:
    return datetime.now(UTC)


class EventEnvelope(BaseModel):
    """One fact in the event log. ``data`` is the aggregate's state after the event."""

    model_config = ConfigDict(extra="forbid")

    event_id: UUID
    type: str
    version: int = Field(1, ge=1, description="schema version of `data` for this event type")
    occurred_at: datetime
    tenant: str
    aggregate: str
    aggregate_id: str
    correlation_id: str
    causation_id: str
    data: dict[str, Any]
    origin: Literal["import"] | None = Field(
        None, exclude_if=lambda v: v is None,
        description="import: appended by an import of an Engram export (the record as it was exported), "
        "not written by a command of this install; absent otherwise")


class CommandEnvelope(BaseModel):
    """A request to change state. ``command_id`` is the client's idempotency key: one effect per
    (tenant, type, key), and the same key with another request is refused."""

    model_config = ConfigDict(extra="forbid")

    command_id: str = Field(pattern=IDEMPOTENCY_KEY_PATTERN)
    type: str
    version: int = Field(1, ge=1)
    issued_at: datetime = Field(default_factory=utcnow)
    tenant: str
    correlation_id: str = Field(default_factory=lambda: uuid4().hex)
    payload: dict[str, Any]
    project_scope: str | None = Field(None, description=PROJECT_SCOPE)


class QueryEnvelope(BaseModel):
    """A read request answered over core NATS request-reply."""

    model_config = ConfigDict(extra="forbid")

    type: str
    version: int = Field(1, ge=1)
    tenant: str | None = None
    correlation_id: str = Field(default_factory=lambda: uuid4().hex)
    payload: dict[str, Any]
    project_scope: str | None = Field(None, description=PROJECT_SCOPE)


ResultT = TypeVar("ResultT")


class Reply(BaseModel, Generic[ResultT]):
    """The outcome of a command or the answer to a query."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    result: ResultT | None = None
    error: ErrorBody | None = None

    @classmethod
    def success(cls, result: Any) -> Reply[Any]:
        return AnyReply(ok=True, result=result)

    @classmethod
    def failure(cls, code: ErrorCode, message: str, field: str | None = None) -> Reply[Any]:
        return AnyReply(ok=False, error=ErrorBody(code=code, message=message, field=field))



#: ``Reply[Any]``, parametrised once. pydantic keeps a parametrised generic in a weak cache only, so
#: ``Reply[Any]`` written at each call built a new model class whenever the last one had been
#: collected: a service's profile under recall load showed ~5% of its event loop there.
AnyReply: type[Reply[Any]] = Reply[Any]

class OutcomeQuery(BaseModel):
    """Ask the owning service for the outcome of a command (query ``command_outcome``): for a
    caller whose reply was lost, or whose request was a duplicate of one already accepted."""

    model_config = ConfigDict(extra="forbid")

    operation: str
    key: str = Field(pattern=IDEMPOTENCY_KEY_PATTERN)
    fingerprint: str | None = Field(None, description="the request's; another request's outcome is refused")
