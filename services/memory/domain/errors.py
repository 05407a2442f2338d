"""Domain errors of the memory service, mapped to contract error codes at the edge."""

from __future__ import annotations

from contracts.errors import ErrorCode


class DomainError(Exception):
    code = ErrorCode.INVALID_ARGUMENT

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidArgument(DomainError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(DomainError):
    code = ErrorCode.NOT_FOUND


class Conflict(DomainError):
    code = ErrorCode.CONFLICT
