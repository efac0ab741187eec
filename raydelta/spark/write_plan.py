"""The driver's plan of a batch write of the ``raydelta`` format
(:func:`plan_write`), made before any task runs; :mod:`raydelta.spark.writer`
writes and commits it.

Invariants:
- :func:`plan_write` resolves the save mode against the table (create,
  append, overwrite, ignore, error), checks the DataFrame's schema against
  the table's with the one data writer's rules (writing no row), evolves
  the schema for ``mergeSchema`` / ``overwriteSchema``, and fixes the
  version the write read. Every refusal is a typed
  :class:`~raydelta.protocol.errors.RaydeltaError` raised there, before a
  file exists.
- A :class:`WritePlan` travels to the tasks and the commit as JSON.
- ``txnAppId``/``txnVersion``: a version the table already holds for the
  app id is skipped here (and again at commit time).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from raydelta.protocol.actions import Metadata, Protocol
from raydelta.protocol.errors import (
    InvalidArgumentError,
    RaydeltaError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.schema import StructType, parse_schema
from raydelta.spark import options as opt

SAVE_MODES = {
    "append": "Append",
    "overwrite": "Overwrite",
    "error": "ErrorIfExists",
    "errorifexists": "ErrorIfExists",
    "default": "ErrorIfExists",
    "ignore": "Ignore",
}


def save_mode_name(mode: str | None) -> str:
    """Spark's spelling of a save mode (``None`` is Spark's default, ErrorIfExists)."""
    if mode is None:
        return "ErrorIfExists"
    name = SAVE_MODES.get(mode.strip().lower())
    if name is None:
        raise InvalidArgumentError(
            f"unknown save mode {mode!r}; use append, overwrite, errorifexists or ignore"
        )
    return name


@dataclass(frozen=True)
class WritePlan:
    """What the driver decided; travels to tasks and the commit as JSON."""

    uri: str
    save_mode: str
    """Spark's name of the user's save mode (Append, Overwrite, ErrorIfExists, Ignore)."""
    overwrite: bool
    create: bool
    read_version: int
    protocol_json: str
    metadata_json: str
    protocol_changed: bool
    metadata_changed: bool
    replace_where: str | None = None
    dynamic_partitions: bool = False
    user_metadata: str | None = None
    txn_app_id: str | None = None
    txn_version: int | None = None
    ray_address: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WritePlan:
        return cls(**json.loads(text))

    @property
    def protocol(self) -> Protocol:
        return Protocol.model_validate(json.loads(self.protocol_json))

    @property
    def metadata(self) -> Metadata:
        return Metadata.model_validate(json.loads(self.metadata_json))


def _nullable(node: Any) -> Any:
    """A Spark schema JSON with every field nullable (delta-spark creates
    tables from a DataFrame's ``schema.asNullable``)."""
    if isinstance(node, dict):
        out = {k: _nullable(v) for k, v in node.items()}
        if "nullable" in out:
            out["nullable"] = True
        if "containsNull" in out:
            out["containsNull"] = True
        if "valueContainsNull" in out:
            out["valueContainsNull"] = True
        return out
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    return node


def plan_write(
    uri: str,
    *,
    spark_schema_json: str,
    arrow_schema: pa.Schema,
    save_mode: str,
    partition_by: Sequence[str] | None,
    options: Mapping[str, Any],
    ray_address: str | None,
    default_user_metadata: str | None = None,
    dynamic_default: bool = False,
) -> WritePlan | None:
    """The plan of one write, or None when there is nothing to do (``Ignore``
    on an existing table; a ``txnVersion`` the table already holds)."""
    from raydelta.storage.snapshot import load_snapshot

    chosen = _WriteOptions.of(options, save_mode, dynamic_default=dynamic_default)
    try:
        snapshot = load_snapshot(uri)
    except TableNotFoundError:
        snapshot = None
    common: dict[str, Any] = {
        "uri": uri,
        "save_mode": save_mode,
        "replace_where": chosen.replace_where,
        "dynamic_partitions": chosen.dynamic,
        "user_metadata": chosen.user_metadata or default_user_metadata,
        "txn_app_id": chosen.app_id,
        "txn_version": chosen.app_version,
        "ray_address": ray_address,
    }
    if snapshot is None:
        return _plan_create(spark_schema_json, partition_by, options, chosen.overwrite, common)
    return _plan_existing(snapshot, arrow_schema, partition_by, chosen, common)


@dataclass(frozen=True)
class _WriteOptions:
    """The write options :func:`plan_write` acts on, checked together."""

    overwrite: bool
    replace_where: str | None
    dynamic: bool
    merge: bool
    overwrite_schema: bool
    user_metadata: str | None
    app_id: str | None
    app_version: int | None

    @classmethod
    def of(
        cls, options: Mapping[str, Any], save_mode: str, *, dynamic_default: bool
    ) -> _WriteOptions:
        app_id = opt.option(options, "txnAppId")
        app_version = opt.integer(options, "txnVersion")
        if (app_id is None) != (app_version is None):
            raise InvalidArgumentError("txnAppId and txnVersion go together: set both or neither")
        replace_where = opt.option(options, "replaceWhere")
        overwrite = save_mode == "Overwrite"
        mode_option = (opt.option(options, "partitionOverwriteMode") or "").strip().lower()
        dynamic = overwrite and (mode_option == "dynamic" or (not mode_option and dynamic_default))
        if replace_where is not None and not overwrite:
            replace_where = None  # delta-spark ignores replaceWhere outside overwrite
        if dynamic and replace_where is not None:
            raise InvalidArgumentError(
                "replaceWhere and partitionOverwriteMode=dynamic cannot be used together"
            )
        merge = opt.flag(options, "mergeSchema")
        overwrite_schema = opt.flag(options, "overwriteSchema") and overwrite
        if overwrite_schema and (replace_where is not None or dynamic):
            raise InvalidArgumentError(
                "overwriteSchema cannot be used with replaceWhere or dynamic partition overwrite"
            )
        return cls(
            overwrite=overwrite,
            replace_where=replace_where,
            dynamic=dynamic,
            merge=merge,
            overwrite_schema=overwrite_schema,
            user_metadata=opt.option(options, "userMetadata"),
            app_id=app_id,
            app_version=app_version,
        )


def _plan_existing(
    snapshot: Any,
    arrow_schema: pa.Schema,
    partition_by: Sequence[str] | None,
    chosen: _WriteOptions,
    common: dict[str, Any],
) -> WritePlan | None:
    """The plan of a write to the existing table ``snapshot`` (None: nothing to do)."""
    from raydelta.storage.data.writer import write_data

    uri, save_mode = common["uri"], common["save_mode"]
    overwrite, overwrite_schema = chosen.overwrite, chosen.overwrite_schema
    app_id, app_version, replace_where = chosen.app_id, chosen.app_version, chosen.replace_where
    if save_mode == "ErrorIfExists":
        raise TableAlreadyExistsError(
            f"[DELTA_PATH_EXISTS] cannot write to the existing table {uri} with save mode "
            "ErrorIfExists; use mode append or overwrite"
        )
    if save_mode == "Ignore":
        return None
    if app_id is not None and app_version is not None:
        held = snapshot.txns.get(app_id)
        if held is not None and held >= app_version:
            return None
    metadata = snapshot.metadata
    current_partitions = list(metadata.partition_columns)
    if partition_by is not None and list(partition_by) != current_partitions:
        if not overwrite_schema:
            raise InvalidArgumentError(
                f"partitionBy {list(partition_by)} does not match the table's partition "
                f"columns {current_partitions}; overwrite with overwriteSchema=true to change them"
            )
        metadata = metadata.model_copy(update={"partition_columns": list(partition_by)})
    schema_mode = "overwrite" if overwrite_schema else ("merge" if chosen.merge else None)
    from raydelta.storage.data.writer import check_writable

    check_writable(snapshot.protocol, metadata)
    _refuse_identity(metadata)
    if not overwrite_schema:  # overwriteSchema: the DataFrame's schema is the table's
        arrow_schema = with_missing_nullable(arrow_schema, metadata.schema_string or "")
    # The one data writer checks the DataFrame's schema on zero rows: the
    # same refusal a task would raise, here, before any file exists.
    evolved = write_data(
        uri,
        arrow_schema.empty_table(),
        protocol=snapshot.protocol,
        metadata=metadata,
        schema_mode=schema_mode,  # type: ignore[arg-type]
    )
    new_metadata = evolved.metadata or metadata
    new_protocol = evolved.protocol or snapshot.protocol
    if replace_where is not None:
        _check_where(replace_where, parse_schema(new_metadata.schema_string or ""))
    return WritePlan(
        overwrite=overwrite,
        create=False,
        read_version=snapshot.version,
        protocol_json=json.dumps(new_protocol.to_json_dict()),
        metadata_json=json.dumps(new_metadata.to_json_dict()),
        protocol_changed=evolved.protocol is not None,
        metadata_changed=new_metadata is not snapshot.metadata,
        **common,
    )


def _plan_create(
    spark_schema_json: str,
    partition_by: Sequence[str] | None,
    options: Mapping[str, Any],
    overwrite: bool,
    common: dict[str, Any],
) -> WritePlan:
    from raydelta.actors.table.client import new_table_actions

    schema = parse_schema(json.dumps(_nullable(json.loads(spark_schema_json))))
    names = [f.name for f in schema.fields]
    for column in partition_by or ():
        if column not in names:
            raise SchemaMismatchError(
                f"partition column {column!r} is not a column of the DataFrame ({names})", column
            )
    if partition_by and len(partition_by) == len(names):
        raise InvalidArgumentError("cannot partition a table by all of its columns")
    protocol, metadata = new_table_actions(
        schema,
        partition_by=list(partition_by or ()),
        properties=opt.table_properties(options),
    )
    return WritePlan(
        overwrite=overwrite,
        create=True,
        read_version=-1,
        protocol_json=json.dumps(protocol.to_json_dict()),
        metadata_json=json.dumps(metadata.to_json_dict()),
        protocol_changed=True,
        metadata_changed=True,
        **{**common, "replace_where": None, "dynamic_partitions": False},
    )


COMPUTED_FIELD_KEYS = ("delta.generationExpression", "delta.identity.", "CURRENT_DEFAULT")


def missing_nullable_fields(schema_string: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """Top-level table fields (schema JSON) the data lacks that a write fills
    with NULLs, as delta-spark does: nullable and not computed by the writer."""
    have = {n.lower() for n in names}
    missing = []
    for field in json.loads(schema_string or '{"fields":[]}').get("fields", []):
        metadata = field.get("metadata") or {}
        computed = any(k.startswith(COMPUTED_FIELD_KEYS) for k in metadata)
        if field["name"].lower() in have or computed or not field.get("nullable", True):
            continue
        missing.append({**field, "metadata": {}})
    return missing


def with_missing_nullable(arrow_schema: pa.Schema, schema_string: str) -> pa.Schema:
    from raydelta.protocol.schema_arrow import to_arrow

    missing = missing_nullable_fields(schema_string, arrow_schema.names)
    if not missing:
        return arrow_schema
    extra = to_arrow(parse_schema(json.dumps({"type": "struct", "fields": missing})))
    return pa.schema([*arrow_schema, *extra])


def _refuse_identity(metadata: Metadata) -> None:
    schema = parse_schema(metadata.schema_string or '{"type":"struct","fields":[]}')
    identity = [
        f.name for f in schema.fields if any(k.startswith("delta.identity.") for k in f.metadata)
    ]
    if identity:
        # Tasks write in parallel from one high-water mark: their values
        # would collide. Refuse rather than write duplicates.
        raise UnsupportedTableFeatureException(
            f"the raydelta Spark format cannot write identity columns {identity}; "
            "use raydelta.Table.append"
        )


def _check_where(where: str, schema: StructType) -> None:
    """``replaceWhere`` must parse and name only table columns."""
    from raydelta.protocol.expressions import parse_expression

    parse_expression(where)
    from raydelta.storage.scan import to_arrow_expression

    try:
        predicate = where_predicate(where)
    except RaydeltaError:
        return
    if predicate is not None:
        to_arrow_expression(predicate, schema)  # unknown columns raise here


def where_predicate(where: str) -> Any:
    from raydelta.protocol.errors import InvalidPredicateError
    from raydelta.protocol.predicates import parse_predicate

    try:
        return parse_predicate(where)
    except InvalidPredicateError:
        return None
