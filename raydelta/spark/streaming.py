"""Structured Streaming with the ``raydelta`` format: a source and a sink.

Sink invariants:
- Each micro-batch is ONE commit through the table's ``TableActor`` holding
  ``txn(appId=<query id>, version=<batch id>)``. A batch whose id the table
  already holds for the query is not committed again (a query restarted
  after a crash replays its last batch: its files stay unreferenced), so
  every input row is in the table exactly once.
- The query id is the one Spark keeps in the checkpoint (``metadata`` file
  under ``checkpointLocation``): stable across restarts. Without a
  ``checkpointLocation`` option, a ``queryId`` (or ``txnAppId``) option
  must name it.
- ``append`` mode appends; ``complete`` mode replaces the whole table each
  batch. Tasks write through the one data writer like batch writes.

Source invariants:
- Offsets are ``{"version", "index", "snapshot"}``: every file up to
  ``index`` of ``version`` was delivered (``snapshot``: the files of the
  table at ``version`` rather than that version's commit). Without
  ``startingVersion`` the stream begins with the latest snapshot, then its
  later commits; ``startingVersion`` starts at that commit, ``latest`` after
  the latest one.
- ``maxFilesPerTrigger`` (default 1000) / ``maxBytesPerTrigger`` bound a
  batch (at least one file); ``Trigger.AvailableNow`` stops at the version
  latest when the query started.
- A commit that removes data (``dataChange``) fails the stream unless
  ``ignoreDeletes`` (the commit only deletes) or ``skipChangeCommits`` (the
  commit is skipped whole) allows it, as delta-spark's source does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)

from raydelta.protocol.actions import AddFile, Metadata, RemoveFile
from raydelta.protocol.errors import InvalidArgumentError, RaydeltaError
from raydelta.spark import options as opt

DEFAULT_MAX_FILES = 1000


class StreamingSourceError(RaydeltaError):
    """The source table changed in a way the stream cannot follow."""


# --- sink ------------------------------------------------------------------------------------


def checkpoint_query_id(checkpoint_location: str) -> str | None:
    """The query id Spark keeps in ``<checkpointLocation>/metadata``."""
    from raydelta.storage.log.store import log_store_for

    try:
        store = log_store_for(checkpoint_location.rstrip("/"))
        with store.open_input(store.root_path("metadata")) as handle:
            first = handle.readline()
    except (FileNotFoundError, OSError):
        return None
    try:
        value = json.loads(first).get("id")
    except ValueError:
        return None
    return str(value) if value else None


class StreamSink(DataSourceStreamArrowWriter):
    """``writeStream.format("raydelta")``: one exactly-once commit per batch."""

    def __init__(
        self,
        uri: str,
        *,
        schema_json: str,
        complete: bool,
        options: Mapping[str, Any],
        ray_address: str | None,
    ) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType as SparkStructType

        from raydelta.spark.write_plan import plan_write

        self.uri = uri
        self.complete = complete
        self.options = dict(options)
        self.app_id = opt.option(options, "queryId") or opt.option(options, "txnAppId")
        self.checkpoint = opt.option(options, "checkpointLocation")
        if self.app_id is None and self.checkpoint is None:
            raise InvalidArgumentError(
                "the raydelta sink needs the query's checkpointLocation as a writeStream "
                "option (or a queryId option) to commit each batch exactly once"
            )
        plain = {
            k: v
            for k, v in options.items()
            if str(k).lower() not in ("txnappid", "txnversion", "replacewhere", "queryid")
        }
        spark_schema = SparkStructType.fromJson(json.loads(schema_json))
        plan = plan_write(
            uri,
            spark_schema_json=schema_json,
            arrow_schema=to_arrow_schema(spark_schema),
            save_mode="Overwrite" if complete else "Append",
            partition_by=_partition_option(options),
            options=plain,
            ray_address=ray_address,
        )
        assert plan is not None  # neither Ignore nor a txn was asked for
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from raydelta.spark.writer import write_task

        return write_task(self.plan, iterator)

    def query_id(self) -> str:
        if self.app_id is not None:
            return self.app_id
        assert self.checkpoint is not None
        found = checkpoint_query_id(self.checkpoint)
        if found is None:
            raise InvalidArgumentError(
                f"no query id in {self.checkpoint}/metadata; set the queryId option"
            )
        return found

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        from raydelta.protocol.errors import TableAlreadyExistsError
        from raydelta.spark.writer import adds_from, commit_write
        from raydelta.storage.snapshot import load_table_head

        fault_file = opt.option(self.options, opt.FAULT_FILE_OPTION)
        query = self.query_id()
        plan = replace(self.plan, txn_app_id=query, txn_version=batchId)
        if plan.create:
            try:
                head = load_table_head(plan.uri)
            except RaydeltaError:
                head = None
            if head is not None:
                plan = replace(plan, create=False, protocol_changed=False, metadata_changed=False)
        if not plan.create:
            plan = replace(plan, read_version=load_table_head(plan.uri).version)
        parameters = {
            "outputMode": "Complete" if self.complete else "Append",
            "queryId": query,
            "epochId": str(batchId),
        }
        try:
            commit_write(
                plan,
                adds_from(messages),
                operation="STREAMING UPDATE",
                extra_parameters=parameters,
            )
        except TableAlreadyExistsError:  # a concurrent first batch created it
            plan = replace(plan, create=False, protocol_changed=False, metadata_changed=False)
            plan = replace(plan, read_version=load_table_head(plan.uri).version)
            commit_write(
                plan,
                adds_from(messages),
                operation="STREAMING UPDATE",
                extra_parameters=parameters,
            )
        if fault_file:
            from raydelta.actors.faults import FAULT_FILE_ENV, crash_point

            os.environ[FAULT_FILE_ENV] = fault_file
            crash_point("spark_sink_after_commit")

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing was committed for this batch; its files stay unreferenced."""


