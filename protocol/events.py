"""The typed events actors exchange about commits.

A writer sends a :class:`CommitRequest` (its actions plus the
:class:`ReadSet` it read at ``read_version``); the table's coordinator
answers with a :class:`CommitReply`: :class:`CommitCommitted`,
:class:`CommitConflict` (a winning commit conflicts, delta-spark's exception
class named) or :class:`CommitRejected` (the request breaks a writer rule).
After each commit the coordinator tells subscribers with
:class:`CommitPublished`.

Invariants:
- Every event is a frozen pydantic model; it pickles (Ray) and round-trips
  through JSON (``model_validate_json(model_dump_json())`` equals the
  original). Actions serialize as log wrappers (``{"add": {...}}``) so the
  JSON form is unambiguous.
- Replies are typed outcomes, not exceptions; ``raise_if_conflict()`` turns a
  conflict or a rejection back into the ``protocol.errors`` class it names
  (the same class the coordinator raised), and returns a committed reply.
- Room for ``catalogManaged`` tables (CATALOG_MANAGED.md): a request may name
  a staged commit file (``staged_commit_path``) instead of, or besides,
  sending its actions inline; ``expected_version`` pins the version a staged
  file was written for (its name is authoritative, so a staged commit can
  only be ratified at that version and must be re-staged if rebased); a
  committed reply says whether the version is already published or only
  ratified, and so does :class:`CommitPublished`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from raydelta.protocol import errors
from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    action_from_wrapper,
    action_to_wrapper,
)
from raydelta.protocol.predicates import Predicate


class IsolationLevel(enum.StrEnum):
    """delta-spark's isolation levels (the values it writes in ``commitInfo``).

    - ``Serializable``: a commit conflicts with every concurrent append to
      what it read.
    - ``WriteSerializable`` (default): blind appends may be ordered after the
      commit, so they do not conflict with it.
    - ``SnapshotIsolation``: concurrent appends never conflict (used for
      commits that change no data, such as compaction).
    """

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    SNAPSHOT_ISOLATION = "SnapshotIsolation"


DEFAULT_ISOLATION_LEVEL = IsolationLevel.WRITE_SERIALIZABLE


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")


class FileRef(_Event):
    """A logical file a transaction read: ``(path, deletion vector unique id)``.

    ``partition_values`` is optional; when given, conflict messages name the
    partition.
    """

    path: str
    dv_id: str | None = None
    partition_values: dict[str, str | None] | None = None

    @classmethod
    def of(cls, action: AddFile | RemoveFile) -> FileRef:
        return cls(
            path=action.path, dv_id=action.dv_unique_id, partition_values=action.partition_values
        )


class ReadSet(_Event):
    """What a transaction read, at ``read_version``, for conflict detection.

    - ``predicates``: partition predicates by which it selected files;
    - ``files_read``: the files it actually read;
    - ``read_whole_table``: it read every file (any concurrent change conflicts);
    - ``app_ids_read``: ``txn`` app ids whose versions it looked at;
    - ``domains_read``: metadata domains whose configuration it looked at.

    A read set with none of these read nothing (a blind append). Such a
    transaction may leave ``read_version`` None: it is then checked against
    the table as it is when the coordinator commits it (it depends on no
    earlier state, so there is nothing to be concurrent with).
    """

    read_version: int | None = Field(ge=-1)
    predicates: tuple[Predicate, ...] = ()
    files_read: tuple[FileRef, ...] = ()
    read_whole_table: bool = False
    app_ids_read: tuple[str, ...] = ()
    domains_read: tuple[str, ...] = ()
    isolation_level: IsolationLevel = DEFAULT_ISOLATION_LEVEL

    @classmethod
    def blind_append(
        cls, read_version: int, *, isolation_level: IsolationLevel = DEFAULT_ISOLATION_LEVEL
    ) -> ReadSet:
        """The read set of a transaction that read nothing."""
        return cls(read_version=read_version, isolation_level=isolation_level)

    @classmethod
    def whole_table(
        cls, read_version: int, *, isolation_level: IsolationLevel = DEFAULT_ISOLATION_LEVEL
    ) -> ReadSet:
        return cls(
            read_version=read_version, read_whole_table=True, isolation_level=isolation_level
        )

    @model_validator(mode="after")
    def _latest_only_for_blind(self) -> ReadSet:
        if self.read_version is None and not self.read_nothing:
            raise ValueError("a transaction that read something must name its read version")
        return self

    @property
    def read_nothing(self) -> bool:
        return not (
            self.predicates
            or self.files_read
            or self.read_whole_table
            or self.app_ids_read
            or self.domains_read
        )


def actions_in(value: Any) -> Any:
    """Accept action models or log wrappers (``{"add": {...}}``)."""
    if not isinstance(value, (list, tuple)):
        return value
    out: list[Any] = []
    for item in value:
        if isinstance(item, dict):
            action = action_from_wrapper(item)
            if action is None:
                raise ValueError(f"not an action: {item!r}")
            out.append(action)
        else:
            out.append(item)
    return out


class CommitRequest(_Event):
    """A proposed commit.

    ``commit_time_ms`` is the client's clock; the coordinator stamps the
    in-commit timestamp with its own clock (ICT rules) and never trusts this
    value for ordering. ``staged_commit_path`` (catalogManaged) names a file
    ``_delta_log/_staged_commits/<v>.<uuid>.json`` holding the actions;
    ``expected_version`` is the version it was staged for.
    """

    txn_id: str = Field(min_length=1)
    read_set: ReadSet
    actions: tuple[Action, ...] = ()
    operation: str = "WRITE"
    operation_parameters: dict[str, Any] = Field(default_factory=dict)
    engine_info: str | None = None
    commit_time_ms: int
    staged_commit_path: str | None = None
    expected_version: int | None = None

    _normalize_actions = field_validator("actions", mode="before")(actions_in)

    @field_validator("operation_parameters", mode="after")
    @classmethod
    def _json_text_parameters(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        return operation_parameters_as_delta_spark_reads(parameters)

    @field_serializer("actions")
    def _serialize_actions(self, actions: tuple[Action, ...]) -> list[Any]:
        return [action_to_wrapper(a) for a in actions]

    @property
    def is_blind_append(self) -> bool:
        """It read nothing and only adds data (delta-spark's ``isBlindAppend``)."""
        return self.read_set.read_nothing and is_append_only(self.actions)


def operation_parameters_as_delta_spark_reads(parameters: dict[str, Any]) -> dict[str, Any]:
    """``commitInfo.operationParameters`` with list and object values as JSON
    text (``"partitionBy": "[\\"day\\"]"``), as delta-spark writes them.

    delta-spark reads the map as ``Map[String, String]`` for its history
    (``DESCRIBE HISTORY``, ``DeltaTable.history``): scalars coerce to text,
    but a JSON array or object value makes its history fail on the whole
    table. Scalars and text are kept as they are."""
    if all(v is None or isinstance(v, (str, int, float, bool)) for v in parameters.values()):
        return parameters
    return {
        k: v
        if v is None or isinstance(v, (str, int, float, bool))
        else json.dumps(v, separators=(",", ":"))
        for k, v in parameters.items()
    }


def is_append_only(actions: Sequence[Action]) -> bool:
    """Only data-changing ``add``s (plus ``commitInfo``/``txn``/``cdc``): no
    removes, no metadata or protocol change, no rearranging add."""
    for action in actions:
        if isinstance(action, (RemoveFile, Metadata, Protocol)):
            return False
        if isinstance(action, AddFile) and not action.data_change:
            return False
    return True


def _error_class(name: str) -> type[errors.RaydeltaError]:
    candidate = getattr(errors, name, None)
    if isinstance(candidate, type) and issubclass(candidate, errors.RaydeltaError):
        return candidate
    return errors.RaydeltaError


class CommitCommitted(_Event):
    """The commit won ``version``.

    ``attempts`` counts the versions tried; ``rebased_over`` lists the winning
    versions the commit was rebased over (empty when it won at once).
    ``published`` is False for a catalogManaged commit that is ratified but
    not yet copied to ``_delta_log/<v>.json``.
    """

    kind: Literal["committed"] = "committed"
    txn_id: str
    version: int
    in_commit_timestamp: int | None = None
    attempts: int = 1
    rebased_over: tuple[int, ...] = ()
    published: bool = True

    def raise_if_conflict(self) -> CommitCommitted:
        return self


class CommitConflict(_Event):
    """A commit at ``winning_version`` conflicts; ``exception`` names the class.

    The class is one of delta-spark's concurrency exceptions in
    :mod:`raydelta.protocol.errors` (``ConcurrentAppendException``...).
    """

    kind: Literal["conflict"] = "conflict"
    txn_id: str
    exception: str
    message: str
    winning_version: int | None = None

    @classmethod
    def from_exception(
        cls, txn_id: str, exc: errors.DeltaConcurrentModificationException
    ) -> CommitConflict:
        return cls(
            txn_id=txn_id,
            exception=type(exc).__name__,
            message=str(exc),
            winning_version=exc.winning_version,
        )

    def error(self) -> errors.RaydeltaError:
        """The exception this reply stands for."""
        cls = _error_class(self.exception)
        if issubclass(cls, errors.DeltaConcurrentModificationException):
            return cls(self.message, self.winning_version)
        return errors.DeltaConcurrentModificationException(self.message, self.winning_version)

    def raise_if_conflict(self) -> CommitCommitted:
        raise self.error()


class CommitRejected(_Event):
    """The request breaks a writer rule (an :class:`~raydelta.protocol.errors.InvalidCommitError`
    subclass, an unsupported protocol...); nothing was written."""

    kind: Literal["rejected"] = "rejected"
    txn_id: str
    exception: str
    message: str

    @classmethod
    def from_exception(cls, txn_id: str, exc: errors.RaydeltaError) -> CommitRejected:
        return cls(txn_id=txn_id, exception=type(exc).__name__, message=str(exc))

    def error(self) -> errors.RaydeltaError:
        cls = _error_class(self.exception)
        if issubclass(cls, errors.DeltaConcurrentModificationException):
            return cls(self.message, None)
        try:
            return cls(self.message)
        except TypeError:  # a class with a richer constructor
            return errors.InvalidCommitError(self.message)

    def raise_if_conflict(self) -> CommitCommitted:
        raise self.error()


CommitReply = Annotated[
    CommitCommitted | CommitConflict | CommitRejected, Field(discriminator="kind")
]


class CommitPublished(_Event):
    """Told to subscribers (checkpoint, cleanup...) after each commit.

    ``timestamp`` is the commit's timestamp (its in-commit timestamp when ICT
    is on). ``published`` is False while a catalogManaged commit is only
    ratified: maintenance must not checkpoint a version before it is published.
    """

    table_uri: str
    version: int
    timestamp: int
    num_adds: int = 0
    num_removes: int = 0
    operation: str | None = None
    has_metadata_change: bool = False
    has_protocol_change: bool = False
    txn_id: str | None = None
    published: bool = True
    engine_info: str | None = None
    """The commit's ``commitInfo.engineInfo`` (which engine wrote it)."""

    @classmethod
    def from_actions(
        cls,
        table_uri: str,
        version: int,
        timestamp: int,
        actions: Sequence[Action],
        *,
        published: bool = True,
    ) -> CommitPublished:
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        return cls(
            table_uri=table_uri,
            version=version,
            timestamp=timestamp,
            num_adds=sum(isinstance(a, AddFile) for a in actions),
            num_removes=sum(isinstance(a, RemoveFile) for a in actions),
            operation=info.operation if info else None,
            has_metadata_change=any(isinstance(a, Metadata) for a in actions),
            has_protocol_change=any(isinstance(a, Protocol) for a in actions),
            txn_id=info.txn_id if info else None,
            published=published,
            engine_info=_engine_info(info),
        )


def _engine_info(info: CommitInfo | None) -> str | None:
    value = None if info is None else (info.model_extra or {}).get("engineInfo")
    return value if isinstance(value, str) else None
