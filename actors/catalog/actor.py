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

The actor is composed, not inherited: it holds its parts, each given the
state it needs in its constructor, and answers with them —
:class:`~raydelta.actors.catalog.managed.ManagedTables` (the coordinators,
the group ratifier, the publisher),
:class:`~raydelta.actors.catalog.locations.CatalogLocations` (where tables
may live), :class:`~raydelta.actors.catalog.lifecycle.TableLifecycle`
(create, upgrade, drop) and the
:class:`~raydelta.actors.catalog.unity.service.UnityCatalogService`, whose
operations run through the one entry point :meth:`CatalogActor.unity`.

Invariants:
- Calls run on several threads (a threaded actor); everything that reads or
  changes a table's state runs under one lock, shared by every part. A
  commit is checked, rebased and numbered under the lock, then made durable
  outside it by the group commit (:mod:`raydelta.actors.catalog.group_commit`):
  commits that arrive together share one store transaction, and each client
  is answered only after the transaction holding its commit is durable.
  Reads wait for what was numbered before them to be durable
  (:meth:`GroupRatifier.settle`), so nobody sees a version the store may
  not have.
- ``max_restarts=-1``, ``max_task_retries=-1``: a dead process is restarted
  and the calls in flight are retried; everything is rebuilt from the store
  and the tables' storage (:meth:`ManagedTables.recover` republishes what was
  ratified and not yet published), and a retried commit is answered by its
  ``txnId`` with its original version: exactly once.
- Creating, upgrading and dropping tables: :mod:`raydelta.actors.catalog.lifecycle`.
- Every call is authenticated (:mod:`raydelta.actors.catalog.auth`); a
  commit is judged by its content
  (:func:`~raydelta.protocol.privileges.required_privileges`) before
  anything is written.
- Automatic maintenance (:mod:`raydelta.actors.catalog.maintenance`) hears
  of each published version through one hook, from the publisher's thread,
  and never holds up a commit; its own commits come back through
  :meth:`CatalogActor.commit` as the maintenance principal's.
- Backpressure: when a table's ratified-but-unpublished backlog reaches
  ``max_unpublished`` a commit is refused with the retryable
  :class:`~raydelta.protocol.errors.PublishBacklogError` naming the setting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import ray

from raydelta.actors.catalog.auth import ALL_TABLES, Authorizer
from raydelta.actors.catalog.credentials import CredentialService
from raydelta.actors.catalog.lifecycle import UPGRADE_OPERATION, TableLifecycle, managed_protocol
from raydelta.actors.catalog.locations import CatalogLocations
from raydelta.actors.catalog.maintenance import (
    MAINTENANCE_PRINCIPAL,
    MaintenanceActor,
    MaintenanceHook,
)
from raydelta.actors.catalog.maintenance_jobs import Compactor
from raydelta.actors.catalog.managed import ManagedTables
from raydelta.actors.catalog.settings import CatalogSettings
from raydelta.actors.catalog.tables import ManagedTableCoordinator
from raydelta.actors.catalog.unity.commits import UnityCommitService
from raydelta.actors.catalog.unity.namespaces import NamespaceService
from raydelta.actors.catalog.unity.permissions import PermissionService
from raydelta.actors.catalog.unity.service import UnityCatalogService
from raydelta.actors.catalog.unity.tables import UnityTableService
from raydelta.actors.faults import crash_point
from raydelta.protocol.actions import Action, Metadata, Protocol
from raydelta.protocol.catalog_managed import RatifiedCommits
from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.events import CommitCommitted, CommitReply, CommitRequest
from raydelta.protocol.file_names import STAGED_COMMITS_DIR, LogFileKind, commit_name
from raydelta.protocol.privileges import Privilege, required_privileges
from raydelta.protocol.reconciliation import TableHead
from raydelta.protocol.securables import Securable, SecurableType, parse_securable_type
from raydelta.storage.catalog.external_locations import ExternalLocationRegistry
from raydelta.storage.catalog.namespaces import NamespaceRegistry
from raydelta.storage.catalog.ratified_store import RatifiedCommitStore, TableEntry

logger = logging.getLogger(__name__)


def catalog_actor_name(name: str) -> str:
    return f"catalog:{name}"


