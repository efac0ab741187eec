"""Unity Catalog's REST model: the typed replies of the catalog's Unity Catalog
services (:mod:`raydelta.actors.catalog.unity`), in the shapes and with the
field names of Unity Catalog's OpenAPI document (``api/all.yaml``:
``CatalogInfo``, ``SchemaInfo``, ``TableInfo``, ``ColumnInfo``,
``StagingTableInfo``, ``ExternalLocationInfo``, ``TemporaryCredentials``,
``DeltaCommitInfo``, ``DeltaGetCommitsResponse``, ``PermissionsList``,
``PrivilegeAssignment``, ``PermissionsChange``, ...).

Each model holds only the fields this catalog answers with, so
``model_dump(mode="json")`` is the JSON the REST server sends; where Unity
Catalog leaves a field out instead of sending ``null``, the model says so
itself:

- :class:`TableInfo` leaves out every field that is None (its columns are
  always there);
- :class:`ColumnInfo` holds exactly the keys it was given (a column derived
  from a Delta schema has no ``null`` keys; one a client sent keeps what
  it sent, unknown keys included);
- :class:`CatalogInfo`, :class:`SchemaInfo`, the list responses and
  :class:`GetCommitsResponse` send ``null`` as ``null``;
- :class:`ExternalLocationInfo` and :class:`TemporaryCredentials` are
  dumped with ``exclude_none=True`` on the wire (they hold no nested model
  with nulls of its own) and as they are by the Python API.

Locations are spelled as the catalog stores them (local paths ``file:/p``
or ``file:///p``); the REST server spells local ones ``file:///p`` for
Spark and Hadoop (:func:`raydelta.protocol.locations.file_url`).

All models are frozen values: they cross process boundaries (Ray pickles
them) and may be shared.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class _Reply(BaseModel):
    model_config = ConfigDict(frozen=True)


class GetMetastoreSummaryResponse(_Reply):
    metastore_id: str


class CatalogInfo(_Reply):
    """A catalog (stored as this model's dump in the namespace registry)."""

    name: str
    comment: str | None = None
    properties: dict[str, str] = {}
    owner: str | None = None
    created_at: int | None = None
    created_by: str | None = None
    updated_at: int | None = None
    id: str | None = None


class SchemaInfo(_Reply):
    """A schema of a catalog (``full_name`` is ``catalog.schema``)."""

    name: str
    comment: str | None = None
    properties: dict[str, str] = {}
    owner: str | None = None
    created_at: int | None = None
    created_by: str | None = None
    updated_at: int | None = None
    catalog_name: str
    full_name: str
    schema_id: str | None = None


class ListCatalogsResponse(_Reply):
    catalogs: tuple[CatalogInfo, ...]
    next_page_token: str | None


class ListSchemasResponse(_Reply):
    schemas: tuple[SchemaInfo, ...]
    next_page_token: str | None


class ColumnInfo(BaseModel):
    """One top-level column: exactly the keys it was given (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    # in the order :func:`raydelta.protocol.unity_columns.columns_from_schema` gives them
    name: str | None = None
    type_text: str | None = None
    type_json: str | None = None
    type_name: str | None = None
    position: int | None = None
    nullable: bool | None = None
    type_precision: int | None = None
    type_scale: int | None = None
    type_interval_type: str | None = None
    comment: str | None = None
    partition_index: int | None = None

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {key: value for key, value in dumped.items() if key in given}


class TableInfo(_Reply):
    """A table as Unity Catalog describes it; None fields are left out."""

    name: str
    catalog_name: str
    schema_name: str
    table_type: str
    data_source_format: str
    columns: tuple[ColumnInfo, ...] = ()
    storage_location: str | None = None
    comment: str | None = None
    properties: dict[str, str] = {}
    owner: str | None = None
    created_at: int | None = None
    created_by: str | None = None
    updated_at: int | None = None
    updated_by: str | None = None
    table_id: str | None = None

    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        return {key: value for key, value in dumped.items() if value is not None}


class ListTablesResponse(_Reply):
    tables: tuple[TableInfo, ...]
    next_page_token: str | None


class StagingTableInfo(_Reply):
    """The id and location handed out for a managed table about to be created."""

    id: str
    name: str
    catalog_name: str
    schema_name: str
    staging_location: str


class ExternalLocationInfo(_Reply):
    """An external location (stored as this model's dump). ``id`` and
    ``external_location_id`` are the same id under both names Unity Catalog
    has used (its 0.4 SDK reads ``id``)."""

    name: str
    url: str
    credential_name: str | None = None
    comment: str | None = None
    read_only: bool = False
    owner: str | None = None
    created_at: int | None = None
    created_by: str | None = None
    updated_at: int | None = None
    updated_by: str | None = None
    id: str | None = None
    external_location_id: str | None = None


class AwsCredentials(_Reply):
    access_key_id: str
    secret_access_key: str
    session_token: str


class TemporaryCredentials(_Reply):
    """Credentials for one location: a cloud credential only for S3."""

    url: str
    expiration_time: int
    aws_temp_credentials: AwsCredentials | None = None


class DeltaCommitInfo(_Reply):
    """One unbackfilled commit: its staged file's name, size and modification time
    (size -1 and time 0 when the file is gone), and its in-commit timestamp."""

    version: int
    timestamp: int | None
    file_name: str
    file_size: int
    file_modification_timestamp: int


class GetCommitsResponse(_Reply):
    """``DeltaGetCommitsResponse``: the unbackfilled commits in a range, oldest first."""

    commits: tuple[DeltaCommitInfo, ...]
    latest_table_version: int


class LoadedTable(_Reply):
    """What the Delta REST API's ``loadTable`` (and ``updateTable``) answer is
    made of: the table's description, its Delta schema and partition columns
    (None and empty when its log cannot be read), its etag, its unbackfilled
    commits newest first and its latest version (None for an external table),
    and the last version that changed its metadata with its timestamp (None
    when unknown or for an external table)."""

    table: TableInfo
    schema_string: str | None
    partition_columns: tuple[str, ...]
    etag: str
    commits: tuple[DeltaCommitInfo, ...]
    latest_table_version: int | None
    last_commit_version: int | None = None
    """The last version that changed the table's metadata (None: unknown)."""
    last_commit_timestamp_ms: int | None = None
    """That version's in-commit timestamp."""


class PrivilegeAssignment(_Reply):
    """``PrivilegeAssignment``: one principal's privileges on a securable."""

    principal: str
    privileges: tuple[str, ...]


class PermissionsList(_Reply):
    """``PermissionsList``: what the permissions API answers."""

    privilege_assignments: tuple[PrivilegeAssignment, ...]


class PermissionsChange(_Reply):
    """``PermissionsChange``: privileges to add to and remove from one principal
    (both lists default to empty: a client may leave one out)."""

    principal: str
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


__all__ = [
    "AwsCredentials",
    "CatalogInfo",
    "ColumnInfo",
    "DeltaCommitInfo",
    "ExternalLocationInfo",
    "GetCommitsResponse",
    "GetMetastoreSummaryResponse",
    "ListCatalogsResponse",
    "ListSchemasResponse",
    "ListTablesResponse",
    "LoadedTable",
    "PermissionsChange",
    "PermissionsList",
    "PrivilegeAssignment",
    "SchemaInfo",
    "StagingTableInfo",
    "TableInfo",
    "TemporaryCredentials",
]
