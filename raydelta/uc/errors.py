"""Unity Catalog's error responses: ``{"error_code": ..., "message": ...}`` with
Unity Catalog's HTTP status for each code.

Invariants:
- Every failure a handler raises becomes exactly one JSON body of this shape;
  nothing else (no HTML, no stack trace) reaches the client.
- raydelta's typed errors map onto Unity Catalog's codes by meaning
  (:func:`error_for`): a missing or forged token is ``UNAUTHENTICATED``
  (401), a missing privilege ``PERMISSION_DENIED`` (403), a version taken by
  another commit ``COMMIT_VERSION_CONFLICT`` (409, which delta-storage's
  client turns into a retryable conflict), a publishing backlog
  ``RESOURCE_EXHAUSTED`` (429), anything unexpected ``INTERNAL`` (500).
"""

from __future__ import annotations

from typing import Any

from raydelta.actors.catalog_unity import (
    CommitVersionConflictError,
    NamespaceAlreadyExistsError,
    NamespaceNotFoundError,
)
from raydelta.protocol.errors import (
    DeltaConcurrentModificationException,
    PermissionDeniedError,
    PublishBacklogError,
    RatificationError,
    RaydeltaError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnauthenticatedError,
)

HTTP_STATUS: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "NOT_FOUND": 404,
    "CATALOG_NOT_FOUND": 404,
    "SCHEMA_NOT_FOUND": 404,
    "TABLE_NOT_FOUND": 404,
    "CATALOG_ALREADY_EXISTS": 400,
    "SCHEMA_ALREADY_EXISTS": 400,
    "TABLE_ALREADY_EXISTS": 400,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "RESOURCE_EXHAUSTED": 429,
    "COMMIT_VERSION_CONFLICT": 409,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
}
"""Unity Catalog's HTTP status of each error code it answers with (its ``ErrorCode``)."""


class UCError(Exception):
    """A failure answered as ``error_code`` (its HTTP status from :data:`HTTP_STATUS`)."""

    def __init__(self, error_code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.status = status if status is not None else HTTP_STATUS[error_code]

    def body(self) -> dict[str, Any]:
        return {"error_code": self.error_code, "message": self.message}


def error_for(error: BaseException) -> UCError:
    """The Unity Catalog error answering ``error`` (module docstring)."""
    if isinstance(error, UCError):
        return error
    message = str(error) or type(error).__name__
    code = "INTERNAL"
    if isinstance(error, UnauthenticatedError):
        code = "UNAUTHENTICATED"
    elif isinstance(error, PermissionDeniedError):
        code = "PERMISSION_DENIED"
    elif isinstance(error, NamespaceNotFoundError):
        code = "CATALOG_NOT_FOUND" if error.kind == "catalog" else "SCHEMA_NOT_FOUND"
    elif isinstance(error, NamespaceAlreadyExistsError):
        code = "CATALOG_ALREADY_EXISTS" if error.kind == "catalog" else "SCHEMA_ALREADY_EXISTS"
    elif isinstance(error, TableNotFoundError):
        code = "TABLE_NOT_FOUND"
    elif isinstance(error, TableAlreadyExistsError):
        code = "TABLE_ALREADY_EXISTS"
    elif isinstance(
        error, (CommitVersionConflictError, DeltaConcurrentModificationException, RatificationError)
    ):
        code = "COMMIT_VERSION_CONFLICT"
    elif isinstance(error, PublishBacklogError):
        code = "RESOURCE_EXHAUSTED"
    elif isinstance(error, (RaydeltaError, ValueError)):
        code = "INVALID_ARGUMENT"  # bad input: InvalidArgument/InvalidCommit/Schema errors...
    if code == "INTERNAL":
        message = f"{type(error).__name__}: {message}"
    return UCError(code, message)


__all__ = ["HTTP_STATUS", "UCError", "error_for"]
