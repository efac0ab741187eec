"""A transaction: what a writer read (its read set) and what it writes.

Invariants:
- A :class:`Transaction` never retries on its own: :meth:`Transaction.commit`
  sends one request; the table's actor rebases it or answers with the
  conflict, raised as delta-spark's exception.
- Calling :meth:`Transaction.commit` again after a lost reply returns the
  same version (exactly once, keyed by :attr:`Transaction.txn_id`).
- Metadata and protocol changes replace any earlier one in the same
  transaction (a commit holds at most one of each).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raydelta.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Txn,
)
from raydelta.protocol.events import (
    CommitCommitted,
    CommitRequest,
    FileRef,
    IsolationLevel,
    ReadSet,
)
from raydelta.protocol.predicates import Predicate, from_partition_values, parse_predicate
from raydelta.protocol.reconciliation import TableHead
from raydelta.protocol.schema import serialize_schema
from raydelta.protocol.schema_arrow import from_arrow
from raydelta.protocol.table_features import upgrade_protocol

if TYPE_CHECKING:
    from raydelta.actors.table.client import TableClient


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
            # without the add's stats and tags, as this builder always wrote them
            # (delta-spark keeps both; both are optional on a remove)
            self._actions.append(
                file.to_remove(
                    deletion_timestamp=stamp, data_change=data_change, keep_stats_and_tags=False
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

    def add_change_data(self, *files: AddCDCFile) -> Transaction:
        """Add change data files (``cdc`` actions: DML with the change data feed on)."""
        self._actions.extend(files)
        return self

    def set_operation_metrics(self, metrics: Mapping[str, Any]) -> Transaction:
        """Record ``commitInfo.operationMetrics`` (values as text, as delta-spark
        writes them); keeps any ``userMetadata`` already set."""
        info = next((a for a in self._actions if isinstance(a, CommitInfo)), None)
        body = dict(info.to_json_dict()) if info is not None else {}
        body["operationMetrics"] = {k: str(v) for k, v in metrics.items()}
        self._actions = [a for a in self._actions if not isinstance(a, CommitInfo)]
        self._actions.append(CommitInfo.model_validate(body))
        return self

    def set_commit_tags(self, tags: Mapping[str, str]) -> Transaction:
        """Add ``tags`` to the commit's ``commitInfo.tags`` (e.g. a DML that
        preserved stable row ids tags ``delta.rowTracking.preserved``)."""
        info = next((a for a in self._actions if isinstance(a, CommitInfo)), None)
        body = dict(info.to_json_dict()) if info is not None else {}
        body["tags"] = {**dict(body.get("tags") or {}), **{k: str(v) for k, v in tags.items()}}
        self._actions = [a for a in self._actions if not isinstance(a, CommitInfo)]
        self._actions.append(CommitInfo.model_validate(body))
        return self

    def set_user_metadata(self, text: str) -> Transaction:
        """Record ``text`` as the commit's ``commitInfo.userMetadata``
        (delta-spark's ``userMetadata`` write option)."""
        info = next((a for a in self._actions if isinstance(a, CommitInfo)), None)
        body = dict(info.to_json_dict()) if info is not None else {}
        body["userMetadata"] = text
        self._actions = [a for a in self._actions if not isinstance(a, CommitInfo)]
        self._actions.append(CommitInfo.model_validate(body))
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
