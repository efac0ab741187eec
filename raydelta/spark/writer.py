"""Batch writes of the ``raydelta`` format: plan on the driver, write in
tasks, commit once through the table's ``TableActor``.

Invariants:
- :func:`~raydelta.spark.write_plan.plan_write` runs on the driver before
  any task (:mod:`raydelta.spark.write_plan`): every refusal is raised
  there, before a file exists.
- Tasks write their rows through :func:`raydelta.storage.data.writer.write_data`
  with the planned protocol and metadata (NOT NULL, CHECK, generated and
  default columns, column mapping, full statistics) and return ``add``
  actions; under ``replaceWhere`` a row outside the predicate fails its task.
- :func:`commit_write` sends all adds (plus removes, metadata, protocol,
  ``txn``, ``userMetadata``) as ONE commit that reads the planned version;
  a table the write creates is created by that same commit (version 0 holds
  the data). A failed job commits nothing: its files stay unreferenced.
- ``txnAppId``/``txnVersion``: a version the table already holds for the
  app id is skipped on the driver, and again at commit time (the actor
  checks the app id read against concurrent commits).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from raydelta.protocol.actions import Action, AddFile, Txn
from raydelta.protocol.errors import DeltaInvariantViolationException, RaydeltaError
from raydelta.protocol.schema import physical_name
from raydelta.spark import options as opt
from raydelta.spark.write_plan import WritePlan, where_predicate

# --- tasks ----------------------------------------------------------------------------------


@dataclass
class WrittenFiles(WriterCommitMessage):
    adds: list[str]
    """``add`` actions as JSON bodies."""


def write_task(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> WrittenFiles:
    """Write one task's rows through the one data writer."""
    from raydelta.storage.data.writer import write_data

    first = next(batches, None)
    if first is None:
        return WrittenFiles(adds=[])
    check = _row_check(plan.replace_where)

    def checked() -> Iterator[pa.RecordBatch]:
        yield check(first)
        for batch in batches:
            yield check(batch)

    reader = pa.RecordBatchReader.from_batches(first.schema, checked())
    result = write_data(uri := plan.uri, reader, protocol=plan.protocol, metadata=plan.metadata)
    if result.metadata is not None or result.protocol is not None:
        raise RaydeltaError(f"a Spark task's write to {uri} would change the table's metadata")
    return WrittenFiles(adds=[json.dumps(add.to_json_dict()) for add in result.adds])


def _row_check(where: str | None) -> Any:
    """Under ``replaceWhere`` every row written must satisfy the predicate
    (delta-spark's DELTA_REPLACE_WHERE_MISMATCH)."""
    if where is None:
        return lambda batch: batch
    import pyarrow.compute as pc

    from raydelta.protocol.expressions import evaluate, parse_expression

    parsed = parse_expression(where)

    def check(batch: pa.RecordBatch) -> pa.RecordBatch:
        table = pa.Table.from_batches([batch])
        verdict = pc.fill_null(evaluate(parsed, table), False)
        if not pc.all(verdict).as_py():
            bad = table.filter(pc.invert(verdict)).slice(0, 1).to_pylist()[0]
            raise DeltaInvariantViolationException(
                f"[DELTA_REPLACE_WHERE_MISMATCH] written data does not conform to "
                f"replaceWhere {where!r}: row {bad}",
                constraint="replaceWhere",
                expression=where,
            )
        return batch

    return check


def adds_from(messages: Sequence[WriterCommitMessage | None]) -> list[AddFile]:
    return [
        AddFile.model_validate(json.loads(body))
        for message in messages
        if isinstance(message, WrittenFiles)
        for body in message.adds
    ]


# --- the commit -----------------------------------------------------------------------------


def commit_write(
    plan: WritePlan,
    adds: Sequence[AddFile],
    *,
    operation: str = "WRITE",
    extra_parameters: Mapping[str, Any] | None = None,
) -> int | None:
    """Commit the job's files as one version; None when ``txn`` says the
    version was already written (idempotent replay)."""
    from raydelta.actors.table.client import TableClient
    from raydelta.protocol.actions import CommitInfo
    from raydelta.protocol.events import CommitRequest, ReadSet

    opt.connect_ray(plan.ray_address)
    table = TableClient.open(plan.uri)
    metadata = plan.metadata
    parameters: dict[str, Any] = {
        "mode": plan.save_mode,
        "partitionBy": json.dumps(list(metadata.partition_columns)),
        **dict(extra_parameters or {}),
    }
    if plan.replace_where is not None:
        parameters["predicate"] = json.dumps([plan.replace_where])
    txn_action = (
        [Txn(appId=plan.txn_app_id, version=plan.txn_version, lastUpdated=int(time.time() * 1000))]
        if plan.txn_app_id is not None and plan.txn_version is not None
        else []
    )
    if plan.create:
        actions: list[Action] = [plan.protocol, metadata, *adds, *txn_action]
        if plan.user_metadata is not None:
            actions.append(CommitInfo.model_validate({"userMetadata": plan.user_metadata}))
        request = CommitRequest(
            txn_id=str(uuid.uuid4()),
            read_set=ReadSet(read_version=-1),
            actions=tuple(actions),
            operation=operation,
            operation_parameters=parameters,
            commit_time_ms=int(time.time() * 1000),
        )
        return TableClient._check(table._call("create", request))
    return _commit_existing(table, plan, adds, txn_action, operation, parameters)


