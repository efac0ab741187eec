"""Unity Catalog's commit protocol, both of its APIs: :class:`UnityCommitService`.

delta-storage's clients commit a catalog-managed table by writing
``_delta_log/_staged_commits/<v>.<uuid>.json`` and naming it to the
catalog: the legacy API (``/delta/preview/commits``, by table id and URI:
:meth:`UnityCommitService.get_commits`, :meth:`UnityCommitService.commit`)
and the Delta REST API (``/delta/v1/.../tables/{t}``, by name, with an
``add-commit`` update: :meth:`UnityCommitService.load_table`,
:meth:`UnityCommitService.update_table`). Both land in
:meth:`UnityCommitService._judge`.

Invariants:
- A commit is ratified *exactly* as staged, at exactly the version the
  client chose (:meth:`~raydelta.actors.catalog.tables.ManagedTableCoordinator.ratify_exact`):
  never rebased or re-staged, so the client's own backfill and the
  catalog's publisher write the same bytes to ``<v>.json`` (both
  put-if-absent) and never disagree.
- At most once: a version already taken is a conflict
  (:class:`~raydelta.actors.catalog.unity.errors.CommitVersionConflictError`,
  HTTP 409) unless it is the same commit again (the same staged file held
  for that version, or the same bytes already published, or the same
  ``txnId``): then the replay is answered as a success, so a client whose
  answer was lost (delta-storage's SDK re-sends on 5xx and broken
  connections) never commits twice.
- Durable before the reply: the answer waits for the group commit that
  holds the ratification.
- Judged by content: the staged file's actions decide the privileges
  needed (:func:`~raydelta.protocol.privileges.required_privileges`), not
  what the request says about them; a refusal writes nothing.
- Unbackfilled commits are listed with their staged file (name, size,
  modification time, in-commit timestamp). Inline commits (raydelta's own
  clients) get a staged file when first listed, holding exactly the bytes
  the publisher writes to ``<v>.json`` (:meth:`UnityCommitService._stage_inline`),
  so listings never wait for publishing and a client's backfill from it
  agrees with the publisher.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from raydelta.actors.catalog.auth import Authorizer
from raydelta.actors.catalog.group_commit import Ticket
from raydelta.actors.catalog.managed import ManagedTables
from raydelta.actors.catalog.tables import ManagedTableCoordinator
from raydelta.actors.catalog.unity.errors import (
    CommitVersionConflictError,
    UpdateRequirementConflictError,
)
from raydelta.actors.catalog.unity.metadata_commits import LastMetadataCommits, MetadataCommit
from raydelta.actors.catalog.unity.tables import UnityTableService, same_location
from raydelta.protocol.actions import CommitInfo, parse_actions, serialize_actions
from raydelta.protocol.catalog_managed import STAGED_PREFIX, RatifiedCommit
from raydelta.protocol.errors import (
    FileAlreadyExistsError,
    InvalidArgumentError,
    TableNotFoundError,
)
from raydelta.protocol.file_names import (
    STAGED_COMMITS_DIR,
    LogFileKind,
    commit_name,
    parse_log_file_name,
    staged_commit_name,
)
from raydelta.protocol.privileges import Privilege, required_privileges
from raydelta.protocol.unity_catalog import DeltaCommitInfo, GetCommitsResponse, LoadedTable
from raydelta.storage.catalog.ratified_store import TableEntry


class UnityCommitService:
    """Unity Catalog's commits (module docstring). Describes tables through
    ``describe`` (the tables service: a loaded table carries its description)."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        auth: Authorizer,
        tables: ManagedTables,
        describe: UnityTableService,
    ) -> None:
        self._lock = lock
        self._auth = auth
        self._tables = tables
        self._store = tables.store
        self._describe = describe
        self._metadata_commits = LastMetadataCommits()

    def _by_id(self, token: str | None, table_id: str, table_uri: str) -> tuple[str, TableEntry]:
        principal = self._auth.authenticate(token)
        entry = self._tables.entry_by_id(table_id)
        if entry is None:
            raise TableNotFoundError(f"no table with id {table_id!r}")
        if not same_location(entry.location, table_uri):
            raise InvalidArgumentError(
                f"table {table_id} lives at {entry.location}, not at {table_uri}"
            )
        return principal, entry

    def _by_name(self, token: str | None, full_name: str) -> tuple[str, TableEntry]:
        principal = self._auth.authenticate(token)
        entry = self._store.lookup(full_name)
        if entry is None:
            raise TableNotFoundError(f"table {full_name!r} does not exist")
        return principal, entry

    @staticmethod
    def _managed_only(entry: TableEntry) -> None:
        if not entry.catalog_managed:
            raise InvalidArgumentError(
                f"table {entry.name!r} is an external table: its commits do not go through "
                "the catalog"
            )

    # --- listing -----------------------------------------------------------------------

    def get_commits(
        self,
        token: str | None,
        table_id: str,
        table_uri: str,
        start_version: int,
        end_version: int | None,
    ) -> GetCommitsResponse:
        """Legacy API: unbackfilled commits in ``[start, end]`` and the latest version."""
        with self._lock:
            principal, entry = self._by_id(token, table_id, table_uri)
            self._managed_only(entry)
            self._auth.require(principal, entry.name, [Privilege.READ])
        commits, latest = self._unbackfilled(entry, start_version, end_version)
        return GetCommitsResponse(commits=tuple(commits), latest_table_version=latest)

    def _unbackfilled(
        self, entry: TableEntry, start_version: int | None, end_version: int | None
    ) -> tuple[list[DeltaCommitInfo], int]:
        """The held (unpublished) commits in the range, described as Unity Catalog
        does, and the latest version. An inline commit (raydelta's own clients)
        is given a staged file first (:meth:`_stage_inline`)."""
        with self._lock:
            self._tables.ratifier.settle()
            coordinator = self._tables.table(entry.name)
            held, latest = coordinator.held_commits(start_version, end_version)
            store = coordinator.store
            names = {
                c.version: (
                    c.path[len(STAGED_PREFIX) :]
                    if c.path is not None
                    else self._stage_inline(coordinator, c)
                )
                for c in held
            }
        commits = []
        for commit in held:
            name = names[commit.version]
            try:  # one stat per held file: _staged_commits keeps every file ever staged
                status = store.status(store.path_of(name))
                size, modified = status.size, status.modification_time
            except FileNotFoundError:
                size, modified = -1, 0
            commits.append(
                DeltaCommitInfo(
                    version=commit.version,
                    timestamp=commit.timestamp,
                    file_name=name.rsplit("/", 1)[-1],
                    file_size=size,
                    file_modification_timestamp=modified,
                )
            )
        return commits, latest

    def _stage_inline(self, coordinator: ManagedTableCoordinator, commit: RatifiedCommit) -> str:
        """A staged file holding inline commit ``commit``, with exactly the bytes
        ``<v>.json`` gets (the publisher's pending bytes, else the published file,
        else what recovery publishes), so a Unity Catalog client that backfills
        from it agrees with the publisher. Named from the table id and version
        (put-if-absent: idempotent); ``_delta_log``-relative name."""
        table_id = coordinator.table_id
        data = self._tables.publisher.pending_data(table_id, commit.version)
        if data is None:
            try:
                data = coordinator.store.read(commit_name(commit.version))
            except FileNotFoundError:
                data = serialize_actions(list(commit.actions or ()))
        tag = uuid.uuid5(uuid.NAMESPACE_URL, f"raydelta-inline:{table_id}:{commit.version}")
        name = staged_commit_name(commit.version, str(tag))
        with contextlib.suppress(FileAlreadyExistsError):  # an earlier listing: same bytes
            coordinator.store.put_if_absent(name, data)
        return name

    def load_table(self, token: str | None, full_name: str) -> LoadedTable:
        """Delta REST API ``loadTable``: the table's description (as
        :meth:`~raydelta.actors.catalog.unity.tables.UnityTableService.get_table`
        gives it), its etag, its unbackfilled commits newest first and its
        latest version (READ)."""
        with self._lock:
            principal, entry = self._by_name(token, full_name)
            self._auth.require(principal, full_name, [Privilege.READ])
        return self._loaded(full_name, entry)

    def _loaded(self, full_name: str, entry: TableEntry) -> LoadedTable:
        commits: list[DeltaCommitInfo] = []
        latest = None
        last: MetadataCommit | None = None
        if entry.catalog_managed:
            commits, latest = self._unbackfilled(entry, None, None)
        with self._lock:
            described, metadata = self._describe.describe(full_name, entry)
            etag = self.etag(entry)
            if latest is not None:
                committer = self._tables.coordinator(entry).committer
                last = self._metadata_commits.find(entry.table_id, latest, committer.read_commits)
        return LoadedTable(
            last_commit_version=None if last is None else last.version,
            last_commit_timestamp_ms=None if last is None else last.timestamp_ms,
            table=described,
            schema_string=None if metadata is None else metadata.schema_string,
            partition_columns=() if metadata is None else tuple(metadata.partition_columns),
            etag=etag,
            commits=tuple(sorted(commits, key=lambda c: -c.version)),
            latest_table_version=latest,
        )

    # --- committing --------------------------------------------------------------------

    def commit(
        self,
        token: str | None,
        table_id: str,
        table_uri: str,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> None:
        """Legacy API: ratify one commit; ``commit_info`` None only reports a
        backfill (checked; nothing else to do: the catalog publishes itself)."""
        with self._lock:
            principal, entry = self._by_id(token, table_id, table_uri)
            ticket = self._judge(principal, entry, commit_info, latest_backfilled_version)
        if ticket is not None:
            self._tables.ratifier.wait(ticket)  # durable before the reply

    def update_table(
        self,
        token: str | None,
        full_name: str,
        *,
        table_uuid: str | None,
        etag: str | None,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> LoadedTable:
        """Delta REST API ``updateTable``: check the requirements, then ratify the
        ``add-commit`` (if any) as :meth:`commit` does; returns what
        :meth:`load_table` returns, after the commit."""
        with self._lock:
            principal, entry = self._by_name(token, full_name)
            if table_uuid is not None and table_uuid != entry.table_id:
                raise UpdateRequirementConflictError(
                    f"assert-table-uuid failed for {full_name}: expected {table_uuid}, "
                    f"the table is {entry.table_id}"
                )
            if etag is not None and etag != self.etag(entry):
                raise UpdateRequirementConflictError(
                    f"assert-etag failed for {full_name}: the table changed since etag {etag}"
                )
            ticket = self._judge(principal, entry, commit_info, latest_backfilled_version)
        if ticket is not None:
            self._tables.ratifier.wait(ticket)
        # the answer describes the table after the commit, in the same call (a
        # principal holding WRITE but not READ is still told what it committed to)
        return self._loaded(full_name, entry)

    def etag(self, entry: TableEntry) -> str:
        """The table's etag: changes with every ratified version (the lock held)."""
        if not entry.catalog_managed:
            return f"{entry.table_id}:external"
        self._tables.ratifier.settle()
        return f"{entry.table_id}:{self._tables.table(entry.name).version}"

    def _judge(
        self,
        principal: str,
        entry: TableEntry,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> Ticket | None:
        """Under the lock: judge and number one commit; the ratifier ticket to wait
        for (None when nothing new was ratified)."""
        self._managed_only(entry)
        coordinator = self._tables.table(entry.name)
        self._tables.ratifier.settle()
        latest = coordinator.version
        if latest_backfilled_version is not None and latest_backfilled_version > latest:
            raise InvalidArgumentError(
                f"latest_backfilled_version {latest_backfilled_version} is past the "
                f"latest version {latest}"
            )
        if commit_info is None:
            self._auth.require(principal, entry.name, [Privilege.WRITE])
            return None
        version, path = staged_commit_of(commit_info)
        try:
            data = coordinator.store.read(path[len(STAGED_PREFIX) :])
        except FileNotFoundError:
            raise InvalidArgumentError(f"staged commit {path!r} does not exist") from None
        actions = parse_actions(data)
        self._auth.require(principal, entry.name, required_privileges(actions))
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        txn_id = (info.txn_id if info is not None else None) or f"uc:{path}"
        if version <= latest:
            if _is_replay(coordinator, version, path, data, txn_id):
                return None
            raise CommitVersionConflictError(
                f"version {version} of {entry.name!r} is already committed "
                f"(latest {latest}); read the new commits and retry",
                winning_version=latest,
            )
        if version > latest + 1:
            raise InvalidArgumentError(
                f"commit version {version} of {entry.name!r} skips versions: the next "
                f"one is {latest + 1}"
            )
        self._tables.require_publish_capacity(coordinator.table_id, entry.name)
        won = coordinator.find_committed(txn_id)
        if won is not None:
            raise CommitVersionConflictError(
                f"the commit with txnId {txn_id} is already version {won} of {entry.name!r}",
                winning_version=latest,
            )
        coordinator.ratify_exact(version, path, actions, txn_id)
        last: Ticket | None = self._tables.ratifier.last
        return last


def _is_replay(
    coordinator: ManagedTableCoordinator,
    version: int,
    path: str,
    data: bytes,
    txn_id: str,
) -> bool:
    """Whether this commit is what version ``version`` already holds: the same
    staged file, the same bytes published, or the same transaction (its
    ``txnId``) re-sent in a new file after an answer was lost."""
    if coordinator.find_committed(txn_id) == version:
        return True
    held = [c for c in coordinator.held_commits(version, version)[0] if c.version == version]
    if held:
        return held[0].path == path
    try:
        return bool(coordinator.store.read(commit_name(version)) == data)
    except FileNotFoundError:
        return False


def staged_commit_of(commit_info: Mapping[str, Any]) -> tuple[int, str]:
    """``(version, root-relative staged path)`` of a commit's ``commit_info``."""
    version = commit_info.get("version")
    file_name = commit_info.get("file_name")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidArgumentError(f"commit version must be a version, got {version!r}")
    if not isinstance(file_name, str) or "/" in file_name:
        raise InvalidArgumentError(f"commit file_name must be a file name, got {file_name!r}")
    parsed = parse_log_file_name(f"{STAGED_COMMITS_DIR}/{file_name}")
    if parsed is None or parsed.kind is not LogFileKind.STAGED_COMMIT or parsed.version != version:
        raise InvalidArgumentError(
            f"commit file name {file_name!r} is not a staged commit of version {version} "
            "(<version>.<uuid>.json)"
        )
    return version, f"{STAGED_PREFIX}{STAGED_COMMITS_DIR}/{file_name}"


__all__ = ["UnityCommitService", "staged_commit_of"]
