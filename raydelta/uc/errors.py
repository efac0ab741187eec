"""Unity Catalog's error responses: ``{"error_code": ..., "message": ...}`` with
Unity Catalog's HTTP status for each code.

Invariants:
- Every failure a handler raises becomes exactly one JSON body of this shape;
  nothing else (no HTML, no stack trace) reaches the client.
- raydelta's typed errors map onto Unity Catalog's codes by meaning
  (:func:`error_for`): a missing or forged token is ``UNAUTHENTICATED``
  (401), a missing privilege ``PERMISSION_DENIED`` (403), credentials the
  catalog cannot vend (no role configured, tables overlapping) and a
  security setting on a catalog without authorization
  ``FAILED_PRECONDITION`` (400), an existing principal ``ALREADY_EXISTS`` (409), a version taken by
  another commit ``COMMIT_VERSION_CONFLICT`` (409, which delta-storage's
  client turns into a retryable conflict), a publishing backlog
  ``RESOURCE_EXHAUSTED`` (429), anything unexpected ``INTERNAL`` (500).
"""

from __future__ import annotations

from typing import Any

from raydelta.actors.catalog.locations import (
    ExternalLocationAlreadyExistsError,
    ExternalLocationNotFoundError,
)
from raydelta.actors.catalog.unity.errors import (
    CommitVersionConflictError,
    NamespaceAlreadyExistsError,
    NamespaceNotFoundError,
    UpdateRequirementConflictError,
)
from raydelta.protocol.errors import (
    AuthorizationDisabledError,
    CredentialsUnavailableError,
    DeltaConcurrentModificationException,
    OverlappingTablesError,
    PermissionDeniedError,
    PrincipalAlreadyExistsError,
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
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "RESOURCE_EXHAUSTED": 429,
    "COMMIT_VERSION_CONFLICT": 409,
    "UPDATE_REQUIREMENT_CONFLICT": 409,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
}
"""Unity Catalog's HTTP status of each error code it answers with (its ``ErrorCode``)."""


DELTA_ERROR_TYPES: dict[str, tuple[str, int]] = {
    "INVALID_ARGUMENT": ("InvalidParameterValueException", 400),
    "FAILED_PRECONDITION": ("InvalidParameterValueException", 400),
    "NOT_FOUND": ("NotFoundException", 404),
    "CATALOG_NOT_FOUND": ("NoSuchCatalogException", 404),
    "SCHEMA_NOT_FOUND": ("NoSuchSchemaException", 404),
    "TABLE_NOT_FOUND": ("NoSuchTableException", 404),
    "CATALOG_ALREADY_EXISTS": ("AlreadyExistsException", 409),
    "SCHEMA_ALREADY_EXISTS": ("AlreadyExistsException", 409),
    "TABLE_ALREADY_EXISTS": ("AlreadyExistsException", 409),
    "ALREADY_EXISTS": ("AlreadyExistsException", 409),
    "PERMISSION_DENIED": ("PermissionDeniedException", 403),
    "UNAUTHENTICATED": ("NotAuthorizedException", 401),
    "RESOURCE_EXHAUSTED": ("ResourceExhaustedException", 429),
    "COMMIT_VERSION_CONFLICT": ("CommitVersionConflictException", 409),
    "UPDATE_REQUIREMENT_CONFLICT": ("UpdateRequirementConflictException", 409),
    "UNIMPLEMENTED": ("NotImplementedException", 501),
    "INTERNAL": ("InternalServerErrorException", 500),
}
"""The Delta REST API's error type and HTTP status of each Unity Catalog error code
(on ``/delta/v1`` paths errors are ``{"error": {"message", "type", "code"}}``)."""


class UCError(Exception):
    """A failure answered as ``error_code`` (its HTTP status from :data:`HTTP_STATUS`)."""

    def __init__(self, error_code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.status = status if status is not None else HTTP_STATUS[error_code]

    def body(self) -> dict[str, Any]:
        return {"error_code": self.error_code, "message": self.message}

    def delta_body(self) -> tuple[int, dict[str, Any]]:
        """The Delta REST API's status and ``DeltaErrorResponse`` for this error."""
        kind, status = DELTA_ERROR_TYPES.get(self.error_code, ("BadRequestException", 400))
        if self.error_code == "UNIMPLEMENTED" and self.status == 405:
            kind, status = "BadRequestException", 405
        return status, {"error": {"message": self.message, "type": kind, "code": status}}


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
    elif isinstance(error, ExternalLocationNotFoundError):
        code = "NOT_FOUND"
    elif isinstance(error, ExternalLocationAlreadyExistsError):
        code = "ALREADY_EXISTS"
    elif isinstance(
        error, (OverlappingTablesError, CredentialsUnavailableError, AuthorizationDisabledError)
    ):
        code = "FAILED_PRECONDITION"  # nothing the request can fix: the catalog's setup
    elif isinstance(error, NamespaceNotFoundError):
        code = "CATALOG_NOT_FOUND" if error.kind == "catalog" else "SCHEMA_NOT_FOUND"
    elif isinstance(error, NamespaceAlreadyExistsError):
        code = "CATALOG_ALREADY_EXISTS" if error.kind == "catalog" else "SCHEMA_ALREADY_EXISTS"
    elif isinstance(error, TableNotFoundError):
        code = "TABLE_NOT_FOUND"
    elif isinstance(error, PrincipalAlreadyExistsError):
        code = "ALREADY_EXISTS"
    elif isinstance(error, TableAlreadyExistsError):
        code = "TABLE_ALREADY_EXISTS"
    elif isinstance(error, UpdateRequirementConflictError):
        code = "UPDATE_REQUIREMENT_CONFLICT"
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


__all__ = ["DELTA_ERROR_TYPES", "HTTP_STATUS", "UCError", "error_for"]
