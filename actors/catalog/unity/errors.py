"""The errors of Unity Catalog's model (answered with Unity Catalog's error
codes by :func:`raydelta.uc.errors.error_for`). Each keeps its arguments in
``args``: errors cross processes (Ray pickles them)."""

from __future__ import annotations

from raydelta.protocol.errors import (
    DeltaConcurrentModificationException,
    InvalidArgumentError,
    TableAlreadyExistsError,
    TableNotFoundError,
)


class NamespaceNotFoundError(TableNotFoundError):
    """A catalog or schema that does not exist (``kind`` says which)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message, kind)  # both in args: the error crosses processes
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0])


class NamespaceAlreadyExistsError(TableAlreadyExistsError):
    """A catalog or schema that exists already (``kind`` says which)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message, kind)  # both in args: the error crosses processes
        self.kind = kind

    def __str__(self) -> str:
        return str(self.args[0])


class NamespaceNotEmptyError(InvalidArgumentError):
    """A catalog or schema still holding schemas or tables (delete with force)."""


class CommitVersionConflictError(DeltaConcurrentModificationException):
    """Unity Catalog's commit-version conflict: the version is taken by another commit."""


class UpdateRequirementConflictError(DeltaConcurrentModificationException):
    """A Delta REST API requirement (``assert-table-uuid``, ``assert-etag``) failed."""


__all__ = [
    "CommitVersionConflictError",
    "NamespaceAlreadyExistsError",
    "NamespaceNotEmptyError",
    "NamespaceNotFoundError",
    "UpdateRequirementConflictError",
]
