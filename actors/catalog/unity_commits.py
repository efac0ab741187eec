"""Unity Catalog's commit protocol on the ``Catalog`` actor (both of its APIs).

delta-storage's clients commit a catalog-managed table by writing
``_delta_log/_staged_commits/<v>.<uuid>.json`` and naming it to the
catalog: the legacy API (``/delta/preview/commits``, by table id and URI)
and the Delta REST API (``/delta/v1/.../tables/{t}``, by name, with an
``add-commit`` update). Both land in :meth:`UnityCommitMethods._uc_commit_entry`.

Invariants:
- A commit is ratified *exactly* as staged, at exactly the version the
  client chose (:meth:`~raydelta.actors.catalog.tables.ManagedTableCoordinator.ratify_exact`):
  never rebased or re-staged, so the client's own backfill and the
  catalog's publisher write the same bytes to ``<v>.json`` (both
  put-if-absent) and never disagree.
- At most once: a version already taken is a conflict
  (:class:`CommitVersionConflictError`, HTTP 409) unless it is the same
  commit again (the same staged file held for that version, or the same
  bytes already published): then the replay is answered as a success, so a
  client whose answer was lost (delta-storage's SDK re-sends on 5xx and
  broken connections) never commits twice.
- Durable before the reply: the answer waits for the group commit that
  holds the ratification.
- Judged by content: the staged file's actions decide the privileges
  needed (:func:`~raydelta.protocol.privileges.required_privileges`), not
  what the request says about them; a refusal writes nothing.
- Unbackfilled commits are listed with their staged file (name, size,
  modification time, in-commit timestamp). Inline commits (raydelta's own
  clients) get a staged file when first listed, holding exactly the bytes
  the publisher writes to ``<v>.json`` (:meth:`UnityCommitMethods._stage_inline`),
  so listings never wait for publishing and a client's backfill from it
  agrees with the publisher.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raydelta.protocol.actions import CommitInfo, parse_actions, serialize_actions
from raydelta.protocol.catalog_managed import STAGED_PREFIX, RatifiedCommit
from raydelta.protocol.errors import (
    DeltaConcurrentModificationException,
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
from raydelta.protocol.locations import hadoop_location
from raydelta.protocol.privileges import Privilege, required_privileges
from raydelta.storage.catalog.ratified_store import TableEntry

if TYPE_CHECKING:
    from raydelta.actors.catalog.actor import CatalogSettings
    from raydelta.actors.catalog.auth import Authorizer
    from raydelta.actors.catalog.group_commit import GroupRatifier
    from raydelta.actors.catalog.publisher import Publisher
    from raydelta.actors.catalog.tables import ManagedTableCoordinator
    from raydelta.storage.catalog.ratified_store import RatifiedCommitStore


class CommitVersionConflictError(DeltaConcurrentModificationException):
    """Unity Catalog's commit-version conflict: the version is taken by another commit."""


class UpdateRequirementConflictError(DeltaConcurrentModificationException):
    """A Delta REST API requirement (``assert-table-uuid``, ``assert-etag``) failed."""


def same_location(a: str, b: str) -> bool:
    """Whether two table URIs name one place (``file:/x`` = ``file:///x``, no trailing /)."""
    return normalize_location(a) == normalize_location(b)


def normalize_location(uri: str) -> str:
    """``uri`` without a trailing slash, local paths as ``file:/path``
    (:func:`raydelta.protocol.locations.hadoop_location`)."""
    return hadoop_location(uri)


