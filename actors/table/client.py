"""The log-level client of a ``TableActor``: :class:`TableClient`, :class:`Transaction`.

>>> import pyarrow as pa                                             # doctest: +SKIP
>>> from raydelta.actors.table.client import TableClient              # doctest: +SKIP
>>> table = TableClient.create("file:///tmp/events", schema=pa.schema([("id", pa.int64())]))
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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Self

import pyarrow as pa

from raydelta.actors.cluster import (
    checkpoint_actor_name,
    cleanup_actor_name,
    ensure_ray,
    find_actor,
    stop_actor,
)
from raydelta.actors.table.channel import (
    CHANNEL_METHODS,
    ChannelClient,
    ChannelFallback,
    channel_enabled,
)
from raydelta.actors.table.placement import (
    POOL,
    HostSlot,
    dedicated_slot,
    forget_handle,
    host_handle,
    is_dedicated,
    set_dedicated,
)
from raydelta.actors.table.routing import TableActorHandle
from raydelta.actors.table.transaction import Transaction
from raydelta.protocol import table_properties as props
from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    Format,
    Metadata,
    Protocol,
)
from raydelta.protocol.errors import TableMovedError, TableNotFoundError
from raydelta.protocol.events import (
    CommitCommitted,
    CommitConflict,
    CommitRejected,
    CommitRequest,
    IsolationLevel,
    ReadSet,
)
from raydelta.protocol.reconciliation import TableHead, apply_commits
from raydelta.protocol.schema import (
    ColumnMappingMode,
    StructType,
    assign_column_mapping,
    column_mapping_mode_from,
    serialize_schema,
)
from raydelta.protocol.schema_arrow import from_arrow
from raydelta.protocol.table_features import IN_COMMIT_TIMESTAMP, upgrade_protocol
from raydelta.protocol.table_properties import COLUMN_MAPPING_MAX_ID, COLUMN_MAPPING_MODE
from raydelta.storage.snapshot import Snapshot, load_snapshot
from raydelta.storage.table_location import normalize_uri

CHANNEL_RETRY_S = 30.0
"""After a failed channel connection, a thread uses Ray only for this long."""


ROUTE_TIMEOUT_S = 120.0
"""How long a call follows a table that moves (or a host that died) before it
gives up: longer than the cluster takes to declare a lost node dead (Ray's
default health checks: ~30 s), after which its tables have new owners."""

ROUTE_BACKOFF_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
"""The pauses before successive re-routes (the last one repeats)."""


def _default_protocol(properties: Mapping[str, str]) -> Protocol:
    """The smallest protocol that supports what ``properties`` turn on."""
    base = Protocol(minReaderVersion=1, minWriterVersion=2)
    reader: list[str] = []
    writer: list[str] = []

    def on(key: str) -> bool:
        return props.is_true(properties.get(key))

    if on(props.ENABLE_DELETION_VECTORS):
        reader.append("deletionVectors")
        writer.append("deletionVectors")
    if on(props.ENABLE_IN_COMMIT_TIMESTAMPS):
        writer.append(IN_COMMIT_TIMESTAMP)
    if on(props.ENABLE_ROW_TRACKING):
        writer.extend(["rowTracking", "domainMetadata"])
    if on(props.ENABLE_CHANGE_DATA_FEED):
        writer.append("changeDataFeed")
    if properties.get(props.CHECKPOINT_POLICY) == "v2":
        reader.append("v2Checkpoint")
        writer.append("v2Checkpoint")
    if properties.get(props.COLUMN_MAPPING_MODE, "none") != "none":
        reader.append("columnMapping")
        writer.append("columnMapping")
    if on(props.IS_APPEND_ONLY):
        writer.append("appendOnly")
    if not reader and not writer:
        return base
    return upgrade_protocol(base, reader_features=reader, writer_features=writer)


def new_table_actions(
    schema: StructType,
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    name: str | None = None,
    description: str | None = None,
    protocol: Protocol | None = None,
) -> tuple[Protocol, Metadata]:
    """The ``protocol`` and ``metaData`` of a new table's version 0: the
    smallest protocol that supports what ``properties`` turn on (unless
    given), column-mapping ids and physical names assigned when enabled."""
    config = {k: str(v) for k, v in (properties or {}).items()}
    if config.get(props.ENABLE_ROW_TRACKING) == "true":
        config.setdefault(props.MATERIALIZED_ROW_ID_COLUMN, f"_row-id-col-{uuid.uuid4()}")
        config.setdefault(
            props.MATERIALIZED_ROW_COMMIT_VERSION_COLUMN, f"_row-commit-version-col-{uuid.uuid4()}"
        )
    table_schema = schema
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
    return protocol or _default_protocol(config), metadata


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
    new_protocol, metadata = new_table_actions(
        from_arrow(schema),
        partition_by=partition_by,
        properties=properties,
        name=name,
        description=description,
        protocol=protocol,
    )
    actions: list[Action] = [new_protocol, metadata]
    request = CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=-1),
        actions=tuple(actions),
        operation="CREATE TABLE",
        operation_parameters={
            "partitionBy": list(partition_by),
            "properties": dict(metadata.configuration),
        },
        commit_time_ms=int(time.time() * 1000),
    )
    return TableClient._check(table._call("create", request))


def release_table(uri: str) -> list[str]:
    """Deactivate the table on its host (a dedicated host is stopped and the
    table goes back to the pool), stop its ``CheckpointActor`` and
    ``CleanupActor`` if any, and forget its subscriptions, giving their memory
    back; returns the names of what was stopped or deactivated.

    Nothing is lost: every acknowledged commit is in the log. The next call of
    any handle activates the table again from the log.
    """
    from raydelta.actors.table.subscriptions import forget_subscribers

    normalized = normalize_uri(uri)
    stopped = []
    ray = ensure_ray()
    if is_dedicated(normalized):
        slot = dedicated_slot(normalized)
        set_dedicated(normalized, False)
        handle = find_actor(slot.name)
        if handle is not None:
            stop_actor(handle)
            stopped.append(slot.name)
        forget_handle(slot.name)
    else:
        slot = POOL.owner(normalized, dedicated=False, refresh=True)
        handle = find_actor(slot.name)
        if handle is not None and ray.get(handle.release.remote(normalized)):
            stopped.append(slot.name)
    for name in (checkpoint_actor_name(normalized), cleanup_actor_name(normalized)):
        handle = find_actor(name)
        if handle is not None:
            stop_actor(handle)
            stopped.append(name)
    forget_subscribers(normalized)
    return stopped


class TableClient:
    """A handle on one table, wherever its coordinator is hosted (cheap; create
    with :meth:`TableClient.open`).

    The log-level client: transactions of actions, blind appends of files the
    caller wrote, snapshots served from the table's host. :class:`raydelta.Table`
    builds the data API on top of it. Calls go to the host the placement names
    (:mod:`raydelta.actors.table.placement`) and follow the table when it moves.
    """

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, Any] | None = None,
        *,
        use_channel: bool | None = None,
    ) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self.use_channel = channel_enabled() if use_channel is None else use_channel
        self._cached: Snapshot | None = None
        self._channels = threading.local()
        self._route: tuple[HostSlot, Any] | None = None

    @property
    def actor(self) -> Any:
        """An actor-like handle on this table (``.ping.remote()``, ``.status.remote()``,
        ``.subscribe.remote(name, handle)``...), whichever host holds it."""
        return TableActorHandle(self)

    @property
    def host(self) -> Any:
        """The Ray handle of the host the table is placed on now."""
        return self._owner()[1]

    def _owner(self, *, refresh: bool = False) -> tuple[HostSlot, Any]:
        route = self._route
        if route is None or refresh:
            dedicated = is_dedicated(self.uri)
            slot = POOL.owner(self.uri, dedicated=dedicated, refresh=refresh)
            route = self._route = (slot, host_handle(slot))
        return route

    @classmethod
    def open(
        cls,
        uri: str,
        *,
        storage_options: dict[str, Any] | None = None,
        use_channel: bool | None = None,
        dedicated: bool = False,
    ) -> Self:
        """A handle on the table at ``uri``. ``dedicated=True`` gives the table a
        host of its own in this cluster (a hot table: see
        :mod:`raydelta.actors.table.placement`)."""
        from raydelta.storage.storage_options import parse_storage_options

        normalized = normalize_uri(uri)
        parse_storage_options(normalized, storage_options)  # bad options: a typed error here
        if dedicated:
            set_dedicated(normalized, True)
        return cls(normalized, storage_options, use_channel=use_channel)

    @classmethod
    def create(
        cls,
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
        dedicated: bool = False,
    ) -> Self:
        """Create a new Delta table (version 0) at ``uri`` and return its handle.

        The log-level twin of :func:`raydelta.create_table`: ``protocol`` may be
        given outright (tests and tools that need an exact protocol), there is no
        ``mode``. Raises :class:`~raydelta.protocol.errors.TableAlreadyExistsError`
        if a table exists there.
        """
        table = cls.open(
            uri, storage_options=storage_options, use_channel=use_channel, dedicated=dedicated
        )
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

    def __getstate__(self) -> dict[str, Any]:
        # connections belong to this process; the cached snapshot stays here too
        return {
            "uri": self.uri,
            "storage_options": self.storage_options,
            "use_channel": self.use_channel,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["uri"], state["storage_options"], use_channel=state["use_channel"]
        )

    def _call(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on the table's host: over this thread's channel when
        the handle uses one and it can carry the call, else (or when the channel
        breaks or times out) through Ray. A call that finds the table moved, or
        its host dead, is sent again to the owner the placement names then.
        Every method is read-only or idempotent (commits carry their ``txnId``),
        so a re-sent call runs exactly once in effect."""
        ray = ensure_ray()
        moved: Exception | None = None
        deadline = time.monotonic() + ROUTE_TIMEOUT_S
        attempt = 0
        while attempt == 0 or time.monotonic() < deadline:
            if attempt:
                time.sleep(ROUTE_BACKOFF_S[min(attempt, len(ROUTE_BACKOFF_S) - 1)])
            slot, host = self._owner(refresh=attempt > 0)
            attempt += 1
            try:
                if self.use_channel and method in CHANNEL_METHODS:
                    client = self._channel(slot, host)
                    if client is not None:
                        try:
                            return client.call(self.uri, method, args)
                        except ChannelFallback:  # not for the channel: through Ray below
                            pass
                        except OSError:  # broke or timed out (ChannelClosed...): re-sent below
                            self._drop_channel()
                if method == "commit":
                    return ray.get(host.commit.remote(self.uri, self.storage_options, *args))
                return ray.get(host.call.remote(self.uri, self.storage_options, method, *args))
            except TableMovedError as error:
                moved = error
            except ray.exceptions.ActorDiedError as error:
                # stopped for good (release_table, a retired host): the owner rebuilds
                # from the log, and a commit re-sent with its txnId gets its version
                forget_handle(slot.name)
                self._drop_channel()
                moved = error
        raise TableMovedError(
            f"{self.uri}: no host served the call within {ROUTE_TIMEOUT_S:.0f} s"
        ) from moved

    def _channel(self, slot: HostSlot, host: Any) -> ChannelClient | None:
        """This thread's channel to the table's host, connected on first use;
        None while the host has none or it could not be reached (retried after
        :data:`CHANNEL_RETRY_S`)."""
        local = self._channels
        client: ChannelClient | None = getattr(local, "client", None)
        if client is not None and getattr(local, "host", None) != slot.name:
            self._drop_channel()
            client = None
        if client is not None or time.monotonic() < getattr(local, "retry_at", 0.0):
            return client
        try:
            address = ensure_ray().get(host.channel_address.remote())
            if address is not None:
                client = local.client = ChannelClient(address)
                local.host = slot.name
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
            return self._load_snapshot(version=version, timestamp=timestamp)
        cached = self._cached  # one read: other threads may share this handle
        since = cached.version if cached is not None else -1
        latest, commits = self._call("tail", since)
        if latest < 0:
            raise TableNotFoundError(f"no Delta table at {self.uri}")
        if cached is None or commits is None:
            fresh = self._load_snapshot()
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

    def _load_snapshot(
        self, *, version: int | None = None, timestamp: int | str | datetime | None = None
    ) -> Snapshot:
        """The table read from storage (a catalog-backed client adds what its
        catalog holds: :mod:`raydelta.actors.catalog.client`)."""
        return load_snapshot(
            self.uri, version=version, timestamp=timestamp, storage_options=self.storage_options
        )

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
