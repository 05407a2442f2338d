"""Error codes shared by every service, and the error body that crosses the wire."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class ErrorCode(StrEnum):
    """Stable, machine-readable error codes. Their HTTP status lives in ``HTTP_STATUS``."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    INTERNAL = "internal"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    IDEMPOTENCY_KEY_IN_FLIGHT = "idempotency_key_in_flight"
    ACCEPTED = "accepted"  # not a failure: queued while the owning service is down (HTTP 202)


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 422,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.CONFLICT: 409,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.INTERNAL: 500,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 422,
    ErrorCode.IDEMPOTENCY_KEY_IN_FLIGHT: 409,
    ErrorCode.ACCEPTED: 202,
}


class ErrorBody(BaseModel):
    """An error a client can act on: what went wrong, which field, and what to do next."""

    model_config = ConfigDict(extra="forbid")

    code: ErrorCode
    message: str
    field: str | None = None

    def __str__(self) -> str:
        where = f" (field '{self.field}')" if self.field else ""
        return f"{self.code.value}{where}: {self.message}"


class ServiceError(Exception):
    """A refusal a handler raises: it reaches the caller as an error body (code, message, field)."""

    code = ErrorCode.INVALID_ARGUMENT

    def __init__(self, message: str, field: str | None = None, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code

    @property
    def body(self) -> ErrorBody:
        return ErrorBody(code=self.code, message=self.message, field=self.field)