class UnityCommitMethods:
    """Mixed into ``CatalogActor`` (through
    :class:`~raydelta.actors.catalog.unity.UnityCatalogMethods`)."""

    _lock: Any
    _store: RatifiedCommitStore
    _auth: Authorizer
    _settings: CatalogSettings
    _ratifier: GroupRatifier
    _publisher: Publisher

    if TYPE_CHECKING:  # the actor's

        def _table(self, name: str) -> ManagedTableCoordinator: ...

        def _who(self, token: str | None) -> str: ...

        def _table_info(self, full_name: str, entry: TableEntry) -> dict[str, Any]: ...

        def _require_publish_capacity(self, table_id: str, name: str) -> None: ...

    _uc_names: dict[str, str] | None = None
    """Table id -> name, remembered (checked against the store on every use)."""

    def _entry_by_id(self, table_id: str) -> TableEntry | None:
        if self._uc_names is None:
            self._uc_names = {}
        name = self._uc_names.get(table_id)
        if name is not None:
            entry: TableEntry | None = self._store.lookup(name)
            if entry is not None and entry.table_id == table_id:
                return entry
        for entry in self._store.list_tables():
            self._uc_names[entry.table_id] = entry.name
        name = self._uc_names.get(table_id)
        found = None if name is None else self._store.lookup(name)
        return found if found is not None and found.table_id == table_id else None

    def _uc_table(self, token: str | None, table_id: str, table_uri: str) -> tuple[str, TableEntry]:
        principal = self._who(token)
        entry = self._entry_by_id(table_id)
        if entry is None:
            raise TableNotFoundError(f"no table with id {table_id!r}")
        if not same_location(entry.location, table_uri):
            raise InvalidArgumentError(
                f"table {table_id} lives at {entry.location}, not at {table_uri}"
            )
        return principal, entry

    def _uc_named(self, token: str | None, full_name: str) -> tuple[str, TableEntry]:
        principal = self._who(token)
        entry: TableEntry | None = self._store.lookup(full_name)
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

    def uc_get_commits(
        self,
        token: str | None,
        table_id: str,
        table_uri: str,
        start_version: int,
        end_version: int | None,
    ) -> dict[str, Any]:
        """Legacy API: unbackfilled commits in ``[start, end]`` and the latest version."""
        with self._lock:
            principal, entry = self._uc_table(token, table_id, table_uri)
            self._managed_only(entry)
            self._auth.require(principal, entry.name, [Privilege.READ])
        commits, latest = self._unbackfilled(entry, start_version, end_version)
        return {"commits": commits, "latest_table_version": latest}

    def _unbackfilled(
        self, entry: TableEntry, start_version: int | None, end_version: int | None
    ) -> tuple[list[dict[str, Any]], int]:
        """The held (unpublished) commits in the range, described as Unity Catalog
        does, and the latest version. An inline commit (raydelta's own clients)
        is given a staged file first (:meth:`_stage_inline`)."""
        with self._lock:
            self._ratifier.settle()
            coordinator = self._table(entry.name)
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
                {
                    "version": commit.version,
                    "timestamp": commit.timestamp,
                    "file_name": name.rsplit("/", 1)[-1],
                    "file_size": size,
                    "file_modification_timestamp": modified,
                }
            )
        return commits, latest

    def _stage_inline(self, coordinator: ManagedTableCoordinator, commit: RatifiedCommit) -> str:
        """A staged file holding inline commit ``commit``, with exactly the bytes
        ``<v>.json`` gets (the publisher's pending bytes, else the published file,
        else what recovery publishes), so a Unity Catalog client that backfills
        from it agrees with the publisher. Named from the table id and version
        (put-if-absent: idempotent); ``_delta_log``-relative name."""
        table_id = coordinator.table_id
        data = self._publisher.pending_data(table_id, commit.version)
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

    def uc_load_table(self, token: str | None, full_name: str) -> dict[str, Any]:
        """Delta REST API ``loadTable``: the table's description (``described``,
        as :meth:`uc_get_table` gives it), its etag, its unbackfilled commits
        newest first and its latest version (READ)."""
        with self._lock:
            principal, entry = self._uc_named(token, full_name)
            self._auth.require(principal, full_name, [Privilege.READ])
        return self._loaded(full_name, entry)

    def _loaded(self, full_name: str, entry: TableEntry) -> dict[str, Any]:
        commits: list[dict[str, Any]] = []
        latest = None
        if entry.catalog_managed:
            commits, latest = self._unbackfilled(entry, None, None)
        with self._lock:
            described = self._table_info(full_name, entry)
            etag = self.uc_etag(entry)
        return {
            "described": described,
            "etag": etag,
            "commits": sorted(commits, key=lambda c: -int(c["version"])),
            "latest_table_version": latest,
        }

    # --- committing --------------------------------------------------------------------

    def uc_commit(
        self,
        token: str | None,
        table_id: str,
        table_uri: str,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> dict[str, Any]:
        """Legacy API: ratify one commit; ``commit_info`` None only reports a
        backfill (checked; nothing else to do: the catalog publishes itself)."""
        with self._lock:
            principal, entry = self._uc_table(token, table_id, table_uri)
            ticket = self._uc_commit_entry(principal, entry, commit_info, latest_backfilled_version)
        if ticket is not None:
            self._ratifier.wait(ticket)  # durable before the reply
        return {}

    def uc_update_table(
        self,
        token: str | None,
        full_name: str,
        *,
        table_uuid: str | None,
        etag: str | None,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> dict[str, Any]:
        """Delta REST API ``updateTable``: check the requirements, then ratify the
        ``add-commit`` (if any) as :meth:`uc_commit` does; returns what
        :meth:`uc_load_table` returns, after the commit."""
        with self._lock:
            principal, entry = self._uc_named(token, full_name)
            if table_uuid is not None and table_uuid != entry.table_id:
                raise UpdateRequirementConflictError(
                    f"assert-table-uuid failed for {full_name}: expected {table_uuid}, "
                    f"the table is {entry.table_id}"
                )
            if etag is not None and etag != self.uc_etag(entry):
                raise UpdateRequirementConflictError(
                    f"assert-etag failed for {full_name}: the table changed since etag {etag}"
                )
            ticket = self._uc_commit_entry(principal, entry, commit_info, latest_backfilled_version)
        if ticket is not None:
            self._ratifier.wait(ticket)
        # the answer describes the table after the commit, in the same call (a
        # principal holding WRITE but not READ is still told what it committed to)
        return self._loaded(full_name, entry)

    def uc_etag(self, entry: TableEntry) -> str:
        """The table's etag: changes with every ratified version."""
        if not entry.catalog_managed:
            return f"{entry.table_id}:external"
        self._ratifier.settle()
        return f"{entry.table_id}:{self._table(entry.name).version}"

    def _uc_commit_entry(
        self,
        principal: str,
        entry: TableEntry,
        commit_info: Mapping[str, Any] | None,
        latest_backfilled_version: int | None,
    ) -> Any:
        """Under the lock: judge and number one commit; the ratifier ticket to wait
        for (None when nothing new was ratified)."""
        self._managed_only(entry)
        coordinator = self._table(entry.name)
        self._ratifier.settle()
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
            if self._is_replay(coordinator, version, path, data, txn_id):
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
        self._require_publish_capacity(coordinator.table_id, entry.name)
        won = coordinator.find_committed(txn_id)
        if won is not None:
            raise CommitVersionConflictError(
                f"the commit with txnId {txn_id} is already version {won} of {entry.name!r}",
                winning_version=latest,
            )
        coordinator.ratify_exact(version, path, actions, txn_id)
        return self._ratifier.last

    def _is_replay(
        self,
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


__all__ = [
    "CommitVersionConflictError",
    "UnityCommitMethods",
    "UpdateRequirementConflictError",
    "normalize_location",
    "same_location",
    "staged_commit_of",
]