def _commit_existing(
    table: Any,
    plan: WritePlan,
    adds: Sequence[AddFile],
    txn_action: list[Txn],
    operation: str,
    parameters: dict[str, Any],
) -> int | None:
    from raydelta.actors.table.transaction import Transaction
    from raydelta.protocol.events import IsolationLevel
    from raydelta.storage.snapshot import load_snapshot, load_table_head

    replaces = plan.overwrite
    snapshot = None
    if replaces:
        latest = table.snapshot()
        snapshot = (
            latest
            if latest.version == plan.read_version
            else load_snapshot(plan.uri, version=plan.read_version)
        )
        head = snapshot.state.head()
    else:
        head = load_table_head(plan.uri, version=plan.read_version)
    txn = Transaction(table, head, isolation_level=IsolationLevel.WRITE_SERIALIZABLE)
    if plan.txn_app_id is not None and plan.txn_version is not None:
        held = txn.app_version(plan.txn_app_id)
        if held is not None and held >= plan.txn_version:
            return None
        txn.set_app_version(plan.txn_app_id, plan.txn_version)
    if snapshot is not None:
        removed, rewritten = _replaced(plan, snapshot, adds, txn)
        for doomed in removed:
            txn.remove(doomed)
        txn.add(*rewritten)
    if plan.protocol_changed:
        protocol = plan.protocol
        txn.upgrade_protocol(
            reader_features=protocol.reader_features or (),
            writer_features=protocol.writer_features or (),
        )
    if plan.metadata_changed:
        txn.replace_metadata(plan.metadata)
    txn.add(*adds)
    if plan.user_metadata is not None:
        txn.set_user_metadata(plan.user_metadata)
    return txn.commit(operation=operation, operation_parameters=parameters)


def _replaced(
    plan: WritePlan, snapshot: Any, adds: Sequence[AddFile], txn: Any
) -> tuple[list[AddFile], list[AddFile]]:
    """The files an overwrite removes and, for a data-column ``replaceWhere``,
    the files holding the rest of their rows; records what it read."""
    from raydelta.protocol.file_actions import row_to_add
    from raydelta.protocol.predicates import from_partition_values, references
    from raydelta.storage.scan import prune_files

    config = snapshot.table_configuration
    partition_by = list(config.partition_columns)
    logical_of = {
        physical_name(f, config.column_mapping_mode): f.name for f in config.schema.fields
    }
    if plan.dynamic_partitions:
        touched = {tuple(sorted(add.partition_values.items())) for add in adds}
        doomed = []
        for row in snapshot.files.to_pylist():
            key = tuple(sorted(dict(row.get("partitionValues") or []).items()))
            if key in touched:
                doomed.append(row_to_add(row))
        for key in touched:
            txn.read(from_partition_values({logical_of.get(k, k): v for k, v in key}))
        return doomed, []
    if plan.replace_where is None:
        txn.read_whole_table()
        return [row_to_add(row) for row in snapshot.files.to_pylist()], []
    predicate = where_predicate(plan.replace_where)
    if predicate is not None and references(predicate) <= set(partition_by):
        txn.read(predicate)
        candidates = prune_files(
            snapshot.files, predicate, config.schema, partition_by, config.column_mapping_mode
        )
        return [row_to_add(row) for row in candidates.to_pylist()], []
    return _rewrite_matching(plan, snapshot, predicate, txn)


def _rewrite_matching(
    plan: WritePlan, snapshot: Any, predicate: Any, txn: Any
) -> tuple[list[AddFile], list[AddFile]]:
    """Data-column ``replaceWhere``: every file that may hold a matching row
    is removed, and its rows that do not match are written back."""
    import pyarrow.compute as pc

    from raydelta.protocol.expressions import evaluate, parse_expression
    from raydelta.protocol.file_actions import row_to_add
    from raydelta.storage.data.files import read_logical_file
    from raydelta.storage.data.writer import write_data
    from raydelta.storage.scan import prune_files

    config = snapshot.table_configuration
    partition_by = list(config.partition_columns)
    candidates = prune_files(
        snapshot.files, predicate, config.schema, partition_by, config.column_mapping_mode
    )
    parsed = parse_expression(plan.replace_where or "")
    out: list[AddFile] = []
    kept: list[pa.Table] = []
    rows = candidates.to_pylist()
    for row in rows:
        add = dict(row)
        add["partitionValues"] = dict(add.get("partitionValues") or [])
        table = read_logical_file(
            plan.uri,
            add,
            config.schema,
            partition_by,
            column_mapping_mode=config.column_mapping_mode,
        )
        matched = pc.fill_null(evaluate(parsed, table), False)
        if not pc.any(matched).as_py():
            continue
        out.append(row_to_add(row))
        rest = table.filter(pc.invert(matched))
        if rest.num_rows:
            kept.append(rest)
    # which rows match depends on every file's data: conservatively, the whole table
    txn.read_whole_table()
    if not kept:
        return out, []
    result = write_data(
        plan.uri, pa.concat_tables(kept), protocol=snapshot.protocol, metadata=snapshot.metadata
    )
    return out, list(result.adds)


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("raydelta")``: the plan comes from the driver's front
    door (:mod:`raydelta.spark.front_door`), else is made here for the plain
    append/overwrite Spark allows a Python data source."""

    def __init__(self, plan: WritePlan, fault_file: str | None = None) -> None:
        self.plan = plan
        self.fault_file = fault_file

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_task(self.plan, iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        commit_write(self.plan, adds_from(messages))

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing was committed; the written files stay unreferenced (VACUUM)."""


class NothingToWrite(DataSourceArrowWriter):
    """The write's ``txnVersion`` is already in the table: tasks write nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WrittenFiles(adds=[])

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing to commit."""
