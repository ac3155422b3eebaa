"""Errors a client can act on: a gRPC status, a reason code, and a message naming the field and the rule.

`ApiError` is what the edge raises; `status_of` maps the domain's own errors (TaskError, LineageError)
onto status codes. Messages never carry exception class names, stack traces or server paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.tasks.model import TaskError


@dataclass(frozen=True)
class ApiError(Exception):
    """A request refused at the edge, with the status clients should see."""

    code: grpc.StatusCode
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def invalid(reason: str, message: str) -> ApiError:
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, reason, message)


def exhausted(reason: str, message: str) -> ApiError:
    return ApiError(grpc.StatusCode.RESOURCE_EXHAUSTED, reason, message)


def precondition(reason: str, message: str) -> ApiError:
    return ApiError(grpc.StatusCode.FAILED_PRECONDITION, reason, message)


def not_found(reason: str, message: str) -> ApiError:
    return ApiError(grpc.StatusCode.NOT_FOUND, reason, message)


# Lineage reasons that are not the client's input being wrong.
_LINEAGE_STATUS = {
    "run_not_found": grpc.StatusCode.NOT_FOUND,
    "repository_closed": grpc.StatusCode.UNAVAILABLE,
    "schema_too_new": grpc.StatusCode.FAILED_PRECONDITION,
    "archive_too_large": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "run_exists": grpc.StatusCode.ALREADY_EXISTS,
}


def api_error_of(exc: Exception) -> ApiError | None:
    """The client-facing form of a domain error, or None for anything else (a server fault)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, TaskError):
        return ApiError(grpc.StatusCode.INVALID_ARGUMENT, exc.reason, exc.message)
    if isinstance(exc, LineageError):
        code = _LINEAGE_STATUS.get(exc.reason, grpc.StatusCode.INVALID_ARGUMENT)
        return ApiError(code, exc.reason, exc.message)
    return None
