"""``CatalogActor``: the managing catalog of catalog-managed tables (CATALOG_MANAGED.md).

One named, detached, restartable Ray actor per catalog (``catalog:<name>``
in raydelta's namespace). It maps table names to locations (name resolution
says whether a table is catalog-managed: the spec's table discovery) and
owns the commits of the catalog-managed tables it holds: each table's
:class:`~raydelta.actors.catalog.tables.ManagedTableCoordinator` checks
conflicts, rebases and ratifies into the durable
:class:`~raydelta.storage.catalog.ratified_store.RatifiedCommitStore`; the
:class:`~raydelta.actors.catalog.publisher.Publisher` thread copies ratified
commits to ``_delta_log/<v>.json``.

Invariants:
- Calls run on several threads (a threaded actor); everything that reads or
  changes a table's state runs under one lock. A commit is checked, rebased
  and numbered under the lock, then made durable outside it by the group
  commit (:mod:`raydelta.actors.catalog.group_commit`): commits that arrive
  together share one store transaction, and each client is answered only
  after the transaction holding its commit is durable. Reads wait for what
  was numbered before them to be durable (:meth:`GroupRatifier.settle`), so
  nobody sees a version the store may not have.
- ``max_restarts=-1``, ``max_task_retries=-1``: a dead process is restarted
  and the calls in flight are retried; everything is rebuilt from the store
  and the tables' storage (:meth:`CatalogActor._recover` republishes what was
  ratified and not yet published), and a retried commit is answered by its
  ``txnId`` with its original version: exactly once.
- Creation (CATALOG_MANAGED.md, "Creating and Dropping"): a unique location
  (given, or ``<root>/<table id>``) → version 0 ratified → name registered,
  in one call, idempotent for the same ``table_id``/``txn_id`` (a retried call
  finishes the work instead of making a second table).
- Upgrading a filesystem table: the commit that adds ``catalogManaged`` is
  written with put-if-absent ("Option 3": ratified and published in one
  step, so a concurrent filesystem writer either precedes it or sees it),
  then the catalog records it as its first version and registers the name.
  From then on our own ``TableActor`` refuses to commit to the table.
- Every call is authenticated (:mod:`raydelta.actors.catalog.auth`);
  creating or upgrading a table needs ``CREATE_TABLE`` (and Unity
  Catalog's ``USE_*`` for a three-part name) and a location that overlaps
  no other table's (:mod:`raydelta.actors.catalog.locations`); a commit
  is judged by its content (:func:`~raydelta.protocol.privileges.required_privileges`)
  before anything is written.
- Backpressure: when a table's ratified-but-unpublished backlog reaches
  ``max_unpublished`` a commit is refused with the retryable
  :class:`~raydelta.protocol.errors.PublishBacklogError` naming the setting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import ray
from pydantic import BaseModel, ConfigDict, Field

from raydelta.actors.catalog.auth import ALL_TABLES, Authorizer
from raydelta.actors.catalog.group_commit import GroupRatifier, Ticket
from raydelta.actors.catalog.publisher import Publisher
from raydelta.actors.catalog.tables import ManagedTableCoordinator
from raydelta.actors.catalog.unity import UnityCatalogMethods, ensure_staged_commits_dir
from raydelta.actors.faults import crash_point
from raydelta.actors.table.committer import FilesystemCommitter
from raydelta.actors.table.coordinator import CommitCoordinator
from raydelta.protocol.actions import Action, Metadata, Protocol, serialize_actions
from raydelta.protocol.catalog_managed import RatifiedCommit, RatifiedCommits, requires_catalog
from raydelta.protocol.errors import (
    CatalogManagedTableError,
    InvalidArgumentError,
    PublishBacklogError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raydelta.protocol.events import CommitCommitted, CommitReply, CommitRequest, ReadSet
from raydelta.protocol.file_names import STAGED_COMMITS_DIR, LogFileKind, commit_name
from raydelta.protocol.privileges import Privilege, required_privileges
from raydelta.protocol.reconciliation import TableHead
from raydelta.protocol.securables import Securable, SecurableType, parse_securable_type
from raydelta.protocol.table_features import (
    CATALOG_MANAGED,
    IN_COMMIT_TIMESTAMP,
    VACUUM_PROTOCOL_CHECK,
    upgrade_protocol,
)
from raydelta.protocol.table_properties import ENABLE_IN_COMMIT_TIMESTAMPS
from raydelta.storage.catalog.credential_vending import (
    DEFAULT_LIFETIME_S,
    MAX_LIFETIME_S,
    MIN_LIFETIME_S,
)
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore, TableEntry
from raydelta.storage.log.store import LogStore, log_store_for

logger = logging.getLogger(__name__)

UPGRADE_OPERATION = "UPGRADE TO CATALOG-MANAGED"


def catalog_actor_name(name: str) -> str:
    return f"catalog:{name}"


class CatalogSettings(BaseModel):
    """How a catalog runs. ``root``: where new tables are placed (and the
    principals file, when authorization is on); ``max_unpublished``: the
    per-table backlog of ratified, unpublished commits past which commits are
    refused (retryable); ``credential_*`` and ``sts_endpoint_url``: how
    temporary S3 credentials are vended
    (:mod:`raydelta.storage.catalog.credential_vending`)."""

    model_config = ConfigDict(frozen=True)

    root: str
    authorization: bool = False
    max_unpublished: int = Field(default=100_000, ge=1)
    staged_gc_grace_s: float = Field(default=600.0, ge=0)
    storage_options: dict[str, Any] | None = None
    credential_role_arn: str | None = None
    """The role S3 credentials are vended from (STS ``AssumeRole`` with a
    session policy per location); None: S3 credentials are refused."""
    credential_lifetime_s: int = Field(
        default=DEFAULT_LIFETIME_S, ge=MIN_LIFETIME_S, le=MAX_LIFETIME_S
    )
    sts_endpoint_url: str | None = None
    credential_external_id: str | None = None


def _upgrade_coordinator(
    location: str, storage_options: dict[str, Any] | None
) -> CommitCoordinator:
    """A filesystem coordinator allowed to write the one commit that makes the
    table catalog-managed (put-if-absent, rebased over filesystem writers)."""
    store = log_store_for(location, storage_options)
    return CommitCoordinator(
        location, committer=FilesystemCommitter(location, store, catalog_managed=True)
    )


def managed_protocol(protocol: Protocol) -> Protocol:
    """``protocol`` with ``catalogManaged`` (reader and writer), in-commit timestamps
    and ``vacuumProtocolCheck`` (reader and writer): the spec needs the first
    two; delta-spark (4.4.0) also requires the third of every catalog-managed
    table and refuses to operate on one without it."""
    return upgrade_protocol(
        protocol,
        reader_features=[CATALOG_MANAGED, VACUUM_PROTOCOL_CHECK],
        writer_features=[CATALOG_MANAGED, IN_COMMIT_TIMESTAMP, VACUUM_PROTOCOL_CHECK],
    )


COMMIT_ATTEMPTS = 3
"""A commit whose group transaction failed is judged again this many times
at most (its table reloaded from the store first)."""


@ray.remote(  # type: ignore[call-overload]  # the stubs lack max_concurrency
    num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=32
)
class CatalogActor(UnityCatalogMethods):
    """See the module docstring. Create through :class:`raydelta.Catalog`."""

    def __init__(self, store: RatifiedCommitStore, settings: CatalogSettings) -> None:
        self._lock = threading.RLock()
        self._store = store
        self._settings = settings
        self._auth = Authorizer.load(
            enabled=settings.authorization,
            root=settings.root,
            storage_options=settings.storage_options,
        )
        self._bootstrap_token = self._auth.bootstrap() if settings.authorization else None
        self._tables: dict[str, ManagedTableCoordinator] = {}
        self._log_stores: dict[str, LogStore] = {}
        """Each table's log store, for the publisher (kept after a drop)."""
        self._stale: set[str] = set()
        """Tables whose coordinator holds versions a failed transaction lost."""
        self._stale_lock = threading.Lock()
        self._publisher = Publisher(store.mark_published)
        self._ratifier = GroupRatifier(
            store, on_durable=self._on_durable, on_failure=self._mark_stale
        )
        crash_point("catalog_recover")
        self._recover()
        self._find_overlaps()
        if self._overlaps:
            logger.warning(
                "catalog %s: tables whose locations overlap (no credentials until an admin "
                "drops one): %s",
                settings.root,
                sorted(self._overlaps),
            )

    # --- plumbing ----------------------------------------------------------------------

    def ping(self) -> bool:
        return True

    def take_bootstrap_token(self) -> str | None:
        """The bootstrap principal's token, once (to the catalog's creator)."""
        with self._lock:
            token, self._bootstrap_token = self._bootstrap_token, None
            return token

    def _recover(self) -> None:
        """Republish what was ratified and not yet published (any crash)."""
        for entry in self._store.list_tables():
            if not entry.catalog_managed or not self._store.ratified(entry.table_id):
                continue
            self._coordinator(entry)  # loading it submits its held commits

    def _coordinator(self, entry: TableEntry) -> ManagedTableCoordinator:
        coordinator = self._tables.get(entry.table_id)
        if coordinator is None:
            coordinator = ManagedTableCoordinator(
                entry.table_id,
                entry.location,
                self._store,
                storage_options=self._settings.storage_options,
                ratifier=self._ratifier,
            )
            self._tables[entry.table_id] = coordinator
            self._log_stores[entry.table_id] = coordinator.store
            self._republish(coordinator)
        elif entry.table_id in self._stale:
            self._ratifier.settle()
            with self._stale_lock:
                self._stale.discard(entry.table_id)
            coordinator.reload()  # back to what the store holds
        return coordinator

    def _mark_stale(self, table_ids: set[str]) -> None:
        with self._stale_lock:
            self._stale |= table_ids

    def _republish(self, coordinator: ManagedTableCoordinator) -> None:
        for commit in self._store.ratified(coordinator.table_id):
            if commit.actions is not None:
                data = serialize_actions(list(commit.actions))
            else:
                data = coordinator.store.read(commit.staged_name or "")
            self._publisher.submit(coordinator.table_id, coordinator.store, commit.version, data)

    def _on_durable(self, ticket: Ticket) -> None:
        """A ratification is durable: hand it to the publisher (in order)."""
        table_id = ticket.ratification.table_id
        self._publisher.submit(
            table_id, self._log_stores[table_id], ticket.ratification.commit.version, ticket.data
        )

    def _entry(self, name: str) -> TableEntry:
        entry = self._store.lookup(name)
        if entry is None:
            raise TableNotFoundError(f"no table named {name!r} in the catalog")
        return entry

    def _table(self, name: str) -> ManagedTableCoordinator:
        entry = self._entry(name)
        if not entry.catalog_managed:
            raise CatalogManagedTableError(f"{name!r} is not catalog-managed", entry.location)
        return self._coordinator(entry)

    def _managed(self, name: str, token: str | None, *needed: Privilege) -> ManagedTableCoordinator:
        self._auth.require(self._auth.authenticate(token), name, needed)
        return self._table(name)

    # --- names -------------------------------------------------------------------------

    def resolve(self, name: str, token: str | None) -> TableEntry:
        """Name resolution: the location, and whether the table is catalog-managed."""
        with self._lock:
            self._auth.require(self._auth.authenticate(token), name, [Privilege.READ])
            return self._entry(name)

    def list_tables(self, token: str | None) -> list[TableEntry]:
        with self._lock:
            principal = self._auth.authenticate(token)
            return [
                e for e in self._store.list_tables() if self._auth.privileges(principal, e.name)
            ]

    def drop_table(self, name: str, token: str | None) -> TableEntry:
        """Soft delete: the name goes, the table's files stay."""
        with self._lock:
            self._auth.require(self._auth.authenticate(token), name, [Privilege.OWN])
            entry = self._store.drop_table(name)
            self._tables.pop(entry.table_id, None)
            self._auth.forget_table(name)
            self._find_overlaps()  # dropping one of two overlapping tables resolves both
            return entry

    def create_table(
        self,
        name: str,
        token: str | None,
        protocol: Protocol,
        metadata: Metadata,
        *,
        location: str | None,
        table_id: str,
        txn_id: str,
    ) -> TableEntry:
        """Create the catalog-managed table ``name`` (module doc: creation)."""
        with self._lock:
            principal = self._auth.authenticate(token)
            if not name or not isinstance(name, str):
                raise InvalidArgumentError(f"a table name must be a non-empty string, got {name!r}")
            existing = self._store.lookup(name)
            if existing is not None:
                if existing.table_id == table_id:
                    return existing  # a retried call that finished
                raise TableAlreadyExistsError(f"the catalog already has a table named {name!r}")
            self._require_creation(principal, name)
            where = location or f"{self._settings.root.rstrip('/')}/{table_id}"
            self._check_table_location(principal, where, managed=True, skip_id=table_id)
            entry = TableEntry(name=name, location=where, table_id=table_id)
            coordinator = self._coordinator(entry)
            if self._store.find_txn(table_id, txn_id) is None:
                if coordinator.exists or (
                    coordinator.store.log_exists() and coordinator.store.list_from(0)
                ):
                    self._tables.pop(table_id, None)
                    raise TableAlreadyExistsError(f"a Delta table already exists at {where}")
                request = CommitRequest(
                    txn_id=txn_id,
                    read_set=ReadSet(read_version=-1),
                    actions=(managed_protocol(protocol), _with_ict(metadata)),
                    operation="CREATE TABLE",
                    operation_parameters={"partitionBy": list(metadata.partition_columns)},
                    commit_time_ms=int(time.time() * 1000),
                )
                try:
                    coordinator.create(request).raise_if_conflict()
                    self._ratifier.wait(self._ratifier.last)  # durable before registered
                except BaseException:
                    self._tables.pop(table_id, None)
                    raise
            crash_point("catalog_before_register")
            registered = self._store.register_table(name, location=where, table_id=table_id)
            self._auth.grant_owner(principal, name)
            ensure_staged_commits_dir(where, self._settings.storage_options)
            return registered

    def upgrade_table(self, name: str, token: str | None, location: str, txn_id: str) -> TableEntry:
        """Make the filesystem table at ``location`` catalog-managed, as ``name``."""
        with self._lock:
            principal = self._auth.authenticate(token)
            if self._store.lookup(name) is not None:
                raise TableAlreadyExistsError(f"the catalog already has a table named {name!r}")
            self._require_creation(principal, name)
            self._check_table_location(principal, location, managed=True)
            filesystem = _upgrade_coordinator(location, self._settings.storage_options)
            if not filesystem.exists:
                raise TableNotFoundError(f"no Delta table at {location}")
            config = filesystem.table_configuration
            if requires_catalog(config.protocol):
                raise CatalogManagedTableError(
                    f"{location} is catalog-managed already: register it with its own catalog",
                    location,
                )
            table_id = config.metadata.id
            request = CommitRequest(
                txn_id=txn_id,
                read_set=ReadSet(read_version=filesystem.version),
                actions=(managed_protocol(config.protocol), _with_ict(config.metadata)),
                operation=UPGRADE_OPERATION,
                commit_time_ms=int(time.time() * 1000),
            )
            version = filesystem.commit(request).raise_if_conflict().version
            actions = filesystem.tail(version - 1) or []
            committed = next(a for v, a in actions if v == version)
            self._store.ratify(table_id, RatifiedCommit.inline(version, committed), txn_id=txn_id)
            self._store.mark_published(table_id, version)
            registered = self._store.register_table(name, location=location, table_id=table_id)
            self._auth.grant_owner(principal, name)
            ensure_staged_commits_dir(location, self._settings.storage_options)
            return registered

    # --- reads -------------------------------------------------------------------------

    def version(self, name: str, token: str | None) -> int:
        with self._lock:
            self._ratifier.settle()
            return self._managed(name, token, Privilege.READ).version

    def head(self, name: str, token: str | None) -> TableHead:
        with self._lock:
            self._ratifier.settle()
            return self._managed(name, token, Privilege.READ).head()

    def tail(
        self, name: str, token: str | None, since_version: int
    ) -> tuple[int, list[tuple[int, list[Action]]] | None]:
        with self._lock:
            self._ratifier.settle()
            coordinator = self._managed(name, token, Privilege.READ)
            return coordinator.version, coordinator.tail(since_version)

    def get_ratified_commits(
        self,
        name: str,
        token: str | None,
        start_version: int | None = None,
        end_version: int | None = None,
    ) -> RatifiedCommits:
        """The contiguous ratified commits still held in the range, and the latest version."""
        with self._lock:
            self._ratifier.settle()
            coordinator = self._managed(name, token, Privilege.READ)
            held, latest = coordinator.held_commits(start_version, end_version)
            return RatifiedCommits(commits=tuple(held), latest_version=latest)

    # --- commits -----------------------------------------------------------------------

    def commit(self, name: str, token: str | None, request: CommitRequest) -> CommitReply:
        """Judge, check, rebase and ratify one commit (module doc); a retry of a
        ratified ``txnId`` gets its original version. Answered once the
        commit (or, for a retry, the original) is durable."""
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                coordinator, reply = self._commit_locked(name, token, request)
                ticket = self._ratifier.last  # ours, or the newest one before a retry's answer
            try:
                self._ratifier.wait(ticket)
            except Exception:
                if attempt >= COMMIT_ATTEMPTS:
                    raise
                logger.warning("ratifying a commit to %r failed; judging it again", name)
                continue
            staged = request.staged_commit_path
            if staged is not None and isinstance(reply, CommitCommitted):
                with self._lock:
                    coordinator.forget_staged(staged, reply.version)
            return reply

    def _require_publish_capacity(self, table_id: str, name: str) -> None:
        """Refuse a new commit while ``max_unpublished`` ratified commits of the
        table wait for the publisher."""
        backlog = self._publisher.backlog(table_id)
        if backlog >= self._settings.max_unpublished:
            raise PublishBacklogError(
                f"{backlog} ratified commits of {name!r} are not yet published "
                f"(max_unpublished={self._settings.max_unpublished}); retry shortly",
                setting="max_unpublished",
                backlog=backlog,
            )

    def _commit_locked(
        self, name: str, token: str | None, request: CommitRequest
    ) -> tuple[ManagedTableCoordinator, CommitReply]:
        """The part of :meth:`commit` under the lock: judge and number it."""
        principal = self._auth.authenticate(token)
        coordinator = self._table(name)
        if coordinator.find_committed(request.txn_id) is not None:
            self._auth.require(principal, name, [Privilege.READ])
            return coordinator, coordinator.commit_proposal(request, ())
        self._require_publish_capacity(coordinator.table_id, name)
        actions = coordinator.proposed_actions(request)
        self._auth.require(principal, name, required_privileges(actions))
        proposal = coordinator.commit_proposal(
            request, actions, forget_staged=False, txn_checked=True
        )
        return coordinator, proposal

    # --- maintenance -------------------------------------------------------------------

    def maintenance_version(
        self, name: str, token: str | None, wait_s: float = 30.0
    ) -> tuple[int | None, int]:
        """What maintenance of ``name`` may cover (CATALOG_MANAGED.md,
        "Maintenance Operations": checkpoints, log compaction and metadata
        cleanup only for published versions; clients consult the catalog
        first). Publishing is given up to ``wait_s`` to reach the latest
        version; returns ``(max published version, latest ratified version)``.
        Needs WRITE: maintenance writes and deletes the table's files."""
        with self._lock:
            self._ratifier.settle()
            coordinator = self._managed(name, token, Privilege.WRITE)
            table_id, latest = coordinator.table_id, coordinator.version
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            published = self._store.published_version(table_id)
            if (published is not None and published >= latest) or time.monotonic() >= deadline:
                return published, latest
            time.sleep(0.002)

    # --- principals --------------------------------------------------------------------

    def create_principal(self, principal: str, token: str | None) -> str:
        with self._lock:
            self._auth.require(self._auth.authenticate(token), ALL_TABLES, [Privilege.OWN])
            return self._auth.issue_token(principal)

    def grant(
        self,
        principal: str,
        name: str,
        privileges: Sequence[Privilege],
        token: str | None,
        securable_type: str = SecurableType.TABLE,
    ) -> None:
        """Give ``principal`` ``privileges`` on the securable (a table by default);
        the caller needs OWN on it."""
        with self._lock:
            securable = _securable(securable_type, name)
            self._auth.require_on(self._auth.authenticate(token), securable, [Privilege.OWN])
            self._auth.grant_on(principal, securable, privileges)

    def revoke(
        self,
        principal: str,
        name: str,
        privileges: Sequence[Privilege],
        token: str | None,
        securable_type: str = SecurableType.TABLE,
    ) -> None:
        with self._lock:
            securable = _securable(securable_type, name)
            self._auth.require_on(self._auth.authenticate(token), securable, [Privilege.OWN])
            self._auth.revoke_on(principal, securable, privileges)

    # --- publishing ----------------------------------------------------------------------

    def publish_status(self, name: str) -> dict[str, Any]:
        with self._lock:
            entry = self._entry(name)
        return {
            "published_through": self._store.published_version(entry.table_id),
            "latest_version": self._store.latest_version(entry.table_id),
            "backlog": self._publisher.backlog(entry.table_id),
            "error": self._publisher.errors().get(entry.table_id),
        }

    def wait_published(self, name: str, version: int, timeout_s: float = 30.0) -> bool:
        """Block until ``<version>.json`` is published and verified (or time out)."""
        with self._lock:
            entry = self._entry(name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            published = self._store.published_version(entry.table_id)
            if published is not None and published >= version:
                return True
            time.sleep(0.002)
        return False

    def publish_lags_ms(self, clear: bool = False) -> list[float]:
        lags = self._publisher.lags_ms()
        if clear:
            self._publisher.clear_lags()
        return lags

    def group_commit_stats(self) -> dict[str, int]:
        """Store transactions written by the group commit, and the ratifications
        they held (their ratio is the mean group size)."""
        return {
            "transactions": self._ratifier.transactions,
            "ratified": self._ratifier.ratified,
        }

    def pause_publishing(self, paused: bool) -> None:
        self._publisher.pause(paused)

    def collect_staged_garbage(
        self, name: str, token: str | None, older_than_s: float | None = None
    ) -> list[str]:
        """Delete staged files no ratified commit names (older than the grace period)."""
        with self._lock:
            self._ratifier.settle()
            coordinator = self._managed(name, token, Privilege.OWN)
            grace = self._settings.staged_gc_grace_s if older_than_s is None else older_than_s
            return collect_staged_garbage(coordinator, grace)


def _securable(securable_type: str, name: str) -> Securable:
    kind = parse_securable_type(securable_type)
    if kind is SecurableType.TABLE:
        return Securable.table(name)
    if kind is SecurableType.METASTORE:
        return Securable.metastore()
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a {kind.value} needs a name, got {name!r}")
    return Securable(kind, name)


def _with_ict(metadata: Metadata) -> Metadata:
    """``metadata`` with in-commit timestamps enabled (a managed table needs them)."""
    if metadata.configuration.get(ENABLE_IN_COMMIT_TIMESTAMPS) == "true":
        return metadata
    configuration = {**metadata.configuration, ENABLE_IN_COMMIT_TIMESTAMPS: "true"}
    return metadata.model_copy(update={"configuration": configuration})


def collect_staged_garbage(coordinator: ManagedTableCoordinator, grace_s: float) -> list[str]:
    """Delete the staged files of ``coordinator``'s table that were never
    ratified and are older than ``grace_s`` (a younger one may belong to a
    commit still on its way); returns their names.

    Kept: files a held ratified commit names, and files of a published
    version whose content is the published file (the ratified one).
    """
    held = {c.staged_name for c in coordinator.ratified_store.ratified(coordinator.table_id)}
    now_ms = time.time() * 1000
    deleted = []
    for item in coordinator.store.list_dir(STAGED_COMMITS_DIR):
        if item.kind is not LogFileKind.STAGED_COMMIT or item.name in held:
            continue
        if now_ms - item.modification_time < grace_s * 1000:
            continue
        if item.version is not None and _is_published_copy(coordinator, item.version, item.name):
            continue
        coordinator.store.delete(item.name)
        deleted.append(item.name)
    return deleted


def _is_published_copy(coordinator: ManagedTableCoordinator, version: int, name: str) -> bool:
    """Whether staged file ``name`` holds what ``<version>.json`` holds."""
    try:
        return coordinator.store.read(name) == coordinator.store.read(commit_name(version))
    except FileNotFoundError:
        return False


__all__ = ["CatalogActor", "CatalogSettings", "catalog_actor_name", "managed_protocol"]
