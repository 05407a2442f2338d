"""Domain errors of the memory service, mapped to contract error codes at the edge."""

from __future__ import annotations

from contracts.errors import ErrorCode, ServiceError


class DomainError(ServiceError):
    code = ErrorCode.INVALID_ARGUMENT


class InvalidArgument(DomainError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(DomainError):
    code = ErrorCode.NOT_FOUND


class Conflict(DomainError):
    code = ErrorCode.CONFLICT


class PermissionDenied(DomainError):
    code = ErrorCode.PERMISSION_DENIED