COMMIT_ATTEMPTS = 3
"""A commit whose group transaction failed is judged again this many times
at most (its table reloaded from the store first)."""


@ray.remote(  # type: ignore[call-overload]  # the stubs lack max_concurrency
    num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=32
)
class CatalogActor:
    """See the module docstring. Create through :class:`raydelta.Catalog`."""

    def __init__(
        self,
        store: RatifiedCommitStore,
        settings: CatalogSettings,
        compactor: Compactor | None = None,
    ) -> None:
        self._lock = threading.RLock()
        self._store = store
        self._settings = settings
        self._auth = Authorizer.load(
            enabled=settings.authorization,
            root=settings.root,
            storage_options=settings.storage_options,
        )
        self._bootstrap_token = self._auth.bootstrap() if self._auth.enabled else None
        recorded = Authorizer.recorded(settings.root, settings.storage_options)
        if not self._auth.enabled and recorded is None:
            self._auth.save()  # records "authorization": false (raydelta catalog serve reads it)
        self._compactor = compactor
        self._maintenance_token = self._maintenance_principal()
        self._maintenance = MaintenanceHook(
            enabled=settings.maintenance.enabled,
            describe=lambda table_id: self._managed.describe(table_id),
            start=self._start_maintenance,
        )
        self._managed = ManagedTables(store, settings, on_published=self._maintenance.published)
        self._locations, self._lifecycle, self._unity = _compose(
            self._lock, self._auth, settings, self._managed
        )
        crash_point("catalog_recover")
        self._managed.recover()
        self._locations.find_overlaps()
        overlaps = self._locations.location_report()
        if overlaps:
            logger.warning(
                "catalog %s: tables whose locations overlap (no credentials until an admin "
                "drops one): %s",
                settings.root,
                sorted({o["table"] for o in overlaps}),
            )

    # --- plumbing ----------------------------------------------------------------------

    def ping(self) -> bool:
        return True

    def take_bootstrap_token(self) -> str | None:
        """The bootstrap principal's token, once (to the catalog's creator)."""
        with self._lock:
            token, self._bootstrap_token = self._bootstrap_token, None
            return token

    def unity(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one operation of the Unity Catalog service (a part's method,
        named by the method itself: :func:`~raydelta.actors.catalog.unity.service.call_unity`)."""
        return self._unity.run(operation, *args, **kwargs)

    def location_report(self) -> list[dict[str, str]]:
        """Tables whose locations overlap another one's (``raydelta status``)."""
        return self._locations.location_report()

    def _managed_table(
        self, name: str, token: str | None, *needed: Privilege
    ) -> ManagedTableCoordinator:
        self._auth.require(self._auth.authenticate(token), name, needed)
        return self._managed.table(name)

    # --- names -------------------------------------------------------------------------

    def resolve(self, name: str, token: str | None) -> TableEntry:
        """Name resolution: the location, and whether the table is catalog-managed."""
        with self._lock:
            self._auth.require(self._auth.authenticate(token), name, [Privilege.READ])
            return self._managed.entry(name)

    def list_tables(self, token: str | None) -> list[TableEntry]:
        with self._lock:
            principal = self._auth.authenticate(token)
            return [
                e for e in self._store.list_tables() if self._auth.privileges(principal, e.name)
            ]

    def drop_table(self, name: str, token: str | None) -> TableEntry:
        """Soft delete: the name goes, the table's files stay."""
        return self._lifecycle.drop(name, token)

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
        """Create the catalog-managed table ``name`` (:mod:`raydelta.actors.catalog.lifecycle`)."""
        return self._lifecycle.create(
            name, token, protocol, metadata, location=location, table_id=table_id, txn_id=txn_id
        )

    def upgrade_table(self, name: str, token: str | None, location: str, txn_id: str) -> TableEntry:
        """Make the filesystem table at ``location`` catalog-managed, as ``name``."""
        return self._lifecycle.upgrade(name, token, location, txn_id)

    # --- reads -------------------------------------------------------------------------

    def version(self, name: str, token: str | None) -> int:
        with self._lock:
            self._managed.ratifier.settle()
            return self._managed_table(name, token, Privilege.READ).version

    def head(self, name: str, token: str | None) -> TableHead:
        with self._lock:
            self._managed.ratifier.settle()
            return self._managed_table(name, token, Privilege.READ).head()

    def tail(
        self, name: str, token: str | None, since_version: int
    ) -> tuple[int, list[tuple[int, list[Action]]] | None]:
        with self._lock:
            self._managed.ratifier.settle()
            coordinator = self._managed_table(name, token, Privilege.READ)
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
            self._managed.ratifier.settle()
            coordinator = self._managed_table(name, token, Privilege.READ)
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
                # ours, or the newest one before a retry's answer
                ticket = self._managed.ratifier.last
            try:
                self._managed.ratifier.wait(ticket)
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

    def _commit_locked(
        self, name: str, token: str | None, request: CommitRequest
    ) -> tuple[ManagedTableCoordinator, CommitReply]:
        """The part of :meth:`commit` under the lock: judge and number it."""
        principal = self._auth.authenticate(token)
        coordinator = self._managed.table(name)
        if coordinator.find_committed(request.txn_id) is not None:
            self._auth.require(principal, name, [Privilege.READ])
            return coordinator, coordinator.commit_proposal(request, ())
        self._managed.require_publish_capacity(coordinator.table_id, name)
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
            self._managed.ratifier.settle()
            coordinator = self._managed_table(name, token, Privilege.WRITE)
            table_id, latest = coordinator.table_id, coordinator.version
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            published = self._store.published_version(table_id)
            if (published is not None and published >= latest) or time.monotonic() >= deadline:
                return published, latest
            time.sleep(0.002)

    def _maintenance_principal(self) -> str | None:
        """With authorization on, a fresh token for :data:`MAINTENANCE_PRINCIPAL`
        (READ and WRITE on every table: OPTIMIZE and VACUUM change no metadata),
        issued when the catalog starts or turns authorization on, so it is listed
        and granted like any principal. Also with automatic maintenance off: the
        jobs clients ask for (``CatalogTable.maintain``) commit as it too."""
        if not self._auth.enabled:
            return None
        token = self._auth.issue_token(MAINTENANCE_PRINCIPAL)
        self._auth.grant(MAINTENANCE_PRINCIPAL, ALL_TABLES, [Privilege.READ, Privilege.WRITE])
        return token

    def _start_maintenance(self) -> Any:
        """The maintenance actor, owned by this process; with authorization on it
        commits as :data:`MAINTENANCE_PRINCIPAL`."""
        me = ray.get_runtime_context().current_actor
        return MaintenanceActor.remote(  # type: ignore[attr-defined]  # a Ray actor class
            me,
            self._maintenance_token,
            self._settings.maintenance,
            self._settings.storage_options,
            self._compactor,
        )

    def maintenance_target(
        self, name: str, token: str | None, wait_s: float = 30.0
    ) -> tuple[Any, str, str, int | None]:
        """For a client asking the catalog to maintain ``name`` (needs WRITE):
        ``(maintenance actor, table id, location, newest published version)``,
        publishing given up to ``wait_s`` to reach the latest version."""
        published, _latest = self.maintenance_version(name, token, wait_s)
        with self._lock:
            coordinator = self._managed.table(name)
            table_id, location = coordinator.table_id, coordinator.table_uri
        return self._maintenance.actor(), table_id, location, published

    def maintenance_status(self) -> list[dict[str, Any]]:
        """Per managed table: what the automatic maintenance ran and runs
        (``raydelta status``); empty before the first published version."""
        actor = self._maintenance.started()
        if actor is None:
            return []
        status: list[dict[str, Any]] = ray.get(actor.status.remote())
        return status

    # --- principals --------------------------------------------------------------------

    def authorization_enabled(self) -> bool:
        return self._auth.enabled

    def enable_authorization(self) -> str | None:
        """Turn authorization on (it stays on: recorded in the registry) and
        return the bootstrap token; None when it was on already."""
        with self._lock:
            bootstrap = self._auth.enable()
            if bootstrap is not None:
                self._maintenance_token = self._maintenance_principal()
        if bootstrap is not None:
            self._maintenance.restart()  # it ran without a token: commits need one now
        return bootstrap

    def create_principal(self, principal: str, token: str | None) -> str:
        """A token for ``principal`` (the admin only; an existing principal's old
        token stops working): :meth:`PermissionService.create_principal`."""
        return self._unity.permissions.create_principal(token, principal, exist_ok=True)

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
            self._auth.require_enabled(f"granting {principal!r} privileges")
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
            self._auth.require_enabled(f"revoking privileges of {principal!r}")
            securable = _securable(securable_type, name)
            self._auth.require_on(self._auth.authenticate(token), securable, [Privilege.OWN])
            self._auth.revoke_on(principal, securable, privileges)

    # --- publishing ----------------------------------------------------------------------

    def publish_status(self, name: str) -> dict[str, Any]:
        with self._lock:
            entry = self._managed.entry(name)
        return {
            "published_through": self._store.published_version(entry.table_id),
            "latest_version": self._store.latest_version(entry.table_id),
            "backlog": self._managed.publisher.backlog(entry.table_id),
            "error": self._managed.publisher.errors().get(entry.table_id),
        }

    def wait_published(self, name: str, version: int, timeout_s: float = 30.0) -> bool:
        """Block until ``<version>.json`` is published and verified (or time out)."""
        with self._lock:
            entry = self._managed.entry(name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            published = self._store.published_version(entry.table_id)
            if published is not None and published >= version:
                return True
            time.sleep(0.002)
        return False

    def publish_lags_ms(self, clear: bool = False) -> list[float]:
        lags = self._managed.publisher.lags_ms()
        if clear:
            self._managed.publisher.clear_lags()
        return lags

    def group_commit_stats(self) -> dict[str, int]:
        """Store transactions written by the group commit, and the ratifications
        they held (their ratio is the mean group size)."""
        return {
            "transactions": self._managed.ratifier.transactions,
            "ratified": self._managed.ratifier.ratified,
        }

    def pause_publishing(self, paused: bool) -> None:
        self._managed.publisher.pause(paused)

    def collect_staged_garbage(
        self, name: str, token: str | None, older_than_s: float | None = None
    ) -> list[str]:
        """Delete staged files no ratified commit names (older than the grace period)."""
        with self._lock:
            self._managed.ratifier.settle()
            coordinator = self._managed_table(name, token, Privilege.OWN)
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


def _compose(
    lock: threading.RLock,
    auth: Authorizer,
    settings: CatalogSettings,
    managed: ManagedTables,
) -> tuple[CatalogLocations, TableLifecycle, UnityCatalogService]:
    """The catalog's services, each given what it needs (the module docstring)."""
    options = settings.storage_options
    namespaces = NamespaceRegistry.load(root=settings.root, storage_options=options)
    external = ExternalLocationRegistry.load(root=settings.root, storage_options=options)
    store = managed.store
    locations = CatalogLocations(
        lock=lock,
        store=store,
        auth=auth,
        settings=settings,
        namespaces=namespaces,
        external=external,
    )
    lifecycle = TableLifecycle(
        lock=lock, auth=auth, settings=settings, tables=managed, locations=locations
    )
    schemas = NamespaceService(
        lock=lock,
        auth=auth,
        settings=settings,
        store=store,
        namespaces=namespaces,
        lifecycle=lifecycle,
    )
    tables = UnityTableService(
        lock=lock,
        auth=auth,
        settings=settings,
        tables=managed,
        namespaces=namespaces,
        schemas=schemas,
        locations=locations,
        lifecycle=lifecycle,
    )
    unity = UnityCatalogService(
        namespaces=schemas,
        tables=tables,
        commits=UnityCommitService(lock=lock, auth=auth, tables=managed, describe=tables),
        locations=locations,
        credentials=CredentialService(
            lock=lock,
            auth=auth,
            settings=settings,
            tables=managed,
            namespaces=namespaces,
            locations=locations,
        ),
        permissions=PermissionService(
            lock=lock, auth=auth, store=store, namespaces=namespaces, external=external
        ),
    )
    return locations, lifecycle, unity


__all__ = [
    "UPGRADE_OPERATION",
    "CatalogActor",
    "CatalogSettings",
    "catalog_actor_name",
    "managed_protocol",
]
