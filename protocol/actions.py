"""Models of every Delta log action, and the parse/serialize of log lines.

A log line is a JSON object keyed by the action name (``{"add": {...}}``).
The wrapper key is the discriminator; the body is a frozen pydantic model
with camelCase aliases.

Invariants:
- Parsing is lenient, serialization is faithful: unknown fields inside a
  known action are kept (``extra="allow"``) and written back; a line whose
  action name is unknown becomes :class:`UnknownAction` and is written back
  byte-for-byte equal as JSON. Nothing the spec says to ignore is dropped.
- A line may carry one known action next to keys this reader does not know
  (later protocol versions grow the log this way; delta-spark's
  schema-evolvability tests write such lines): the known action is read and
  every unknown sibling becomes its own :class:`UnknownAction`
  (:func:`actions_from_wrapper`). Unknown keys never fail a read; only a
  line naming two *known* actions is refused, since which one it means is
  ambiguous (delta-spark keeps one, delta-kernel-rs both).
- ``serialize_action(parse_action(line))`` equals ``line`` as JSON values
  (key order may differ; absent optional fields stay absent).
- Models are immutable; "changing" one means ``model_copy(update=...)``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor
from raydelta.protocol.errors import CorruptLogError
from raydelta.protocol.json_numbers import Int, Long
from raydelta.protocol.statistics import num_records_of


class ActionModel(BaseModel):
    """Base of all action bodies: frozen, camelCase aliases, extras kept."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")

    action_name: ClassVar[str] = ""

    def to_json_dict(self) -> dict[str, Any]:
        """The body as it appears in the log (aliases, no absent optionals)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Format(ActionModel):
    provider: str = "parquet"
    options: dict[str, str] = Field(default_factory=dict)


class Metadata(ActionModel):
    action_name: ClassVar[str] = "metaData"

    id: str
    name: str | None = None
    description: str | None = None
    format: Format = Field(default_factory=Format)
    # Required by the spec, yet absent in some delta-spark test logs; kept
    # optional here; TableConfiguration reads a missing one as an empty schema,
    # as delta-spark does.
    schema_string: str | None = Field(default=None, alias="schemaString")
    partition_columns: list[str] = Field(default_factory=list, alias="partitionColumns")
    created_time: Long | None = Field(default=None, alias="createdTime")
    configuration: dict[str, str] = Field(default_factory=dict)


class Protocol(ActionModel):
    action_name: ClassVar[str] = "protocol"

    min_reader_version: Int = Field(alias="minReaderVersion")
    min_writer_version: Int = Field(alias="minWriterVersion")
    reader_features: list[str] | None = Field(default=None, alias="readerFeatures")
    writer_features: list[str] | None = Field(default=None, alias="writerFeatures")


class AddFile(ActionModel):
    action_name: ClassVar[str] = "add"

    path: str
    partition_values: dict[str, str | None] = Field(default_factory=dict, alias="partitionValues")
    size: Long
    modification_time: Long = Field(alias="modificationTime")
    data_change: bool = Field(default=True, alias="dataChange")
    stats: str | None = None
    tags: dict[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = Field(default=None, alias="deletionVector")
    base_row_id: Long | None = Field(default=None, alias="baseRowId")
    default_row_commit_version: Long | None = Field(default=None, alias="defaultRowCommitVersion")
    clustering_provider: str | None = Field(default=None, alias="clusteringProvider")

    @property
    def dv_unique_id(self) -> str | None:
        return None if self.deletion_vector is None else self.deletion_vector.unique_id

    @property
    def num_records(self) -> int | None:
        """``numRecords`` from the JSON stats, or None when absent
        (:func:`~raydelta.protocol.statistics.num_records_of`)."""
        return num_records_of(self.stats)

    def to_remove(
        self, *, deletion_timestamp: int, data_change: bool = True, keep_stats_and_tags: bool = True
    ) -> RemoveFile:
        """The ``remove`` that retires this file, as delta-spark's
        ``AddFile.removeWithTimestamp`` builds it: ``extendedFileMetadata``
        with the add's partition values, size, deletion vector and
        row-tracking fields, and its ``stats`` and ``tags`` unless
        ``keep_stats_and_tags`` is false (then they stay absent)."""
        kept: dict[str, Any] = (
            {"stats": self.stats, "tags": self.tags} if keep_stats_and_tags else {}
        )
        return RemoveFile(
            path=self.path,
            deletionTimestamp=deletion_timestamp,
            dataChange=data_change,
            extendedFileMetadata=True,
            partitionValues=self.partition_values,
            size=self.size,
            **kept,
            deletionVector=self.deletion_vector,
            baseRowId=self.base_row_id,
            defaultRowCommitVersion=self.default_row_commit_version,
        )


class RemoveFile(ActionModel):
    action_name: ClassVar[str] = "remove"

    path: str
    deletion_timestamp: Long | None = Field(default=None, alias="deletionTimestamp")
    data_change: bool = Field(default=True, alias="dataChange")
    extended_file_metadata: bool | None = Field(default=None, alias="extendedFileMetadata")
    partition_values: dict[str, str | None] | None = Field(default=None, alias="partitionValues")
    size: Long | None = None
    stats: str | None = None
    tags: dict[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = Field(default=None, alias="deletionVector")
    base_row_id: Long | None = Field(default=None, alias="baseRowId")
    default_row_commit_version: Long | None = Field(default=None, alias="defaultRowCommitVersion")

    @property
    def dv_unique_id(self) -> str | None:
        return None if self.deletion_vector is None else self.deletion_vector.unique_id


class AddCDCFile(ActionModel):
    action_name: ClassVar[str] = "cdc"

    path: str
    partition_values: dict[str, str | None] = Field(default_factory=dict, alias="partitionValues")
    size: Long
    data_change: bool = Field(default=False, alias="dataChange")
    tags: dict[str, str | None] | None = None


class Txn(ActionModel):
    action_name: ClassVar[str] = "txn"

    app_id: str = Field(alias="appId")
    version: Long
    last_updated: Long | None = Field(default=None, alias="lastUpdated")


class CommitInfo(ActionModel):
    """Free-form provenance; the named fields are the ones raydelta reads."""

    action_name: ClassVar[str] = "commitInfo"

    timestamp: Long | None = None
    in_commit_timestamp: Long | None = Field(default=None, alias="inCommitTimestamp")
    operation: str | None = None
    operation_parameters: dict[str, Any] | None = Field(default=None, alias="operationParameters")
    txn_id: str | None = Field(default=None, alias="txnId")
    read_version: int | None = Field(default=None, alias="readVersion")
    isolation_level: str | None = Field(default=None, alias="isolationLevel")
    is_blind_append: bool | None = Field(default=None, alias="isBlindAppend")


class DomainMetadata(ActionModel):
    action_name: ClassVar[str] = "domainMetadata"

    domain: str
    configuration: str
    removed: bool = False


class Sidecar(ActionModel):
    action_name: ClassVar[str] = "sidecar"

    path: str
    size_in_bytes: Long = Field(alias="sizeInBytes")
    modification_time: Long = Field(alias="modificationTime")
    tags: dict[str, str | None] | None = None


class CheckpointMetadata(ActionModel):
    action_name: ClassVar[str] = "checkpointMetadata"

    version: Long
    tags: dict[str, str | None] | None = None


class UnknownAction(BaseModel):
    """An action this version of the protocol does not name; kept verbatim."""

    model_config = ConfigDict(frozen=True)

    name: str
    body: Any

    def to_json_dict(self) -> Any:
        return self.body


Action = (
    AddFile
    | RemoveFile
    | Metadata
    | Protocol
    | Txn
    | CommitInfo
    | DomainMetadata
    | AddCDCFile
    | Sidecar
    | CheckpointMetadata
    | UnknownAction
)

ACTION_TYPES: dict[str, type[ActionModel]] = {
    cls.action_name: cls
    for cls in (
        AddFile,
        RemoveFile,
        Metadata,
        Protocol,
        Txn,
        CommitInfo,
        DomainMetadata,
        AddCDCFile,
        Sidecar,
        CheckpointMetadata,
    )
}

ActionName = Literal[
    "add",
    "remove",
    "metaData",
    "protocol",
    "txn",
    "commitInfo",
    "domainMetadata",
    "cdc",
    "sidecar",
    "checkpointMetadata",
]


def _model_of(name: str, body: Any) -> Action:
    model = ACTION_TYPES.get(name)
    if model is None:
        return UnknownAction(name=name, body=body)
    if not isinstance(body, dict):
        raise CorruptLogError(f"the body of a {name!r} action must be an object")
    try:
        return model.model_validate(body)  # type: ignore[return-value]
    except ValueError as exc:
        raise CorruptLogError(f"invalid {name!r} action: {exc}") from exc


def actions_from_wrapper(wrapper: dict[str, Any]) -> list[Action]:
    """Every action of one parsed log line, the known one first.

    Keys whose value is null are no action (``{}`` and ``{"txn": null}`` give
    ``[]``). At most one known action name may be present; unknown names
    next to it are kept as :class:`UnknownAction` (module docstring).
    """
    live = [(name, body) for name, body in wrapper.items() if body is not None]
    known = [name for name, _ in live if name in ACTION_TYPES]
    if len(known) > 1:
        raise CorruptLogError(f"a log line must hold one action, found {sorted(known)}")
    live.sort(key=lambda item: item[0] not in ACTION_TYPES)
    return [_model_of(name, body) for name, body in live]


def action_from_wrapper(wrapper: dict[str, Any]) -> Action | None:
    """Turn one parsed log line (``{"add": {...}}``) into a model.

    Returns None for a line with no action (``{}``) or whose body is null,
    which some writers produce and readers must ignore. A known action next
    to unknown keys is returned alone (the unknown siblings are ignored, as
    readers must; :func:`actions_from_wrapper` keeps them).
    """
    actions = actions_from_wrapper(wrapper)
    return actions[0] if actions else None


def _parse_line(line: str | bytes) -> list[Action]:
    try:
        wrapper = json.loads(line)
    except ValueError as exc:
        raise CorruptLogError(f"a log line is not JSON: {exc}") from exc
    if not isinstance(wrapper, dict):
        raise CorruptLogError("a log line must be a JSON object")
    return actions_from_wrapper(wrapper)


def parse_action(line: str | bytes) -> Action | None:
    """Parse one NDJSON log line into its (known) action; see :func:`action_from_wrapper`."""
    actions = _parse_line(line)
    return actions[0] if actions else None


def parse_actions(data: bytes | str) -> list[Action]:
    """Parse a whole commit (or JSON checkpoint / compaction) file."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise CorruptLogError(f"a log file is not UTF-8: {exc}") from exc
    actions: list[Action] = []
    # NDJSON lines end at "\n" only: str.splitlines() would also cut at
    # U+2028, U+0085 and friends, which JSON strings may hold unescaped.
    for line in text.split("\n"):
        if line.strip():
            actions.extend(_parse_line(line))
    return actions


def action_name(action: Action) -> str:
    return action.name if isinstance(action, UnknownAction) else action.action_name


def action_to_wrapper(action: Action) -> dict[str, Any]:
    return {action_name(action): action.to_json_dict()}


def serialize_action(action: Action) -> str:
    """One log line, compact JSON, no trailing newline."""
    return json.dumps(action_to_wrapper(action), separators=(",", ":"), ensure_ascii=False)


def serialize_actions(actions: list[Action]) -> bytes:
    """A commit file body: one action per line, newline-terminated."""
    return "".join(serialize_action(a) + "\n" for a in actions).encode("utf-8")