def _partition_option(options: Mapping[str, Any]) -> list[str] | None:
    value = opt.option(options, "__partition_columns") or opt.option(options, "partitionBy")
    if not value:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value.split(",")
    return [str(c).strip() for c in parsed]


# --- source ----------------------------------------------------------------------------------


class StreamSource(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``readStream.format("raydelta")``: the table's new files, batch by batch."""

    def __init__(self, uri: str, options: Mapping[str, Any]) -> None:
        from raydelta.storage.snapshot import load_table_head

        self.uri = uri
        starting = opt.option(options, "startingVersion")
        self.starting: int | str | None = (
            None
            if starting is None
            else "latest"
            if starting.strip().lower() == "latest"
            else opt.integer(options, "startingVersion")
        )
        self.max_files = opt.integer(options, "maxFilesPerTrigger")
        self.max_bytes = opt.byte_size(options, "maxBytesPerTrigger")
        self.ignore_deletes = opt.flag(options, "ignoreDeletes")
        self.skip_change_commits = opt.flag(options, "skipChangeCommits")
        head = load_table_head(uri)
        assert head.metadata is not None
        self.schema_string = head.metadata.schema_string or '{"type":"struct","fields":[]}'
        self.partition_columns = list(head.metadata.partition_columns)
        self.mapping_mode = head.table_configuration.column_mapping_mode
        self.target: int | None = None
        self._files: dict[tuple[int, bool], list[dict[str, Any]]] = {}

    # offsets ---------------------------------------------------------------------------------

    def _latest_version(self) -> int:
        from raydelta.storage.snapshot import load_table_head

        return load_table_head(self.uri).version

    def initialOffset(self) -> dict[str, Any]:
        latest = self._latest_version()
        if self.starting == "latest":
            return {"version": latest + 1, "index": -1, "snapshot": False}
        if isinstance(self.starting, int):
            return {"version": self.starting, "index": -1, "snapshot": False}
        return {"version": latest, "index": -1, "snapshot": True}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest_version()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadMaxFiles(DEFAULT_MAX_FILES)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        last = self.target if self.target is not None else self._latest_version()
        max_files = limit.max_files if isinstance(limit, ReadMaxFiles) else None
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        if not isinstance(limit, ReadAllAvailable) and max_bytes is None:
            max_bytes = self.max_bytes
        taken = taken_bytes = 0
        position = dict(start)
        while position["version"] <= last:
            files = self._unit(position["version"], position["snapshot"])
            for index in range(position["index"] + 1, len(files)):
                taken += 1
                taken_bytes += int(files[index].get("size") or 0)
                position = {**position, "index": index}
                full = (max_files is not None and taken >= max_files) or (
                    max_bytes is not None and taken_bytes >= max_bytes
                )
                if full:
                    return self._normalized(position, len(files))
            position = {"version": position["version"] + 1, "index": -1, "snapshot": False}
        return position

    def _normalized(self, position: dict[str, Any], unit_size: int) -> dict[str, Any]:
        if position["index"] >= unit_size - 1:
            return {"version": position["version"] + 1, "index": -1, "snapshot": False}
        return position

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return {"version": self._latest_version() + 1, "index": -1, "snapshot": False}

    # files -----------------------------------------------------------------------------------

    def _unit(self, version: int, snapshot: bool) -> list[dict[str, Any]]:
        key = (version, snapshot)
        found = self._files.get(key)
        if found is None:
            found = self._snapshot_files(version) if snapshot else self._commit_files(version)
            self._files[key] = found
            while len(self._files) > 256:
                self._files.pop(next(iter(self._files)))
        return found

    def _snapshot_files(self, version: int) -> list[dict[str, Any]]:
        from raydelta.spark.reader import adds_of
        from raydelta.storage.snapshot import load_snapshot

        files = load_snapshot(self.uri, version=version).files
        rows = adds_of(files)
        times = files.column("modificationTime").to_pylist()
        order = sorted(range(len(rows)), key=lambda i: (times[i] or 0, rows[i]["path"]))
        return [rows[i] for i in order]

    def _commit_files(self, version: int) -> list[dict[str, Any]]:
        from raydelta.protocol.actions import parse_actions
        from raydelta.protocol.file_names import commit_name
        from raydelta.storage.log.store import log_store_for

        store = log_store_for(self.uri)
        actions = parse_actions(store.read(commit_name(version)))
        adds = [a for a in actions if isinstance(a, AddFile) and a.data_change]
        removes = [a for a in actions if isinstance(a, RemoveFile) and a.data_change]
        changed = next((a for a in actions if isinstance(a, Metadata)), None)
        if changed is not None and changed.schema_string != self.schema_string:
            raise StreamingSourceError(
                f"[DELTA_SCHEMA_CHANGED] the schema of {self.uri} changed at version {version};"
                " restart the stream to read the new schema"
            )
        if removes:
            if self.skip_change_commits:
                return []
            if adds:
                raise StreamingSourceError(
                    f"[DELTA_SOURCE_TABLE_IGNORE_CHANGES] version {version} of {self.uri} "
                    "updates existing data; set skipChangeCommits to skip such commits"
                )
            if not self.ignore_deletes:
                raise StreamingSourceError(
                    f"[DELTA_SOURCE_IGNORE_DELETE] version {version} of {self.uri} deletes "
                    "data; set ignoreDeletes (or skipChangeCommits) to go on"
                )
        return [
            {
                "path": a.path,
                "partitionValues": dict(a.partition_values),
                "deletionVector": None
                if a.deletion_vector is None
                else a.deletion_vector.model_dump(by_alias=True, exclude_none=True),
                "size": a.size,
            }
            for a in adds
        ]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        from raydelta.spark.reader import plan_splits

        chosen: list[dict[str, Any]] = []
        position = dict(start)
        while (position["version"], position["index"]) < (end["version"], end["index"]):
            files = self._unit(position["version"], position["snapshot"])
            stop = end["index"] if position["version"] == end["version"] else len(files) - 1
            chosen.extend(files[position["index"] + 1 : stop + 1])
            if position["version"] == end["version"]:
                break
            position = {"version": position["version"] + 1, "index": -1, "snapshot": False}
        return list(plan_splits(chosen))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from raydelta.protocol.schema import parse_schema
        from raydelta.spark.reader import FileSplit, read_rows

        assert isinstance(partition, FileSplit)
        yield from read_rows(
            self.uri,
            partition.adds,
            parse_schema(self.schema_string),
            self.partition_columns,
            self.mapping_mode,
            None,
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: offsets are log positions."""
