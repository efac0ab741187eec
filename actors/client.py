"""The log-level client of a ``TableActor``: :class:`TableClient`, :class:`Transaction`.

>>> import pyarrow as pa                                             # doctest: +SKIP
>>> from raydelta.actors.client import create_table                 # doctest: +SKIP
>>> table = create_table("file:///tmp/events", schema=pa.schema([("id", pa.int64())]))
>>> txn = table.transaction()                                        # doctest: +SKIP
>>> txn.add(AddFile(path="part-0.parquet", size=10, modificationTime=0))  # doctest: +SKIP
>>> txn.commit(operation="WRITE")                                    # doctest: +SKIP
1

Invariants:
- A :class:`TableClient` is a thin handle: every commit goes through the table's
  one ``TableActor``; the handle caches the latest snapshot and brings it up
  to date with the commits it has not seen (from the actor's memory), so a
  ``snapshot()`` after a commit costs the size of that commit, not of the table.
- A :class:`Transaction` records what it read (its read set) and sends it
  with its actions; it never retries on its own: the actor rebases it or
  tells it which conflict happened, as a delta-spark exception.
- Options are keyword-only.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Self

import pyarrow as pa

from raydelta.actors.channel import (
    CHANNEL_METHODS,
    ChannelClient,
    ChannelFallback,
    channel_enabled,
)
from raydelta.actors.cluster import (
    checkpoint_actor_name,
    cleanup_actor_name,
    ensure_ray,
    find_actor,
    normalize_uri,
    start_actor,
    stop_actor,
    table_actor_name,
)
from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Format,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.errors import TableNotFoundError
from raydelta.protocol.events import (
    CommitCommitted,
    CommitConflict,
    CommitRejected,
    CommitRequest,
    FileRef,
    IsolationLevel,
    ReadSet,
)
from raydelta.protocol.predicates import Predicate, from_partition_values, parse_predicate
from raydelta.protocol.reconciliation import TableHead, apply_commits
from raydelta.protocol.schema import (
    ColumnMappingMode,
    assign_column_mapping,
    column_mapping_mode_from,
    serialize_schema,
)
from raydelta.protocol.schema_arrow import from_arrow
from raydelta.protocol.table_features import upgrade_protocol
from raydelta.protocol.table_properties import COLUMN_MAPPING_MAX_ID, COLUMN_MAPPING_MODE
from raydelta.storage.snapshot import Snapshot, load_snapshot

CHANNEL_RETRY_S = 30.0
"""After a failed channel connection, a thread uses Ray only for this long."""


def _table_actor(uri: str, storage_options: dict[str, Any] | None) -> Any:
    from raydelta.actors.table_actor import TableActor

    return start_actor(TableActor, table_actor_name(uri), uri, storage_options)


def _default_protocol(properties: Mapping[str, str]) -> Protocol:
    """The smallest protocol that supports what ``properties`` turn on."""
    base = Protocol(minReaderVersion=1, minWriterVersion=2)
    reader: list[str] = []
    writer: list[str] = []

    def on(key: str) -> bool:
        return str(properties.get(key, "false")).lower() == "true"

    if on("delta.enableDeletionVectors"):
        reader.append("deletionVectors")
        writer.append("deletionVectors")
    if on("delta.enableInCommitTimestamps"):
        writer.append("inCommitTimestamp")
    if on("delta.enableRowTracking"):
        writer.extend(["rowTracking", "domainMetadata"])
    if on("delta.enableChangeDataFeed"):
        writer.append("changeDataFeed")
    if properties.get("delta.checkpointPolicy") == "v2":
        reader.append("v2Checkpoint")
        writer.append("v2Checkpoint")
    if properties.get("delta.columnMapping.mode", "none") != "none":
        reader.append("columnMapping")
        writer.append("columnMapping")
    if on("delta.appendOnly"):
        writer.append("appendOnly")
    if not reader and not writer:
        return base
    return upgrade_protocol(base, reader_features=reader, writer_features=writer)


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    protocol: Protocol | None = None,
    storage_options: dict[str, Any] | None = None,
    use_channel: bool | None = None,
) -> TableClient:
    """Create a new Delta table (version 0) and return its handle.

    Raises :class:`~raydelta.protocol.errors.TableAlreadyExistsError` if one exists.
    """
    table = open_table(uri, storage_options=storage_options, use_channel=use_channel)
    commit_create(
        table,
        schema,
        partition_by=partition_by,
        properties=properties,
        name=name,
        description=description,
        protocol=protocol,
    )
    return table


def commit_create(
    table: TableClient,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    protocol: Protocol | None = None,
) -> int:
    """Commit version 0 of ``table``: its protocol (the smallest that supports
    what ``properties`` turn on, unless given) and metadata. Returns 0.

    Raises :class:`~raydelta.protocol.errors.TableAlreadyExistsError` if the
    table exists.
    """
    config = {k: str(v) for k, v in (properties or {}).items()}
    if config.get("delta.enableRowTracking") == "true":
        config.setdefault(
            "delta.rowTracking.materializedRowIdColumnName", f"_row-id-col-{uuid.uuid4()}"
        )
        config.setdefault(
            "delta.rowTracking.materializedRowCommitVersionColumnName",
            f"_row-commit-version-col-{uuid.uuid4()}",
        )
    table_schema = from_arrow(schema)
    if column_mapping_mode_from(config.get(COLUMN_MAPPING_MODE)) is not ColumnMappingMode.NONE:
        table_schema, max_id = assign_column_mapping(
            table_schema, new_physical_name=lambda: f"col-{uuid.uuid4()}"
        )
        config[COLUMN_MAPPING_MAX_ID] = str(max(max_id, int(config.get(COLUMN_MAPPING_MAX_ID, 0))))
    metadata = Metadata(
        id=str(uuid.uuid4()),
        name=name,
        description=description,
        format=Format(provider="parquet", options={}),
        schemaString=serialize_schema(table_schema),
        partitionColumns=list(partition_by),
        createdTime=int(time.time() * 1000),
        configuration=config,
    )
    actions: list[Action] = [protocol or _default_protocol(config), metadata]
    request = CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=-1),
        actions=tuple(actions),
        operation="CREATE TABLE",
        operation_parameters={
            "partitionBy": list(partition_by),
            "properties": config,
        },
        commit_time_ms=int(time.time() * 1000),
    )
    return TableClient._check(table._call("create", request))


def open_table(
    uri: str, *, storage_options: dict[str, Any] | None = None, use_channel: bool | None = None
) -> TableClient:
    """The handle of the table at ``uri``, starting its actor if none runs.

    Starts a local Ray cluster when this process is not connected to one.
    The table need not exist yet (see :func:`create_table`). ``use_channel``:
    also send the hot calls over the actor's direct, authenticated socket
    (:mod:`raydelta.actors.channel`, opt-in); default: only if
    ``RAYDELTA_CHANNEL=1``. Anything the channel cannot deliver goes through
    Ray, exactly once by the commit's ``txnId``.
    """
    return TableClient.open(uri, storage_options=storage_options, use_channel=use_channel)


def release_table(uri: str) -> list[str]:
    """Stop the table's actors in this cluster (its ``TableActor``, and its
    ``CheckpointActor`` and ``CleanupActor`` if any) and forget their
    subscriptions, giving their memory back; returns the names stopped.

    Nothing is lost: every acknowledged commit is in the log. A later
    :func:`open_table`, or the next call of a handle still held, starts a fresh
    actor that rebuilds from the log.
    """
    from raydelta.actors.table_actor import forget_subscribers

    normalized = normalize_uri(uri)
    stopped = []
    for name in (
        table_actor_name(normalized),
        checkpoint_actor_name(normalized),
        cleanup_actor_name(normalized),
    ):
        handle = find_actor(name)
        if handle is not None:
            stop_actor(handle)
            stopped.append(name)
    forget_subscribers(normalized)
    return stopped


class TableClient:
    """A handle on one table's ``TableActor`` (cheap; create with :func:`open_table`).

    The log-level client: transactions of actions, blind appends of files the
    caller wrote, snapshots served from the actor. :class:`raydelta.Table`
    builds the data API on top of it.
    """

    def __init__(
        self,
        uri: str,
        actor: Any,
        storage_options: dict[str, Any] | None = None,
        *,
        use_channel: bool | None = None,
    ) -> None:
        self.uri = uri
        self.actor = actor
        self.storage_options = storage_options
        self.use_channel = channel_enabled() if use_channel is None else use_channel
        self._cached: Snapshot | None = None
        self._channels = threading.local()

    @classmethod
    def open(
        cls,
        uri: str,
        *,
        storage_options: dict[str, Any] | None = None,
        use_channel: bool | None = None,
    ) -> Self:
        """A handle on the table at ``uri``, starting its actor if none runs."""
        normalized = normalize_uri(uri)
        actor = _table_actor(normalized, storage_options)
        return cls(normalized, actor, storage_options, use_channel=use_channel)

    def __getstate__(self) -> dict[str, Any]:
        # connections belong to this process; the cached snapshot stays here too
        return {
            "uri": self.uri,
            "actor": self.actor,
            "storage_options": self.storage_options,
            "use_channel": self.use_channel,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["uri"],
            state["actor"],
            state["storage_options"],
            use_channel=state["use_channel"],
        )

    def _call(self, method: str, *args: Any) -> Any:
        """``actor.method(*args)``: over this thread's channel when the handle
        uses one and it can carry the call, else (or when the channel breaks or
        times out) through Ray. Every channel method is read-only or idempotent,
        so a call re-sent through Ray runs exactly once in effect."""
        if self.use_channel and method in CHANNEL_METHODS:
            client = self._channel()
            if client is not None:
                try:
                    return client.call(method, args)
                except ChannelFallback:  # not for the channel: through Ray below
                    pass
                except OSError:  # broke or timed out (ChannelClosed...): re-sent below
                    self._drop_channel()
        ray = ensure_ray()
        try:
            return ray.get(getattr(self.actor, method).remote(*args))
        except ray.exceptions.ActorDiedError:
            # stopped for good (release_table): a fresh actor rebuilds from the log, and
            # a commit re-sent with its txnId gets the version it may already have won
            self.actor = _table_actor(self.uri, self.storage_options)
            self._drop_channel()
            return ray.get(getattr(self.actor, method).remote(*args))

    def _channel(self) -> ChannelClient | None:
        """This thread's channel to the actor, connected on first use; None while
        the actor has none or it could not be reached (retried after
        :data:`CHANNEL_RETRY_S`)."""
        local = self._channels
        client: ChannelClient | None = getattr(local, "client", None)
        if client is not None or time.monotonic() < getattr(local, "retry_at", 0.0):
            return client
        try:
            address = ensure_ray().get(self.actor.channel_address.remote())
            if address is not None:
                client = local.client = ChannelClient(address)
            else:
                local.retry_at = time.monotonic() + CHANNEL_RETRY_S
        except OSError:  # unreachable, refused or timed out: Ray only for a while
            local.retry_at = time.monotonic() + CHANNEL_RETRY_S
        return client

    def _drop_channel(self) -> None:
        client = getattr(self._channels, "client", None)
        self._channels.client = None
        if client is not None:
            client.close()

    @staticmethod
    def _check(reply: CommitCommitted | CommitConflict | CommitRejected) -> int:
        """The version won, or the typed error the reply names."""
        return reply.raise_if_conflict().version

    def version(self) -> int:
        """Latest committed version (-1 when the table does not exist)."""
        return int(self._call("version"))

    def head(self) -> TableHead:
        """Protocol, metadata, txns and domains at the latest version; no files."""
        return self._call("head")  # type: ignore[no-any-return]

    def snapshot(
        self, *, version: int | None = None, timestamp: int | str | datetime | None = None
    ) -> Snapshot:
        """The latest snapshot (from the actor), or one at ``version`` / ``timestamp``
        (time travel, read from storage)."""
        if version is not None or timestamp is not None:
            return load_snapshot(
                self.uri, version=version, timestamp=timestamp, storage_options=self.storage_options
            )
        cached = self._cached  # one read: other threads may share this handle
        since = cached.version if cached is not None else -1
        latest, commits = self._call("tail", since)
        if latest < 0:
            raise TableNotFoundError(f"no Delta table at {self.uri}")
        if cached is None or commits is None:
            fresh = load_snapshot(self.uri, storage_options=self.storage_options)
            self._keep(fresh)
            if fresh.version < latest:
                return self.snapshot()
            return fresh
        if commits:
            state = apply_commits(cached.state, commits, keep_index=True)
            stamp = _commit_timestamp(commits[-1][1], cached.timestamp)
            cached = replace(cached, state=state, log_segment=None, timestamp=stamp)
            self._keep(cached)
        return cached

    def _keep(self, snapshot: Snapshot) -> None:
        current = self._cached
        if current is None or current.version < snapshot.version:
            self._cached = snapshot

    def transaction(
        self,
        *,
        isolation_level: IsolationLevel | str = IsolationLevel.WRITE_SERIALIZABLE,
        snapshot: Snapshot | None = None,
    ) -> Transaction:
        """A new transaction reading the latest version, or ``snapshot``'s version
        (pass the snapshot the transaction chose its files from, so that what it
        read and its read version agree)."""
        head = snapshot.state.head() if snapshot is not None else self.head()
        if head.version < 0:
            raise TableNotFoundError(f"no Delta table at {self.uri}")
        return Transaction(self, head, isolation_level=IsolationLevel(isolation_level))

    def append_files(
        self,
        *files: AddFile,
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        txn_id: str | None = None,
    ) -> int:
        """Blind-append ``files`` in one commit; return the version won.

        A blind append reads nothing of the table, so it needs no read version:
        the actor checks it against the table as it is at commit time (schema,
        partition columns, ``appendOnly``...), in one round trip. Pass the same
        ``txn_id`` again after a lost reply to get the same version back.
        """
        parameters = {"mode": "Append", **dict(operation_parameters or {})}
        return self._commit_unread(files, operation, parameters, txn_id=txn_id)

    def record_operation(
        self,
        operation: str,
        *,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> int:
        """Commit a version holding only a ``commitInfo`` that records
        ``operation`` (e.g. delta-spark's ``VACUUM START`` / ``VACUUM END``), with
        its ``operationParameters`` and ``operationMetrics``; returns the version."""
        info = CommitInfo.model_validate(
            {"operationMetrics": {k: str(v) for k, v in (metrics or {}).items()}}
        )
        return self._commit_unread((info,), operation, dict(parameters or {}))

    def _commit_unread(
        self,
        actions: Sequence[Action],
        operation: str,
        parameters: dict[str, Any],
        *,
        txn_id: str | None = None,
    ) -> int:
        """Commit ``actions`` that depend on nothing read (no read version: one
        round trip, judged against the table as it is at commit time)."""
        request = CommitRequest(
            txn_id=txn_id or str(uuid.uuid4()),
            read_set=ReadSet(read_version=None),
            actions=tuple(actions),
            operation=operation,
            operation_parameters=parameters,
            commit_time_ms=int(time.time() * 1000),
        )
        return TableClient._check(self._call("commit", request))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


def _commit_timestamp(actions: Sequence[Action], fallback: int) -> int:
    for action in actions:
        if isinstance(action, CommitInfo):
            if action.in_commit_timestamp is not None:
                return action.in_commit_timestamp
            if action.timestamp is not None:
                return action.timestamp
    return fallback


class Transaction:
    """Collects what a writer read and wrote; :meth:`commit` sends it once."""

    def __init__(
        self, table: TableClient, head: TableHead, *, isolation_level: IsolationLevel
    ) -> None:
        self.table = table
        self.read_version = head.version
        self._head = head
        self.isolation_level = isolation_level
        self._predicates: list[Predicate] = []
        self._files_read: list[FileRef] = []
        self._read_whole_table = False
        self._app_ids_read: list[str] = []
        self._domains_read: list[str] = []
        self._actions: list[Action] = []
        self.txn_id = str(uuid.uuid4())
        self.committed_version: int | None = None
        self.committed: CommitCommitted | None = None
        """The actor's reply once committed (``attempts``, ``rebased_over``...)."""

    @property
    def metadata(self) -> Metadata:
        assert self._head.metadata is not None
        return self._head.metadata

    @property
    def protocol(self) -> Protocol:
        assert self._head.protocol is not None
        return self._head.protocol

    # --- what was read -------------------------------------------------------------

    def read(self, predicate: str | Predicate | Mapping[str, str | None]) -> Transaction:
        """Record a partition predicate this transaction's result depends on."""
        if isinstance(predicate, str):
            predicate = parse_predicate(predicate)
        elif isinstance(predicate, Mapping):
            predicate = from_partition_values(dict(predicate))
        self._predicates.append(predicate)
        return self

    def read_files(self, paths: Iterable[str | AddFile]) -> Transaction:
        """Record files whose content this transaction read."""
        for item in paths:
            if isinstance(item, AddFile):
                self._files_read.append(FileRef.of(item))
            else:
                self._files_read.append(FileRef(path=item, dv_id=None))
        return self

    def read_whole_table(self) -> Transaction:
        self._read_whole_table = True
        return self

    def app_version(self, app_id: str) -> int | None:
        """The table's version for ``app_id`` (recorded as read)."""
        self._app_ids_read.append(app_id)
        txn = self._head.txns.get(app_id)
        return None if txn is None else txn.version

    def domain(self, domain: str) -> str | None:
        """A domain's configuration (recorded as read)."""
        self._domains_read.append(domain)
        found = self._head.domains.get(domain)
        return None if found is None else found.configuration

    # --- what is written -------------------------------------------------------------

    def add(self, *files: AddFile) -> Transaction:
        self._actions.extend(files)
        return self

    def remove(
        self,
        file: str | AddFile | RemoveFile,
        *,
        data_change: bool = True,
        deletion_timestamp: int | None = None,
    ) -> Transaction:
        """Remove a file: by path, from its ``AddFile`` (keeps partition values,
        size and DV), or as a ready ``RemoveFile``."""
        stamp = deletion_timestamp if deletion_timestamp is not None else int(time.time() * 1000)
        if isinstance(file, RemoveFile):
            self._actions.append(file)
        elif isinstance(file, AddFile):
            self._actions.append(
                RemoveFile(
                    path=file.path,
                    deletionTimestamp=stamp,
                    dataChange=data_change,
                    extendedFileMetadata=True,
                    partitionValues=file.partition_values,
                    size=file.size,
                    deletionVector=file.deletion_vector,
                    baseRowId=file.base_row_id,
                    defaultRowCommitVersion=file.default_row_commit_version,
                )
            )
        else:
            self._actions.append(
                RemoveFile(path=file, deletionTimestamp=stamp, dataChange=data_change)
            )
        return self

    def set_app_version(self, app_id: str, version: int) -> Transaction:
        self._actions.append(
            Txn(appId=app_id, version=version, lastUpdated=int(time.time() * 1000))
        )
        return self

    def set_metadata(
        self,
        *,
        schema: pa.Schema | None = None,
        partition_by: Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        remove_properties: Iterable[str] = (),
        name: str | None = None,
        description: str | None = None,
    ) -> Transaction:
        """Change metadata; unspecified parts are kept from the read version."""
        current = self.metadata
        configuration = dict(current.configuration)
        configuration.update({k: str(v) for k, v in (properties or {}).items()})
        for key in remove_properties:
            configuration.pop(key, None)
        update: dict[str, Any] = {"configuration": configuration}
        if schema is not None:
            update["schema_string"] = serialize_schema(from_arrow(schema))
        if partition_by is not None:
            update["partition_columns"] = list(partition_by)
        if name is not None:
            update["name"] = name
        if description is not None:
            update["description"] = description
        self._actions = [a for a in self._actions if not isinstance(a, Metadata)]
        self._actions.append(current.model_copy(update=update))
        return self

    def replace_metadata(self, metadata: Metadata) -> Transaction:
        """Commit ``metadata`` as the table's new ``metaData`` action (built by
        the caller, e.g. the data writer after a schema change)."""
        self._actions = [a for a in self._actions if not isinstance(a, Metadata)]
        self._actions.append(metadata)
        return self

    def set_domain(self, domain: str, configuration: str, *, removed: bool = False) -> Transaction:
        self._actions.append(
            DomainMetadata(domain=domain, configuration=configuration, removed=removed)
        )
        return self

    def upgrade_protocol(
        self, *, reader_features: Iterable[str] = (), writer_features: Iterable[str] = ()
    ) -> Transaction:
        upgraded = upgrade_protocol(
            self.protocol,
            reader_features=list(reader_features),
            writer_features=list(writer_features),
        )
        self._actions = [a for a in self._actions if not isinstance(a, Protocol)]
        self._actions.append(upgraded)
        return self

    @property
    def actions(self) -> list[Action]:
        return list(self._actions)

    def read_set(self) -> ReadSet:
        return ReadSet(
            read_version=self.read_version,
            predicates=tuple(self._predicates),
            files_read=tuple(self._files_read),
            read_whole_table=self._read_whole_table,
            app_ids_read=tuple(self._app_ids_read),
            domains_read=tuple(self._domains_read),
            isolation_level=self.isolation_level,
        )

    def request(
        self, *, operation: str = "WRITE", operation_parameters: Mapping[str, Any] | None = None
    ) -> CommitRequest:
        return CommitRequest(
            txn_id=self.txn_id,
            read_set=self.read_set(),
            actions=tuple(self._actions),
            operation=operation,
            operation_parameters=dict(operation_parameters or {}),
            commit_time_ms=int(time.time() * 1000),
        )

    def commit(
        self, *, operation: str = "WRITE", operation_parameters: Mapping[str, Any] | None = None
    ) -> int:
        """Send the transaction; return the version it won.

        Calling it again after a lost reply returns the same version
        (exactly once, keyed by :attr:`txn_id`).
        """
        request = self.request(operation=operation, operation_parameters=operation_parameters)
        reply = self.table._call("commit", request)
        self.committed = reply.raise_if_conflict()
        self.committed_version = self.committed.version
        return self.committed_version
