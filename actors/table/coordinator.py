"""The commit coordinator: one serial history for one table, without Ray.

:class:`CommitCoordinator` is the brain of a ``TableActor``; it is plain
Python so it can be tested and reasoned about on its own. The actor wraps it
and adds naming, restarts and event publication.

Invariants:
- The coordinator's state is a fold of the log (event sourcing): everything
  it holds is rebuilt by :meth:`CommitCoordinator.reload` from checkpoint +
  commits, so losing the process loses nothing that was acknowledged.
- A commit is acknowledged only after its ``put_if_absent`` succeeded.
- Exactly once: every commit carries ``commitInfo.txnId``; a request whose
  ``txn_id`` is already in the log (found in memory, or in the recent log
  after a restart) gets the version it already won, and nothing is written.
- A request that does not logically conflict with the winners it did not
  see is rebased (version, in-commit timestamp, row ids) and written; it is
  never sent back for a client-side retry. One that does conflict gets a
  :class:`CommitConflict` naming delta-spark's exception.
- Another engine may write the table directly: a lost ``put_if_absent``
  race makes the coordinator read the new winners from the log (by name, no
  listing), check them like any other winner, and try the next version.
- Group commit (:meth:`CommitCoordinator.commit_many`) gives each request
  the reply :meth:`CommitCoordinator.commit` would give it in arrival order;
  only the writing is shared (one ``put_if_absent_many``), and a batch not
  written whole is undone in memory and committed again one by one.
- Committing needs no file listing of the table: conflict checks use the
  winners' actions and the request's read set, so the cost of a commit does
  not grow with the number of files. The file tables are folded lazily:
  when a snapshot is asked for, off the commit path once
  ``PENDING_FOLD_COMMITS`` commits wait (:meth:`CommitCoordinator.fold_work`),
  and by a commit itself past ``PENDING_MAX_COMMITS``.
- Storage is reached only through the :class:`~raydelta.actors.table.committer.Committer`
  it is given: put-if-absent of ``<v>.json`` by default
  (:class:`~raydelta.actors.table.committer.FilesystemCommitter`), or the
  catalog's ratification for a catalog-managed table
  (:mod:`raydelta.actors.catalog.tables`); the commit rules stay here and
  no kind of table needs a subclass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from itertools import islice
from typing import Any

from raydelta.actors.faults import crash_point
from raydelta.actors.table.committer import Committer, FilesystemCommitter
from raydelta.actors.table.history import (
    DEFAULT_WINDOW,
    CommittedVersion,
    PendingFold,
    TableHistory,
    commit_info_of,
    from_log,
)
from raydelta.protocol.actions import (
    Action,
    CommitInfo,
    Metadata,
    Protocol,
)
from raydelta.protocol.commit_rules import validate_commit
from raydelta.protocol.commit_timestamps import with_ict_enablement
from raydelta.protocol.conflicts import check_conflicts
from raydelta.protocol.errors import (
    CatalogManagedTableError,
    DeltaConcurrentModificationException,
    FileAlreadyExistsError,
    RaydeltaError,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionNotFoundError,
)
from raydelta.protocol.events import (
    CommitCommitted,
    CommitConflict,
    CommitPublished,
    CommitRejected,
    CommitReply,
    CommitRequest,
)
from raydelta.protocol.file_names import commit_name
from raydelta.protocol.rebase import rebase
from raydelta.protocol.reconciliation import TableHead, TableState
from raydelta.protocol.row_tracking import (
    ROW_TRACKING_DOMAIN,
    high_water_mark_of,
    with_row_tracking_preserved,
)
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.winning_commits import WinningCommit
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import Snapshot


class CommitCoordinator:
    """Serial committer and in-memory state of one table (see module doc)."""

    def __init__(
        self,
        table_uri: str,
        *,
        storage_options: dict[str, Any] | None = None,
        window: int = DEFAULT_WINDOW,
        store: LogStore | None = None,
        committer: Committer | None = None,
    ) -> None:
        self.table_uri = table_uri
        if committer is None:
            committer = FilesystemCommitter(
                table_uri, store or log_store_for(table_uri, storage_options)
            )
        self.committer = committer
        self.store = committer.store
        # The root as log paths are compared against it (file_actions.canonical_path).
        self._root_key = self.store.table_root_key
        self.window_size = window
        self.history = TableHistory(window)
        self._config_cache: TableConfiguration | None = None
        self._older_configs: dict[tuple[int, int], TableConfiguration] = {}
        self.reload()

    # --- state ------------------------------------------------------------------

    @property
    def commits_catalog_managed(self) -> bool:
        """Whether this coordinator may commit to a ``catalogManaged`` table. A
        filesystem coordinator (the ``TableActor``'s) may not: such a table's
        commits go through its catalog (CATALOG_MANAGED.md, "Writer Requirements"),
        and so does making a table catalog-managed."""
        return self.committer.catalog_managed

    @property
    def version(self) -> int:
        """Latest version known (-1 when the table does not exist yet)."""
        return self.history.head.version

    @property
    def exists(self) -> bool:
        return self.history.head.version >= 0

    @property
    def table_configuration(self) -> TableConfiguration:
        """The validated protocol + metadata at :attr:`version` (cached per pair)."""
        protocol, metadata = self.history.head.protocol, self.history.head.metadata
        if protocol is None or metadata is None:
            raise TableNotFoundError(f"no Delta table at {self.table_uri}")
        cached = self._config_cache
        if cached is None or cached.protocol is not protocol or cached.metadata is not metadata:
            cached = self._config_cache = TableConfiguration(protocol, metadata)
        return cached

    def reload(self) -> None:
        """Rebuild everything from the log (start, restart, or after corruption)."""
        crash_point("reload")
        try:
            snapshot = self.committer.load_snapshot()
        except TableNotFoundError:
            self.history.reset(
                TableState(table_root=self._root_key), timestamp=self.history.last_timestamp
            )
            return
        self.history.reset(snapshot.state, timestamp=snapshot.timestamp)
        self.history.last_ict = snapshot.timestamp if self._ict_enabled() else None
        self._load_window(snapshot.version)

    def _load_window(self, latest: int) -> None:
        """Remember the last ``window`` commits that are still readable."""
        first = max(0, latest - self.window_size + 1)
        for version, actions in self.committer.recent_commits(first, latest):
            self.history.remember(version, actions)
            if version != latest:  # only the latest version's protocol/metadata is known here
                self.history.forget_configuration_of_last()

    def fold_work(self) -> PendingFold | None:
        """The pending commits to fold, once there are
        :data:`~raydelta.actors.table.history.PENDING_FOLD_COMMITS` of them; hand
        the result of its ``run`` to :meth:`install_fold` (both calls under the
        same lock as commits)."""
        return self.history.fold_work()

    def install_fold(self, work: PendingFold, folded: TableState) -> bool:
        """Make ``folded`` the file state unless the state moved on another way
        since ``work`` was taken (:meth:`TableHistory.install_fold`)."""
        return self.history.install_fold(work, folded)

    def state(self) -> TableState:
        """The full reconciled state at :attr:`version` (folds pending commits)."""
        return self.history.state()

    def head(self) -> TableHead:
        """The non-file part of the latest state."""
        return self.history.head.head()

    def snapshot(self) -> Snapshot:
        state = self.state()
        return Snapshot(self.table_uri, state, None, self.history.last_timestamp)

    def tail(self, since_version: int) -> list[tuple[int, list[Action]]] | None:
        """Commits after ``since_version`` from memory, or None if the window
        no longer reaches back that far (the caller then reloads)."""
        return self.history.tail(since_version)

    # --- catching up with other writers ----------------------------------------

    def catch_up(self) -> int:
        """Apply versions others made durable after :attr:`version` (other
        engines, another incarnation of a catalog); returns how many. Reloads
        when the committer knows of later versions it cannot hand over one by
        one (a catalog's commits published and no longer held)."""
        count = 0
        for version, actions in self.committer.newer_commits(self.version):
            if version != self.version + 1:
                break
            self.history.apply(version, actions)
            count += 1
        latest = self.committer.latest_version()
        if latest is not None and latest > self.version:
            before = self.version
            self.reload()
            count += max(0, self.version - before)
        return count

    def winners_since(self, read_version: int) -> list[CommittedVersion]:
        """The versions committed after ``read_version`` (the window, else the log)."""
        if read_version >= self.version:
            return []
        if self.history.window and self.history.window[0].version <= read_version + 1:
            first = self.history.entry(read_version + 1)
            if first is not None:
                start = first.version - self.history.window[0].version
                if self.history.window[start] is first:
                    return list(islice(self.history.window, start, None))
            return [c for c in self.history.window if c.version > read_version]
        # Older than the window: read the missing range from the log.
        needed = range(read_version + 1, self.version + 1)
        try:
            commits = self.committer.read_commits(needed)
        except FileNotFoundError as exc:
            raise VersionNotFoundError(
                f"read version {read_version} is older than the retained log of {self.table_uri}"
            ) from exc
        return [from_log(v, actions) for v, actions in zip(needed, commits, strict=True)]

    # --- committing ---------------------------------------------------------------

    def _ict_enabled(self) -> bool:
        return self.exists and self.table_configuration.in_commit_timestamps_enabled

    def create(self, request: CommitRequest) -> CommitReply:
        """Write version 0. Fails with :class:`TableAlreadyExistsError` if it exists."""
        if request.txn_id in self.history.txn_versions:
            return self._already(request)
        self.catch_up()
        if self.exists:
            found = self.history.find_txn(request.txn_id)
            if found is not None:
                return self._already(request, found)
            raise TableAlreadyExistsError(f"a Delta table already exists at {self.table_uri}")
        try:
            after = validate_commit(
                list(request.actions), is_create=True, final=False, table_root=self.table_uri
            )
        except RaydeltaError as error:
            return CommitRejected.from_exception(request.txn_id, error)
        if after.is_catalog_managed and not self.commits_catalog_managed:
            return CommitRejected.from_exception(
                request.txn_id, self._managed_refusal("create a catalog-managed table")
            )
        now = int(time.time() * 1000)
        actions = rebase(
            [self._commit_info(request, 0, now), *request.actions],
            [],
            new_version=0,
            state_high_water_mark=None,
            in_commit_timestamps_enabled=after.in_commit_timestamps_enabled,
            row_tracking_supported=after.is_feature_supported("rowTracking"),
            now_ms=now,
        )
        try:
            self.committer.put_commit(0, actions, configuration=None)
        except FileAlreadyExistsError:
            self.catch_up()
            raise TableAlreadyExistsError(
                f"a Delta table already exists at {self.table_uri}"
            ) from None
        self.history.files_base = TableState(table_root=self._root_key)
        entry = self.history.apply(0, actions)
        return CommitCommitted(
            txn_id=request.txn_id,
            version=0,
            in_commit_timestamp=entry.in_commit_timestamp,
            attempts=1,
            rebased_over=(),
        )

    def _already(self, request: CommitRequest, version: int | None = None) -> CommitCommitted:
        won = version if version is not None else self.history.txn_versions[request.txn_id]
        return CommitCommitted(
            txn_id=request.txn_id, version=won, in_commit_timestamp=None, attempts=0
        )

    def _configuration_of(self, protocol: Protocol, metadata: Metadata) -> TableConfiguration:
        """A TableConfiguration per (protocol, metadata) pair, built once."""
        latest = self.table_configuration
        if latest.protocol is protocol and latest.metadata is metadata:
            return latest
        key = (id(protocol), id(metadata))
        cached = self._older_configs.get(key)
        if cached is None or cached.protocol is not protocol or cached.metadata is not metadata:
            cached = TableConfiguration(protocol, metadata)
            if len(self._older_configs) > 16:
                self._older_configs.clear()
            self._older_configs[key] = cached
        return cached

    def _read_configuration(self, read_version: int) -> TableConfiguration:
        """The table's protocol and metadata as of ``read_version``."""
        if read_version == self.version:
            return self.table_configuration
        entry = self.history.entry(read_version)
        if entry is not None and entry.protocol and entry.metadata:
            return self._configuration_of(entry.protocol, entry.metadata)
        return self.committer.load_snapshot(read_version).table_configuration

    def _high_water_mark(self) -> int | None:
        domain = self.history.head.domain_actions.get(ROW_TRACKING_DOMAIN)
        if domain is None or domain.removed:
            return None
        return high_water_mark_of(domain)

    def commit(self, request: CommitRequest) -> CommitReply:
        """Check, rebase and write one commit; see the module invariants."""
        return self._judge(request, None)

    def commit_inline(self, request: CommitRequest) -> CommitReply:
        """:meth:`commit`, but a conflict or an invalid commit is raised (the
        delta-spark exception) for the caller to answer in its own words."""
        return self._commit(request)

    def txn_version(self, txn_id: str) -> int | None:
        """The version ``txn_id`` won, if the coordinator remembers it."""
        return self.history.txn_versions.get(txn_id)

    @property
    def last_in_commit_timestamp(self) -> int | None:
        """The latest version's in-commit timestamp (None: not enabled)."""
        return self.history.last_ict

    def apply_committed(self, version: int, actions: Sequence[Action]) -> CommittedVersion:
        """Apply ``version`` that the committer made durable outside
        :meth:`commit` (a staged file ratified exactly as it is); it must be
        the next version."""
        if version != self.version + 1:
            raise VersionNotFoundError(
                f"version {version} cannot follow {self.version} of {self.table_uri}"
            )
        return self.history.apply(version, actions)

    def _judge(
        self, request: CommitRequest, staged: list[tuple[int, list[Action]]] | None
    ) -> CommitReply:
        """:meth:`commit`; with ``staged`` (:meth:`commit_many`) nothing is
        written: the commit is applied in memory and appended to ``staged``."""
        try:
            return self._commit(request, staged)
        except DeltaConcurrentModificationException as conflict:
            return CommitConflict.from_exception(request.txn_id, conflict)
        except (TableNotFoundError, VersionNotFoundError):
            raise
        except RaydeltaError as error:
            return CommitRejected.from_exception(request.txn_id, error)

    @property
    def batches_writes(self) -> bool:
        """Whether :meth:`commit_many` writes a batch at once (the log store's own
        put-if-absent; a catalog's committer ratifies one commit at a time)."""
        return self.committer.batches_writes

    def commit_many(self, requests: Sequence[CommitRequest]) -> list[CommitReply | Exception]:
        """Group commit: :meth:`commit` of each request in order, as consecutive
        versions, with the commit files written together at the end
        (:meth:`LogStore.put_if_absent_many`: contents fsynced concurrently, then
        linked strictly in version order). Each request gets exactly the reply
        (or exception) :meth:`commit` would give it in that order; a caller must
        answer none of them before this returns, which is when every committed
        one is durable. If the batch cannot be written whole (another engine won
        a version, an I/O error), the state goes back to before the batch,
        catches up with the log (the versions this batch did write included)
        and every request is committed again one by one: those already written
        are found by their ``txnId`` (exactly once)."""
        if len(requests) < 2 or not self.batches_writes:
            return [self._reply_or_error(r, None) for r in requests]
        saved = self.history.save()
        staged: list[tuple[int, list[Action]]] = []
        results = [self._reply_or_error(r, staged) for r in requests]
        if not staged:
            return results
        crash_point("before_put")
        try:
            created = self.committer.put_commits(staged)
        except Exception:  # the serial path below meets it again, per request
            created = -1
        if created == len(staged):
            crash_point("after_put")
            return results
        self.history.restore(saved)
        self.catch_up()
        return [self._reply_or_error(r, None) for r in requests]

    def _reply_or_error(
        self, request: CommitRequest, staged: list[tuple[int, list[Action]]] | None
    ) -> CommitReply | Exception:
        try:
            if staged is None:
                return self.commit(request)
            return self._judge(request, staged)
        except Exception as error:  # handed to the request's own caller
            return error

    def _commit(
        self, request: CommitRequest, staged: list[tuple[int, list[Action]]] | None = None
    ) -> CommitReply:
        if request.txn_id in self.history.txn_versions:
            return self._already(request)
        read_version = self._read_version_of(request)
        read_config = self._read_configuration(read_version)
        # The request must be valid on the table it read. A winner that makes it
        # invalid (a protocol or metadata change) is a conflict, and check_conflicts
        # reports it as one before the request is judged against the latest table.
        after_read = validate_commit(
            list(request.actions),
            is_create=False,
            table_configuration=read_config,
            final=False,
            table_root=self.table_uri,
        )
        attempts = 0
        while True:
            attempts += 1
            if not self.commits_catalog_managed and self.table_configuration.is_catalog_managed:
                raise self._managed_refusal("commit to a catalog-managed table")
            winners = self.winners_since(read_version)
            for winner in winners:
                if winner.txn_id == request.txn_id:
                    return self._already(request, winner.version)
            winning = [w.winning_commit for w in winners]
            check_conflicts(
                request.read_set,
                list(request.actions),
                winning,
                read_configuration=read_config,
                table_root=self._root_key,
            )
            latest = self.table_configuration
            after = (
                validate_commit(
                    list(request.actions),
                    is_create=False,
                    table_configuration=latest,
                    final=False,
                    table_root=self.table_uri,
                )
                if latest is not read_config
                else after_read
            )
            if not self.commits_catalog_managed and after.is_catalog_managed:
                raise self._managed_refusal("make a table catalog-managed")
            version = self.version + 1
            actions = self._rebased(request, winning, version, latest, after)
            if staged is not None:  # commit_many writes it with the batch
                entry = self.history.apply(version, actions)
                staged.append((version, actions))
                return CommitCommitted(
                    txn_id=request.txn_id,
                    version=version,
                    in_commit_timestamp=entry.in_commit_timestamp,
                    attempts=attempts,
                    rebased_over=tuple(w.version for w in winners),
                )
            crash_point("before_put")
            try:
                self.committer.put_commit(version, actions, configuration=latest)
            except FileAlreadyExistsError:
                if self.catch_up() == 0:
                    raise RaydeltaError(
                        f"{commit_name(version)} exists but could not be read"
                    ) from None
                continue
            crash_point("after_put")
            entry = self.history.apply(version, actions)
            return CommitCommitted(
                txn_id=request.txn_id,
                version=version,
                in_commit_timestamp=entry.in_commit_timestamp,
                attempts=attempts,
                rebased_over=tuple(w.version for w in winners),
            )

    def _read_version_of(self, request: CommitRequest) -> int:
        """The version ``request`` read (the latest for a blind append), once the
        coordinator has caught up with it; raises when there is no such version."""
        if not self.exists:
            self.catch_up()
            if not self.exists:
                raise TableNotFoundError(f"no Delta table at {self.table_uri}")
        read_version = request.read_set.read_version
        if read_version is None:  # a blind append, judged against the latest table
            read_version = self.version
        if read_version > self.version:
            self.catch_up()
            if read_version > self.version:
                raise VersionNotFoundError(
                    f"read version {read_version} is newer than the table's {self.version}"
                )
        return read_version

    def _rebased(
        self,
        request: CommitRequest,
        winning: Sequence[WinningCommit],
        version: int,
        latest: TableConfiguration,
        after: TableConfiguration,
    ) -> list[Action]:
        """``request``'s actions as version ``version``: its provenance, rebased
        over ``winning`` (in-commit timestamp, row ids), checked again where
        rebase stamped them. ``latest``/``after``: the table before and after."""
        now = int(time.time() * 1000)
        provenance = self._commit_info(request, version, now)
        if after.row_tracking_enabled:
            provenance = with_row_tracking_preserved(provenance, request.actions)
        own: list[Action] = [a for a in request.actions if not isinstance(a, CommitInfo)]
        if after.in_commit_timestamps_enabled and not latest.in_commit_timestamps_enabled:
            own = with_ict_enablement(own, version)
        history = self.history
        actions = rebase(
            [provenance, *own],
            winning,
            new_version=version,
            state_high_water_mark=self._high_water_mark(),
            in_commit_timestamps_enabled=after.in_commit_timestamps_enabled,
            row_tracking_supported=after.is_feature_supported("rowTracking"),
            now_ms=now,
            previous_commit_timestamp=history.last_ict
            if history.last_ict is not None
            else history.last_timestamp,
        )
        if after.in_commit_timestamps_enabled or after.is_feature_supported("rowTracking"):
            # what rebase stamped (commitInfo first with its ICT, row ids); the
            # file values were checked above against the same configuration
            validate_commit(
                actions, is_create=False, table_configuration=latest, check_values=False
            )
        return actions

    def _managed_refusal(self, what: str) -> CatalogManagedTableError:
        return CatalogManagedTableError(
            f"cannot {what} at {self.table_uri} by path: a catalog-managed table's commits "
            "go through its catalog (raydelta.Catalog: open_table, create_table, upgrade_table)",
            self.table_uri,
        )

    def _commit_info(self, request: CommitRequest, version: int, now_ms: int) -> CommitInfo:
        """Provenance of the commit; ``rebase`` adds the in-commit timestamp."""
        own = commit_info_of(request.actions)
        body: dict[str, Any] = dict(own.to_json_dict()) if own else {}
        body.pop("inCommitTimestamp", None)
        body.update(
            {
                "timestamp": now_ms,
                "operation": request.operation,
                "operationParameters": request.operation_parameters,
                "isolationLevel": request.read_set.isolation_level.value,
                "isBlindAppend": request.is_blind_append,
                "txnId": request.txn_id,
                "engineInfo": request.engine_info or "raydelta",
            }
        )
        if version > 0 and request.read_set.read_version is not None:
            body["readVersion"] = request.read_set.read_version
        return CommitInfo.model_validate(body)

    def published_event(self, version: int) -> CommitPublished:
        """The typed event subscribers get for ``version`` (must be in the window)."""
        for entry in reversed(self.history.window):
            if entry.version == version:
                return CommitPublished.from_actions(
                    self.table_uri, version, entry.timestamp, entry.actions
                )
        raise VersionNotFoundError(f"version {version} is not in the coordinator's window")
